#include "util/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/metrics_http_server.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::shared_ptr<prometheus::Registry> NewRegistry() {
  return std::make_shared<prometheus::Registry>();
}

TEST(MetricsTest, ExponentialBuckets) {
  EXPECT_THAT(ExponentialBuckets(1e-3, 4, 4),
              ElementsAre(1e-3, 4e-3, 16e-3, 64e-3));
  EXPECT_THAT(ExponentialBuckets(1, 2, 0), ElementsAre());
}

TEST(MetricsTest, RenderMetricsIsTheExpositionFormat) {
  auto registry = NewRegistry();
  auto& bytes = prometheus::BuildCounter()
                    .Name("meshcast_test_bytes_total")
                    .Help("Bytes.")
                    .Register(*registry);
  bytes.Add({{"link", "inter"}}).Increment(1024);
  bytes.Add({{"link", "inter"}}).Increment(1);
  bytes.Add({{"link", "intra"}}).Increment(2);
  const std::string text = RenderMetrics(*registry);
  EXPECT_THAT(text, HasSubstr("# HELP meshcast_test_bytes_total Bytes.\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE meshcast_test_bytes_total counter\n"));
  EXPECT_THAT(text,
              HasSubstr("meshcast_test_bytes_total{link=\"inter\"} 1025\n"));
  EXPECT_THAT(text, HasSubstr("meshcast_test_bytes_total{link=\"intra\"} 2\n"));
}

TEST(MetricsTest, FindSampleMatchesNameAndWholeLabelSet) {
  const std::string text =
      "# HELP meshcast_test_bytes_total Bytes.\n"
      "# TYPE meshcast_test_bytes_total counter\n"
      "meshcast_test_bytes_total{backend=\"gloo\",link=\"inter\"} 1536\n"
      "meshcast_test_bytes_total{backend=\"gloo\",link=\"intra\"} 5\n"
      "meshcast_test_bytes 7\n"
      "meshcast_test_stamped 3 1700000000000\n"
      "meshcast_test_info{version=\"a\\\"b\\\\c\"} 1\n";
  // Labels in any order; all of them must match.
  EXPECT_EQ(FindSample(text,
                       "meshcast_test_bytes_total{link=\"inter\",backend=\"gloo\"}"),
            1536);
  EXPECT_EQ(FindSample(text,
                       "meshcast_test_bytes_total{backend=\"gloo\",link=\"intra\"}"),
            5);
  EXPECT_EQ(FindSample(text, "meshcast_test_bytes"), 7);
  EXPECT_EQ(FindSample(text, "meshcast_test_stamped"), 3);
  EXPECT_EQ(FindSample(text, "meshcast_test_info{version=\"a\\\"b\\\\c\"}"), 1);
  // Neither a prefix, a subset of the labels, nor a missing series matches.
  EXPECT_EQ(FindSample(text, "meshcast_test_bytes_total"), std::nullopt);
  EXPECT_EQ(FindSample(text, "meshcast_test_bytes_total{link=\"inter\"}"),
            std::nullopt);
  EXPECT_EQ(FindSample(text, "meshcast_test"), std::nullopt);
  EXPECT_EQ(FindSample(text, "meshcast_test_info{version=\"abc\"}"),
            std::nullopt);
  EXPECT_EQ(FindSample(text, "meshcast_test_info{version=\"a"), std::nullopt);
}

TEST(MetricsTest, CollectionRefreshesAtEveryCollect) {
  MetricsCollection metrics;
  auto& workers = metrics.AddGauge("meshcast_test_workers", "Workers.");
  int calls = 0;
  metrics.SetRefresh([&] {
    ++calls;
    workers.Add({{"state", "ready"}}).Set(calls * 3);
  });
  EXPECT_EQ(FindSample(RenderMetrics(metrics),
                       "meshcast_test_workers{state=\"ready\"}"),
            3);
  EXPECT_EQ(FindSample(RenderMetrics(metrics),
                       "meshcast_test_workers{state=\"ready\"}"),
            6);
  EXPECT_EQ(calls, 2);
}

TEST(MetricsTest, DeclaredFamiliesAppearBeforeTheirFirstSample) {
  MetricsCollection metrics;
  auto& bytes = metrics.AddCounter("meshcast_test_bytes_total", "Bytes.");
  metrics.AddHistogram("meshcast_test_seconds", "Time.");
  metrics.AddGauge("meshcast_test_up", "Up.").Add({}).Set(1);
  std::string text = RenderMetrics(metrics);
  // In declaration order, with HELP and TYPE, samples only where there are.
  EXPECT_EQ(text,
            "# HELP meshcast_test_bytes_total Bytes.\n"
            "# TYPE meshcast_test_bytes_total counter\n"
            "# HELP meshcast_test_seconds Time.\n"
            "# TYPE meshcast_test_seconds histogram\n"
            "# HELP meshcast_test_up Up.\n"
            "# TYPE meshcast_test_up gauge\n"
            "meshcast_test_up 1\n");
  bytes.Add({{"link", "inter"}}).Increment(2);
  text = RenderMetrics(metrics);
  EXPECT_EQ(FindSample(text, "meshcast_test_bytes_total{link=\"inter\"}"), 2);
  EXPECT_EQ(text.find("# TYPE meshcast_test_bytes_total counter"),
            text.rfind("# TYPE meshcast_test_bytes_total counter"));
}

TEST(MetricsTest, DeclaringANameTwice) {
  MetricsCollection metrics;
  auto& first = metrics.AddCounter("meshcast_test_total", "T.");
  EXPECT_EQ(&metrics.AddCounter("meshcast_test_total", "T."), &first);
  EXPECT_THROW(metrics.AddGauge("meshcast_test_total", "T."),
               std::invalid_argument);
}

TEST(MetricsTest, HistogramRoundTripsThroughFindSample) {
  auto registry = NewRegistry();
  auto& h = prometheus::BuildHistogram()
                .Name("meshcast_test_seconds")
                .Help("Time.")
                .Register(*registry)
                .Add({{"op", "broadcast"}}, ExponentialBuckets(0.1, 10, 3));
  for (double v : {0.05, 0.5, 0.5, 100.0}) h.Observe(v);
  const std::string text = RenderMetrics(*registry);
  EXPECT_EQ(FindSample(text,
                       "meshcast_test_seconds_bucket{op=\"broadcast\",le=\"0.1\"}"),
            1);
  EXPECT_EQ(FindSample(text,
                       "meshcast_test_seconds_bucket{op=\"broadcast\",le=\"1\"}"),
            3);
  EXPECT_EQ(FindSample(text,
                       "meshcast_test_seconds_bucket{le=\"+Inf\",op=\"broadcast\"}"),
            4);
  EXPECT_EQ(FindSample(text, "meshcast_test_seconds_count{op=\"broadcast\"}"), 4);
  EXPECT_DOUBLE_EQ(
      *FindSample(text, "meshcast_test_seconds_sum{op=\"broadcast\"}"), 101.05);
}

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: x\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) resp.append(buf, n);
  close(fd);
  return resp;
}

TEST(MetricsHttpServerTest, ServesMetricsOverHttp) {
  auto registry = NewRegistry();
  prometheus::BuildCounter()
      .Name("meshcast_test_requests_total")
      .Help("Requests.")
      .Register(*registry)
      .Add({})
      .Increment(7);
  auto server = MetricsHttpServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  std::string resp = HttpGet((*server)->port(), "/metrics");
  EXPECT_THAT(resp, HasSubstr("200 OK"));
  EXPECT_THAT(resp, HasSubstr("text/plain"));
  EXPECT_THAT(resp, HasSubstr("meshcast_test_requests_total 7\n"));
}

TEST(MetricsHttpServerTest, PortInUseIsAnError) {
  auto registry = NewRegistry();
  auto first = MetricsHttpServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(first.ok());
  auto second = MetricsHttpServer::Start(
      "127.0.0.1:" + std::to_string((*first)->port()), registry);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("address in use"));
}

TEST(MetricsHttpServerTest, EmptyAddressAndNoMetricsAreRefused) {
  EXPECT_EQ(MetricsHttpServer::Start("", NewRegistry()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsHttpServer::Start("127.0.0.1:0", nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace meshcast
