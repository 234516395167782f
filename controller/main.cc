// meshcast-controller: the control-plane daemon. Serves the Controller gRPC
// service, keeps the worker registry and the job queue, plans jobs and
// pushes per-worker programs to the workers; jobs persist in SQLite.
//
//   meshcast-controller --listen=127.0.0.1:50051 --db=meshcast.db
//   meshcast-controller --listen=127.0.0.1:0 --port-file=/tmp/port
//   meshcast-controller --metrics-port=9401      # Prometheus /metrics
//
// Flags may be written with dashes or underscores (--inter-gbps or
// --inter_gbps). SIGTERM or SIGINT shuts down cleanly: unfinished jobs are
// failed with "controller shut down" and aborted on their workers.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "controller/controller_server.h"
#include "controller/log.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "host:port for the Controller gRPC service; port 0 picks a free "
          "port (printed, and written to --port-file)");
ABSL_FLAG(std::string, db, "meshcast.db",
          "SQLite database file for jobs and events (created if missing)");
ABSL_FLAG(std::string, port_file, "",
          "if set, write the bound port number to this file once serving");
ABSL_FLAG(int, metrics_port, -1,
          "port for Prometheus GET /metrics (docs/metrics.md); 0 picks a free "
          "port (printed, and written to --metrics-port-file); -1 = off");
ABSL_FLAG(std::string, metrics_address, "0.0.0.0",
          "address the metrics port binds (0.0.0.0: every interface, so that "
          "Prometheus in another container can scrape)");
ABSL_FLAG(std::string, metrics_port_file, "",
          "if set, write the bound metrics port to this file once serving");
ABSL_FLAG(double, lease_seconds, 5,
          "a worker without a heartbeat for this long is marked lost and its "
          "jobs fail");
ABSL_FLAG(double, heartbeat_seconds, 1,
          "heartbeat period the controller asks workers to use");
ABSL_FLAG(double, inter_gbps, 10,
          "per-host NIC bandwidth of the topology, Gbit/s each direction");
ABSL_FLAG(double, intra_gbps, 100,
          "per-device bandwidth inside a host, Gbit/s each direction");
ABSL_FLAG(double, task_timeout_seconds, 600,
          "deadline of one job's data-plane run on its workers");

namespace {

// Abseil flags are named with underscores; accept the dashed spelling too.
std::vector<std::string> NormalizeFlagNames(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (i > 0 && arg.size() > 2 && arg.rfind("--", 0) == 0) {
      const size_t end = std::min(arg.find('='), arg.size());
      for (size_t c = 2; c < end; ++c) {
        if (arg[c] == '-') arg[c] = '_';
      }
    }
    args.push_back(std::move(arg));
  }
  return args;
}

bool PositiveFinite(double v) { return std::isfinite(v) && v > 0; }

// Writes "port\n" to `path` through a rename, so a reader never sees a
// partial file.
bool WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << port << "\n";
  out.close();
  return out && std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "meshcast control-plane daemon: worker registry, job queue, planning, "
      "rendezvous store.\nUsage: meshcast-controller [--listen=HOST:PORT] "
      "[--db=PATH] ...");
  std::vector<std::string> normalized = NormalizeFlagNames(argc, argv);
  std::vector<char*> args;
  for (std::string& a : normalized) args.push_back(a.data());
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());

  const double lease = absl::GetFlag(FLAGS_lease_seconds);
  const double heartbeat = absl::GetFlag(FLAGS_heartbeat_seconds);
  const double inter = absl::GetFlag(FLAGS_inter_gbps);
  const double intra = absl::GetFlag(FLAGS_intra_gbps);
  const double task_timeout = absl::GetFlag(FLAGS_task_timeout_seconds);
  if (!PositiveFinite(heartbeat) || !PositiveFinite(lease) ||
      lease <= heartbeat) {
    std::cerr << "meshcast-controller: --lease-seconds (" << lease
              << ") must be greater than --heartbeat-seconds (" << heartbeat
              << ") and both positive\n";
    return 2;
  }
  if (!PositiveFinite(inter) || !PositiveFinite(intra)) {
    std::cerr << "meshcast-controller: --inter-gbps and --intra-gbps must be "
                 "positive (Gbit/s)\n";
    return 2;
  }
  if (!PositiveFinite(task_timeout)) {
    std::cerr << "meshcast-controller: --task-timeout-seconds must be "
                 "positive\n";
    return 2;
  }
  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (metrics_port < -1 || metrics_port > 65535) {
    std::cerr << "meshcast-controller: --metrics-port must be 0..65535 (0: a "
                 "free port) or -1 (off)\n";
    return 2;
  }
  const std::string metrics_address = absl::GetFlag(FLAGS_metrics_address);
  if (metrics_port >= 0 && metrics_address.empty()) {
    std::cerr << "meshcast-controller: --metrics-address must not be empty "
                 "(e.g. 0.0.0.0 or 127.0.0.1)\n";
    return 2;
  }

  meshcast::ControllerConfig config;
  config.listen = absl::GetFlag(FLAGS_listen);
  config.db_path = absl::GetFlag(FLAGS_db);
  config.registry.lease = absl::Seconds(lease);
  config.registry.heartbeat = absl::Seconds(heartbeat);
  config.registry.inter_host_bandwidth = inter * 1e9 / 8;
  config.registry.intra_host_bandwidth = intra * 1e9 / 8;
  config.jobs.task_timeout = absl::Seconds(task_timeout);
  if (metrics_port >= 0) {
    config.metrics_listen = absl::StrCat(metrics_address, ":", metrics_port);
  }

  // Block the shutdown signals before any thread starts, so that every
  // thread inherits the mask and only sigwait below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A client vanishing mid-write must not kill the daemon.
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<meshcast::ControllerServer>> server =
      meshcast::ControllerServer::Start(config);
  if (!server.ok()) {
    std::cerr << "meshcast-controller: " << server.status().message() << "\n";
    return 1;
  }
  const int port = (*server)->port();
  meshcast::LogInfo("listening on ", config.listen, " (port ", port,
                    "), database ", config.db_path, ", lease ", lease,
                    " s, heartbeat ", heartbeat, " s, links ", inter,
                    " Gbps between hosts / ", intra, " Gbps inside");
  std::cout << "meshcast-controller listening on port " << port << std::endl;
  const int bound_metrics_port = (*server)->metrics_port();
  if (bound_metrics_port > 0) {
    meshcast::LogInfo("serving Prometheus metrics on ", metrics_address, ":",
                      bound_metrics_port, "/metrics");
    std::cout << "meshcast-controller metrics on port " << bound_metrics_port
              << std::endl;
  }
  // The metrics port file first: once --port-file exists, both are.
  const std::string metrics_port_file = absl::GetFlag(FLAGS_metrics_port_file);
  if (!metrics_port_file.empty() && bound_metrics_port > 0 &&
      !WritePortFile(metrics_port_file, bound_metrics_port)) {
    std::cerr << "meshcast-controller: --metrics-port-file "
              << metrics_port_file << ": cannot write\n";
    (*server)->Shutdown();
    return 1;
  }
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty() && !WritePortFile(port_file, port)) {
    std::cerr << "meshcast-controller: --port-file " << port_file
              << ": cannot write\n";
    (*server)->Shutdown();
    return 1;
  }

  int received = 0;
  sigwait(&signals, &received);
  meshcast::LogInfo("received ", received == SIGTERM ? "SIGTERM" : "SIGINT",
                    "; shutting down");
  (*server)->Shutdown();
  return 0;
}
