// The pieces of `meshctl up --monitoring` that concern the local
// Prometheus server: its configuration, where the repository's alert rules
// and dashboards are, a free port, and waiting until it scrapes every
// daemon. cluster_commands.cc starts the process itself.
//
//   std::vector<ScrapeTarget> targets = {
//       {kControllerScrapeJob, "127.0.0.1:40001", ""},
//       {kWorkerScrapeJob, "127.0.0.1:40002", "worker-0"}};
//   std::optional<std::string> tree = FindSourceTree({meshctl_dir, cwd});
//   std::string yaml = PrometheusConfigYaml(
//       targets, tree ? AlertRuleFiles(*tree) : {}, absl::Seconds(1));
//   ... start /usr/bin/prometheus --config.file=... ...
//   RETURN_IF_ERROR(WaitForPrometheus("127.0.0.1:9090", targets.size(),
//                                     deadline, check_alive));
//
// The scrape jobs and the `worker` target label are what the dashboards and
// the alert rules expect (docs/monitoring.md, "Scraping meshcast").
//
// Thread safety: pure functions, except WaitForPrometheus, which blocks
// (polling over HTTP) and is reentrant.
#ifndef MESHCAST_CLI_LOCAL_PROMETHEUS_H_
#define MESHCAST_CLI_LOCAL_PROMETHEUS_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace meshcast::cli {

inline constexpr char kControllerScrapeJob[] = "meshcast-controller";
inline constexpr char kWorkerScrapeJob[] = "meshcast-worker";
// Where Debian's `prometheus` package installs the server.
inline constexpr char kDefaultPrometheusBinary[] = "/usr/bin/prometheus";

struct ScrapeTarget {
  std::string job;      // kControllerScrapeJob or kWorkerScrapeJob
  std::string address;  // host:port of the daemon's /metrics
  std::string worker;   // the worker's --name; empty for the controller
};

// prometheus.yml for `targets`: one scrape job per distinct `job` (in order
// of first appearance), each target with a `worker` label when it has one;
// scrape and rule evaluation every `interval`; `rule_files` listed as given
// (absolute paths), or no rule_files key when empty.
std::string PrometheusConfigYaml(const std::vector<ScrapeTarget>& targets,
                                 const std::vector<std::string>& rule_files,
                                 absl::Duration interval);

// The root of a meshcast source tree: the first of `start_dirs` or their
// ancestors (nearest first, a few levels up) that holds
// deploy/prometheus/rules or dashboards/provisioning. meshctl passes its
// own directory (a build tree sits inside or beside the sources) and the
// working directory.
std::optional<std::string> FindSourceTree(
    const std::vector<std::string>& start_dirs);

// The alert rule files of a source tree: deploy/prometheus/rules/*.yml and
// *.yaml, and deploy/prometheus/*rules*.yml / *.yaml, absolute and sorted.
std::vector<std::string> AlertRuleFiles(const std::string& source_tree);

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read
// it, close). Another process may take it before the caller binds it.
absl::StatusOr<int> PickFreeLoopbackPort();

// What /api/v1/targets says about the active targets.
struct TargetsHealth {
  int up = 0;
  // One entry per target not up: "meshcast-worker 127.0.0.1:4242 (worker-1):
  // down: <last error>".
  std::vector<std::string> not_up;
};

// Parses the body of GET /api/v1/targets. INTERNAL when it is not the
// Prometheus API's JSON.
absl::StatusOr<TargetsHealth> ParseTargetsResponse(const std::string& body);

// Polls the Prometheus at `address` (127.0.0.1:PORT) until GET /-/ready
// answers 200 and /api/v1/targets lists `expected_targets` active targets,
// all up; calls `check_alive` between polls and returns its error at once
// (a process that died). DEADLINE_EXCEEDED after `deadline`, saying what
// was still missing.
absl::Status WaitForPrometheus(
    const std::string& address, int expected_targets, absl::Time deadline,
    const std::function<absl::Status()>& check_alive);

// How to point Grafana at the Prometheus at `prometheus_url`: the data
// source (uid `prometheus`, as the dashboards expect) and the dashboards,
// with paths into `source_tree` when known. Lines end in '\n'.
std::string GrafanaInstructions(const std::string& prometheus_url,
                                const std::optional<std::string>& source_tree);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_LOCAL_PROMETHEUS_H_
