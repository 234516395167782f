#include "cli/local_prometheus.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/fake_http_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

std::string TempRoot() {
  const std::string root =
      ::testing::TempDir() + "/local_prometheus_test_" +
      std::to_string(getpid()) + "_" +
      ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  return root;
}

void Touch(const std::string& path, const std::string& text = "") {
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

const std::vector<ScrapeTarget> kTargets = {
    {kControllerScrapeJob, "127.0.0.1:40001", ""},
    {kWorkerScrapeJob, "127.0.0.1:40002", "worker-0"},
    {kWorkerScrapeJob, "127.0.0.1:40003", "worker-1"}};

TEST(PrometheusConfigTest, OneJobPerRoleWithWorkerLabels) {
  const std::string yaml = PrometheusConfigYaml(
      kTargets, {"/src/deploy/prometheus/rules/meshcast-alerts.yml"},
      absl::Seconds(1));
  EXPECT_THAT(yaml, HasSubstr("global:\n"
                              "  scrape_interval: 1s\n"
                              "  evaluation_interval: 1s\n"));
  EXPECT_THAT(yaml, HasSubstr("rule_files:\n"
                              "  - \"/src/deploy/prometheus/rules/"
                              "meshcast-alerts.yml\"\n"));
  EXPECT_THAT(yaml, HasSubstr("scrape_configs:\n"
                              "  - job_name: \"meshcast-controller\"\n"
                              "    static_configs:\n"
                              "      - targets: [\"127.0.0.1:40001\"]\n"
                              "  - job_name: \"meshcast-worker\"\n"
                              "    static_configs:\n"
                              "      - targets: [\"127.0.0.1:40002\"]\n"
                              "        labels: {worker: \"worker-0\"}\n"
                              "      - targets: [\"127.0.0.1:40003\"]\n"
                              "        labels: {worker: \"worker-1\"}\n"));
}

TEST(PrometheusConfigTest, NoRuleFilesAndSubSecondInterval) {
  const std::string yaml =
      PrometheusConfigYaml(kTargets, {}, absl::Milliseconds(500));
  EXPECT_THAT(yaml, Not(HasSubstr("rule_files")));
  EXPECT_THAT(yaml, HasSubstr("scrape_interval: 500ms\n"));
}

// The configuration is what the real Prometheus accepts.
TEST(PrometheusConfigTest, PromtoolAcceptsIt) {
  const char* promtool = "/usr/bin/promtool";
  if (access(promtool, X_OK) != 0) {
    GTEST_SKIP() << "no " << promtool << " (Debian package prometheus)";
  }
  const std::string root = TempRoot();
  const std::string rules = root + "/rules/meshcast.rules.yml";
  Touch(rules,
        "groups:\n  - name: t\n    rules:\n      - record: x:up:sum\n"
        "        expr: sum(up)\n");
  const std::string config = root + "/prometheus.yml";
  Touch(config, PrometheusConfigYaml(kTargets, {rules}, absl::Seconds(1)));
  const std::string command = absl::StrCat(promtool, " check config ", config,
                                           " > ", root, "/promtool.out 2>&1");
  const int status = std::system(command.c_str());
  std::ifstream in(root + "/promtool.out");
  const std::string output((std::istreambuf_iterator<char>(in)),
                           std::istreambuf_iterator<char>());
  EXPECT_EQ(status, 0) << output;
  EXPECT_THAT(output, HasSubstr("1 rules found"));
}

TEST(SourceTreeTest, FoundFromABuildTreeInsideTheSources) {
  const std::string root = TempRoot();
  Touch(root + "/src/deploy/prometheus/rules/meshcast-alerts.yml");
  std::filesystem::create_directories(root + "/src/build-x/cli");
  std::filesystem::create_directories(root + "/elsewhere");
  std::optional<std::string> tree =
      FindSourceTree({root + "/elsewhere", root + "/src/build-x/cli"});
  ASSERT_TRUE(tree.has_value());
  EXPECT_EQ(*tree, std::filesystem::canonical(root + "/src").string());

  // Dashboards alone also mark a source tree.
  std::filesystem::create_directories(root + "/other/dashboards/provisioning");
  tree = FindSourceTree({root + "/other"});
  ASSERT_TRUE(tree.has_value());
  EXPECT_EQ(*tree, std::filesystem::canonical(root + "/other").string());
}

TEST(SourceTreeTest, OnlyAFewLevelsUp) {
  const std::string root = TempRoot();
  Touch(root + "/src/deploy/prometheus/rules/meshcast-alerts.yml");
  std::filesystem::create_directories(root + "/src/a/b/c/d");
  EXPECT_TRUE(FindSourceTree({root + "/src/a/b/c"}).has_value());
  EXPECT_FALSE(FindSourceTree({root + "/src/a/b/c/d"}).has_value());
  EXPECT_FALSE(FindSourceTree({"", root + "/missing"}).has_value());
}

TEST(SourceTreeTest, AlertRuleFiles) {
  const std::string root = TempRoot();
  const std::string prometheus = root + "/deploy/prometheus";
  Touch(prometheus + "/rules/b.yml");
  Touch(prometheus + "/rules/a.yaml");
  Touch(prometheus + "/rules/README.txt");
  Touch(prometheus + "/extra.rules.yml");
  Touch(prometheus + "/prometheus.yml");  // a config, not rules
  Touch(prometheus + "/tests/meshcast-alerts.test.yml");
  EXPECT_THAT(AlertRuleFiles(root), ElementsAre(prometheus + "/extra.rules.yml",
                                                prometheus + "/rules/a.yaml",
                                                prometheus + "/rules/b.yml"));
  EXPECT_THAT(AlertRuleFiles(root + "/nothing"), IsEmpty());
}

TEST(FreePortTest, PortCanBeBound) {
  absl::StatusOr<int> port = PickFreeLoopbackPort();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  FakeHttpServer server(
      [](const std::string&) {
        return FakeHttpServer::Reply{200, ""};
      },
      *port);
  EXPECT_EQ(server.port(), *port);
}

constexpr char kTargetsAllUp[] = R"({"status": "success", "data": {
  "activeTargets": [
    {"labels": {"job": "meshcast-controller", "instance": "127.0.0.1:1"},
     "health": "up", "lastError": ""},
    {"labels": {"job": "meshcast-worker", "instance": "127.0.0.1:2",
                "worker": "worker-0"}, "health": "up", "lastError": ""}],
  "droppedTargets": []}})";

constexpr char kTargetsOneDown[] = R"({"status": "success", "data": {
  "activeTargets": [
    {"labels": {"job": "meshcast-controller", "instance": "127.0.0.1:1"},
     "health": "up", "lastError": ""},
    {"labels": {"job": "meshcast-worker", "instance": "127.0.0.1:2",
                "worker": "worker-0"}, "health": "down",
     "lastError": "connection refused"}],
  "droppedTargets": []}})";

TEST(TargetsTest, ParsesHealth) {
  absl::StatusOr<TargetsHealth> health = ParseTargetsResponse(kTargetsAllUp);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->up, 2);
  EXPECT_THAT(health->not_up, IsEmpty());

  health = ParseTargetsResponse(kTargetsOneDown);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->up, 1);
  EXPECT_THAT(health->not_up,
              ElementsAre("meshcast-worker 127.0.0.1:2 (worker-0): down: "
                          "connection refused"));

  for (const std::string bad :
       {"", "[]", R"({"status": "error"})",
        R"({"status": "success", "data": {"activeTargets": 3}})"}) {
    EXPECT_FALSE(ParseTargetsResponse(bad).ok()) << bad;
  }
}

TEST(WaitForPrometheusTest, WaitsForReadyThenForEveryTarget) {
  std::atomic<int> ready_calls{0}, target_calls{0};
  FakeHttpServer server([&](const std::string& path) {
    if (path == "/-/ready") {
      return ready_calls++ < 2 ? FakeHttpServer::Reply{503, "not ready"}
                               : FakeHttpServer::Reply{200, "ready"};
    }
    if (path == "/api/v1/targets?state=active") {
      return target_calls++ < 2 ? FakeHttpServer::Reply{200, kTargetsOneDown}
                                : FakeHttpServer::Reply{200, kTargetsAllUp};
    }
    return FakeHttpServer::Reply{404, ""};
  });
  int alive_checks = 0;
  const absl::Status status = WaitForPrometheus(
      server.address(), 2, absl::Now() + absl::Seconds(20), [&alive_checks] {
        ++alive_checks;
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(ready_calls.load(), 3);
  EXPECT_EQ(target_calls.load(), 3);
  EXPECT_GE(alive_checks, 5);
}

TEST(WaitForPrometheusTest, TimeoutSaysWhichTargetIsDown) {
  FakeHttpServer server([](const std::string& path) {
    if (path == "/-/ready") return FakeHttpServer::Reply{200, "ready"};
    return FakeHttpServer::Reply{200, kTargetsOneDown};
  });
  const absl::Status status = WaitForPrometheus(
      server.address(), 2, absl::Now() + absl::Milliseconds(500), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("did not see every daemon up"));
  EXPECT_THAT(status.message(),
              HasSubstr("1 of 2 targets up; meshcast-worker 127.0.0.1:2 "
                        "(worker-0): down: connection refused"));
}

TEST(WaitForPrometheusTest, MoreTargetsThanExpectedIsNotDone) {
  FakeHttpServer server([](const std::string& path) {
    if (path == "/-/ready") return FakeHttpServer::Reply{200, "ready"};
    return FakeHttpServer::Reply{200, kTargetsAllUp};
  });
  const absl::Status status = WaitForPrometheus(
      server.address(), 3, absl::Now() + absl::Milliseconds(300), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("2 of 3 targets up"));
}

TEST(WaitForPrometheusTest, NotReadyAndDeadProcess) {
  absl::StatusOr<int> port = PickFreeLoopbackPort();
  ASSERT_TRUE(port.ok());
  const std::string address = absl::StrCat("127.0.0.1:", *port);
  absl::Status status = WaitForPrometheus(
      address, 1, absl::Now() + absl::Milliseconds(300), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("was not ready in time"));

  // A process that died ends the wait at once with its error.
  const absl::Time start = absl::Now();
  status = WaitForPrometheus(address, 1, absl::Now() + absl::Seconds(30), [] {
    return absl::FailedPreconditionError("prometheus exited with status 1");
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(GrafanaInstructionsTest, NamesTheDataSourceAndDashboards) {
  std::string text =
      GrafanaInstructions("http://127.0.0.1:9999", std::string("/src"));
  EXPECT_THAT(text, HasSubstr("URL http://127.0.0.1:9999, uid prometheus"));
  EXPECT_THAT(text, HasSubstr("import /src/dashboards/*.json"));
  EXPECT_THAT(text,
              HasSubstr("-e MESHCAST_PROMETHEUS_URL=http://127.0.0.1:9999"));
  EXPECT_THAT(text, HasSubstr("-v /src/dashboards/provisioning/datasources:"
                              "/etc/grafana/provisioning/datasources:ro"));
  text = GrafanaInstructions("http://127.0.0.1:9999", std::nullopt);
  EXPECT_THAT(text, HasSubstr("$MESHCAST_SRC/dashboards"));
}

}  // namespace
}  // namespace meshcast::cli
