// meshcast-controller: the control-plane daemon. Serves the Controller gRPC
// service, keeps the worker registry and the job queue, plans jobs and
// pushes per-worker programs to the workers; jobs persist in SQLite.
//
//   meshcast-controller --listen=127.0.0.1:50051 --db=meshcast.db
//   meshcast-controller --listen=127.0.0.1:0 --port-file=/tmp/port
//   meshcast-controller --metrics-port=9401      # Prometheus /metrics
//   meshcast-controller --host-copy-gbps=40 --transfer-setup-us=300
//                                  # CPU devices: copies and set-up cost time
//
// Flags may be written with dashes or underscores (--inter-gbps or
// --inter_gbps). SIGTERM or SIGINT shuts down cleanly: unfinished jobs are
// failed with "controller shut down" and aborted on their workers.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "controller/controller_flags.h"
#include "controller/controller_server.h"
#include "util/log.h"
#include "util/flags_usage.h"

namespace {
// The defaults live in ControllerFlags, so the daemon and its tests agree.
const meshcast::ControllerFlags kDefaults;
}  // namespace

ABSL_FLAG(std::string, listen, kDefaults.listen,
          "host:port for the Controller gRPC service; port 0 picks a free "
          "port (printed, and written to --port-file)");
ABSL_FLAG(std::string, db, kDefaults.db,
          "SQLite database file for jobs and events (created if missing)");
ABSL_FLAG(std::string, port_file, "",
          "if set, write the bound port number to this file once serving");
ABSL_FLAG(int, metrics_port, kDefaults.metrics_port,
          "port for Prometheus GET /metrics (docs/metrics.md); 0 picks a free "
          "port (printed, and written to --metrics-port-file); -1 = off");
ABSL_FLAG(std::string, metrics_address, kDefaults.metrics_address,
          "address the metrics port binds; empty (default): the host of "
          "--listen. 0.0.0.0 binds every interface");
ABSL_FLAG(std::string, metrics_web_config, "",
          "Prometheus-format web config file for /metrics: "
          "tls_server_config (HTTPS, client certificates) and "
          "basic_auth_users (bcrypt hashes); see docs/metrics.md");
ABSL_FLAG(std::string, metrics_port_file, "",
          "if set, write the bound metrics port to this file once serving");
ABSL_FLAG(double, lease_seconds, kDefaults.lease_seconds,
          "a worker without a heartbeat for this long is marked lost and its "
          "jobs fail");
ABSL_FLAG(absl::Duration, lost_worker_ttl, kDefaults.lost_worker_ttl,
          "a worker lost for this long (e.g. 10m, 1h; inf: never) is "
          "forgotten and its host index freed for another name");
ABSL_FLAG(double, heartbeat_seconds, kDefaults.heartbeat_seconds,
          "heartbeat period the controller asks workers to use");
ABSL_FLAG(double, inter_gbps, kDefaults.inter_gbps,
          "per-host NIC bandwidth of the topology, Gbit/s each direction");
ABSL_FLAG(double, intra_gbps, kDefaults.intra_gbps,
          "per-device bandwidth inside a host, Gbit/s each direction");
ABSL_FLAG(double, inter_latency_us, kDefaults.inter_latency_us,
          "per-message latency between hosts, microseconds");
ABSL_FLAG(double, intra_latency_us, kDefaults.intra_latency_us,
          "per-message latency inside a host, microseconds");
ABSL_FLAG(double, host_copy_gbps, kDefaults.host_copy_gbps,
          "memory-copy capacity of each host, Gbit/s, shared by its devices: "
          "copies inside the host and the pack/unpack of slices that cross "
          "hosts draw on it (CPU devices share the host's cores); 0 = "
          "unlimited (GPU hosts)");
ABSL_FLAG(double, transfer_setup_us, kDefaults.transfer_setup_us,
          "fixed start-up time of every transfer before its first byte "
          "moves (thread start, tag matching, a round trip), microseconds");
ABSL_FLAG(std::string, device_rates, kDefaults.device_rates,
          "compute rates of the devices, for the planner's compute steps "
          "(tp_overlap, moe, attention, pipeline): cpu, v100, h100, h200 "
          "(published peaks), or auto: h100 once a CUDA worker registers, "
          "else cpu");
ABSL_FLAG(bool, probed_rates, kDefaults.probed_rates,
          "plan with the rates CPU workers measure at start (their "
          "--probe_rates): the slowest host's memory-copy capacity where "
          "--host_copy_gbps is 0, and its GEMM rate per device where "
          "--device_rates is auto; false: the flags' figures alone");
ABSL_FLAG(double, task_timeout_seconds, kDefaults.task_timeout_seconds,
          "deadline of one job's data-plane run on its workers");
ABSL_FLAG(double, reserve_after_seconds, kDefaults.reserve_after_seconds,
          "a queued job that has waited this long for busy devices holds "
          "every later job back until it starts, so small jobs cannot "
          "starve a large one; 0 = strict submission order, -1 = later jobs "
          "may always overtake");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate of the controller (CN meshcast-controller): its "
          "TLS server certificate and its client certificate toward workers");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM certificate of the cluster CA, which verifies the workers' and "
          "clients' certificates");
ABSL_FLAG(std::string, tokens_file, "",
          "bearer tokens of clients, one `<token> <user> <role>` per line "
          "(role admin or user); must not be readable by group or others");
ABSL_FLAG(bool, insecure, false,
          "no TLS and no authentication: every caller is an anonymous admin "
          "(local tests only); without it the --tls_* flags are required");

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
  meshcast::SetLogComponent("controller");
  meshcast::InstallMeshcastFlagsUsage();  // --help lists our flags
  absl::SetProgramUsageMessage(
      "meshcast control-plane daemon: worker registry, job queue, planning, "
      "rendezvous store.\nUsage: meshcast-controller [--listen=HOST:PORT] "
      "[--db=PATH] ...");
  std::vector<std::string> normalized = NormalizeFlagNames(argc, argv);
  std::vector<char*> args;
  for (std::string& a : normalized) args.push_back(a.data());
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());

  meshcast::ControllerFlags flags;
  flags.listen = absl::GetFlag(FLAGS_listen);
  flags.db = absl::GetFlag(FLAGS_db);
  flags.lease_seconds = absl::GetFlag(FLAGS_lease_seconds);
  flags.heartbeat_seconds = absl::GetFlag(FLAGS_heartbeat_seconds);
  flags.lost_worker_ttl = absl::GetFlag(FLAGS_lost_worker_ttl);
  flags.task_timeout_seconds = absl::GetFlag(FLAGS_task_timeout_seconds);
  flags.reserve_after_seconds = absl::GetFlag(FLAGS_reserve_after_seconds);
  flags.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  flags.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  flags.metrics_web_config = absl::GetFlag(FLAGS_metrics_web_config);
  flags.inter_gbps = absl::GetFlag(FLAGS_inter_gbps);
  flags.intra_gbps = absl::GetFlag(FLAGS_intra_gbps);
  flags.inter_latency_us = absl::GetFlag(FLAGS_inter_latency_us);
  flags.intra_latency_us = absl::GetFlag(FLAGS_intra_latency_us);
  flags.host_copy_gbps = absl::GetFlag(FLAGS_host_copy_gbps);
  flags.transfer_setup_us = absl::GetFlag(FLAGS_transfer_setup_us);
  flags.device_rates = absl::GetFlag(FLAGS_device_rates);
  flags.probed_rates = absl::GetFlag(FLAGS_probed_rates);
  flags.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  flags.tls_key = absl::GetFlag(FLAGS_tls_key);
  flags.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  flags.tokens_file = absl::GetFlag(FLAGS_tokens_file);
  flags.insecure = absl::GetFlag(FLAGS_insecure);
  const absl::StatusOr<meshcast::ControllerConfig> parsed =
      meshcast::ConfigFromFlags(flags);
  if (!parsed.ok()) {
    std::cerr << "meshcast-controller: " << parsed.status().message() << "\n";
    return 2;
  }
  const meshcast::ControllerConfig& config = *parsed;
  if (flags.insecure) {
    meshcast::LogWarning(
        "--insecure: TLS and authentication are OFF; anyone who can reach "
        "the port can register workers, submit, read and cancel jobs");
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
  meshcast::LogInfo(
      "listening on ", config.listen, " (port ", port, "), database ",
      config.db_path, ", lease ", flags.lease_seconds, " s, heartbeat ",
      flags.heartbeat_seconds, " s, topology: links ", flags.inter_gbps,
      " Gbps between hosts (", flags.inter_latency_us, " us) / ",
      flags.intra_gbps, " Gbps inside (", flags.intra_latency_us,
      " us), host copy ",
      flags.host_copy_gbps > 0 ? absl::StrCat(flags.host_copy_gbps, " Gbps")
                               : std::string("unlimited"),
      ", transfer setup ", flags.transfer_setup_us, " us, device rates ",
      flags.device_rates,
      flags.probed_rates ? " (the workers' probed rates where not set)" : "");
  std::cout << "meshcast-controller listening on port " << port << std::endl;
  const int bound_metrics_port = (*server)->metrics_port();
  if (bound_metrics_port > 0) {
    meshcast::LogInfo("serving Prometheus metrics on ", config.metrics_listen,
                      " (port ", bound_metrics_port, ") /metrics",
                      config.metrics_web.tls ? " over TLS" : "",
                      config.metrics_web.basic_auth_users.empty()
                          ? ""
                          : " with basic auth");
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
