#include "cli/http_get.h"

#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/fake_http_server.h"
#include "cli/local_prometheus.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(HttpGetTest, ReturnsStatusAndBody) {
  FakeHttpServer server([](const std::string& path) {
    if (path == "/-/ready") return FakeHttpServer::Reply{200, "ready\n"};
    return FakeHttpServer::Reply{404, "no " + path};
  });
  absl::StatusOr<HttpResponse> response =
      HttpGet(server.address(), "/-/ready", absl::Seconds(5));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status_code, 200);
  EXPECT_EQ(response->body, "ready\n");

  response = HttpGet(server.address(), "/api/v1/targets?state=active",
                     absl::Seconds(5));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status_code, 404);
  EXPECT_EQ(response->body, "no /api/v1/targets?state=active");
  EXPECT_THAT(server.paths(),
              ElementsAre("/-/ready", "/api/v1/targets?state=active"));
}

TEST(HttpGetTest, LargeBodyArrivesWhole) {
  const std::string big(300000, 'x');
  FakeHttpServer server([&big](const std::string&) {
    return FakeHttpServer::Reply{200, big};
  });
  absl::StatusOr<HttpResponse> response =
      HttpGet(server.address(), "/", absl::Seconds(5));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->body.size(), big.size());
  EXPECT_EQ(response->body, big);
}

TEST(HttpGetTest, RefusedConnectionIsUnavailable) {
  absl::StatusOr<int> port = PickFreeLoopbackPort();
  ASSERT_TRUE(port.ok());
  absl::StatusOr<HttpResponse> response =
      HttpGet(absl::StrCat("127.0.0.1:", *port), "/", absl::Seconds(2));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
}

TEST(HttpGetTest, SilentServerTimesOut) {
  FakeHttpServer server([](const std::string&) {
    FakeHttpServer::Reply reply;
    reply.silent = true;
    return reply;
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<HttpResponse> response =
      HttpGet(server.address(), "/", absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(response.status().message(), HasSubstr("no reply in time"));
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(3));
}

TEST(HttpGetTest, NonHttpReplyIsAnError) {
  FakeHttpServer server([](const std::string&) {
    FakeHttpServer::Reply reply;
    reply.raw = "SSH-2.0-OpenSSH\r\n";
    return reply;
  });
  absl::StatusOr<HttpResponse> response =
      HttpGet(server.address(), "/", absl::Seconds(5));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(response.status().message(), HasSubstr("not an HTTP reply"));
}

TEST(HttpGetTest, BadAddressOrPath) {
  for (const std::string address : {"localhost:80", "127.0.0.1", "127.0.0.1:0",
                                    "127.0.0.1:70000", "127.0.0.1:http"}) {
    absl::StatusOr<HttpResponse> response =
        HttpGet(address, "/", absl::Seconds(1));
    ASSERT_FALSE(response.ok()) << address;
    EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument)
        << address;
  }
  absl::StatusOr<HttpResponse> response =
      HttpGet("127.0.0.1:80", "ready", absl::Seconds(1));
  ASSERT_FALSE(response.ok());
  EXPECT_THAT(response.status().message(), HasSubstr("must start with '/'"));
}

}  // namespace
}  // namespace meshcast::cli
