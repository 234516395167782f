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

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTest, CounterWithLabelsRenders) {
  MetricsRegistry registry;
  auto& bytes = registry.AddCounter("meshcast_test_bytes_total", "Bytes.",
                                    {"link"});
  bytes.WithLabels({"inter"}).Increment(1024);
  bytes.WithLabels({"inter"}).Increment(1);
  bytes.WithLabels({"intra"}).Increment(2);
  bytes.WithLabels({"inter"}).Increment(-5);  // ignored: counters only grow
  std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE meshcast_test_bytes_total counter\n"));
  EXPECT_THAT(text, HasSubstr("meshcast_test_bytes_total{link=\"inter\"} 1025\n"));
  EXPECT_THAT(text, HasSubstr("meshcast_test_bytes_total{link=\"intra\"} 2\n"));
}

TEST(MetricsTest, FindSampleReadsRenderedSeriesExactly) {
  MetricsRegistry registry;
  auto& bytes = registry.AddCounter("meshcast_test_bytes_total", "Bytes.",
                                    {"link"});
  bytes.WithLabels({"inter"}).Increment(1536);
  registry.AddGauge("meshcast_test_bytes", "Other.", {}).WithLabels({}).Set(7);
  const std::string text = registry.Render();
  EXPECT_EQ(FindSample(text, "meshcast_test_bytes_total{link=\"inter\"}"),
            1536);
  EXPECT_EQ(FindSample(text, "meshcast_test_bytes"), 7);
  // Neither a prefix of a series nor a missing one matches.
  EXPECT_EQ(FindSample(text, "meshcast_test_bytes_total"), std::nullopt);
  EXPECT_EQ(FindSample(text, "meshcast_test_bytes_total{link=\"intra\"}"),
            std::nullopt);
}

TEST(MetricsTest, WrongLabelCountIsNotRendered) {
  MetricsRegistry registry;
  auto& c = registry.AddCounter("meshcast_test_total", "T.", {"a"});
  c.WithLabels({"x", "y"}).Increment();
  EXPECT_THAT(registry.Render(), Not(HasSubstr("meshcast_test_total{")));
}

TEST(MetricsTest, GaugeAndHook) {
  MetricsRegistry registry;
  auto& g = registry.AddGauge("meshcast_test_workers", "Workers.", {"state"});
  int calls = 0;
  registry.AddCollectHook([&] {
    ++calls;
    g.WithLabels({"ready"}).Set(3);
  });
  std::string text = registry.Render();
  EXPECT_EQ(calls, 1);
  EXPECT_THAT(text, HasSubstr("meshcast_test_workers{state=\"ready\"} 3\n"));
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  MetricsRegistry registry;
  auto& h = registry.AddHistogram("meshcast_test_seconds", "Time.", {"op"},
                                  {0.1, 1, 10});
  auto& child = h.WithLabels({"broadcast"});
  child.Observe(0.05);
  child.Observe(0.5);
  child.Observe(0.5);
  child.Observe(100);
  std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("meshcast_test_seconds_bucket{op=\"broadcast\",le=\"0.1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("meshcast_test_seconds_bucket{op=\"broadcast\",le=\"1\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("meshcast_test_seconds_bucket{op=\"broadcast\",le=\"10\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("meshcast_test_seconds_bucket{op=\"broadcast\",le=\"+Inf\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("meshcast_test_seconds_count{op=\"broadcast\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("meshcast_test_seconds_sum{op=\"broadcast\"} 101.05\n"));
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  MetricsRegistry registry;
  registry.AddGauge("meshcast_test_info", "Info.", {"version"})
      .WithLabels({"a\"b\\c"})
      .Set(1);
  EXPECT_THAT(registry.Render(), HasSubstr("{version=\"a\\\"b\\\\c\"} 1"));
}

TEST(MetricsTest, ConcurrentIncrementsAreNotLost) {
  MetricsRegistry registry;
  auto& c = registry.AddCounter("meshcast_test_ops_total", "Ops.");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) c.WithLabels({}).Increment();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.WithLabels({}).value(), 40000);
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
  MetricsRegistry registry;
  registry.AddCounter("meshcast_test_requests_total", "Requests.")
      .WithLabels({})
      .Increment(7);
  auto server = MetricsHttpServer::Start("127.0.0.1:0", &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  std::string resp = HttpGet((*server)->port(), "/metrics");
  EXPECT_THAT(resp, HasSubstr("200 OK"));
  EXPECT_THAT(resp, HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(resp, HasSubstr("meshcast_test_requests_total 7\n"));
}

TEST(MetricsHttpServerTest, PortInUseIsAnError) {
  MetricsRegistry registry;
  auto first = MetricsHttpServer::Start("127.0.0.1:0", &registry);
  ASSERT_TRUE(first.ok());
  auto second = MetricsHttpServer::Start(
      "127.0.0.1:" + std::to_string((*first)->port()), &registry);
  EXPECT_FALSE(second.ok());
}

}  // namespace
}  // namespace meshcast
