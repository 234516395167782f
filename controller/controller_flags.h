// ControllerFlags: the meshcast-controller command line in the units people
// type (Gbit/s, microseconds, seconds), and its conversion into a checked
// ControllerConfig in base units (bytes/s, seconds). main.cc takes its flag
// defaults from here, so the daemon and its tests agree on them.
//
//   ControllerFlags flags;               // the defaults
//   flags.host_copy_gbps = 40;           // from --host-copy-gbps
//   flags.transfer_setup_us = 300;       // from --transfer-setup-us
//   absl::StatusOr<ControllerConfig> config = ConfigFromFlags(flags);
//   if (!config.ok()) { std::cerr << config.status().message(); exit(2); }
//
// Every error is INVALID_ARGUMENT and names the flag (dashed spelling) and
// the values it allows, e.g. "--host-copy-gbps must be >= 0 Gbit/s (0 =
// unlimited), got -1".
//
// Thread safety: plain value type and a pure function.
#ifndef MESHCAST_CONTROLLER_CONTROLLER_FLAGS_H_
#define MESHCAST_CONTROLLER_CONTROLLER_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "controller/controller_server.h"

namespace meshcast {

struct ControllerFlags {
  std::string listen = "127.0.0.1:50051";
  std::string db = "meshcast.db";
  double lease_seconds = 5;
  double heartbeat_seconds = 1;
  double task_timeout_seconds = 600;
  // A queued job that has waited this long for busy devices holds later
  // jobs back until it starts; 0: strict submission order; -1: never.
  double reserve_after_seconds = 10;
  // A worker LOST for this long is forgotten and its host index freed
  // (worker_registry.h); absl::InfiniteDuration(): never.
  absl::Duration lost_worker_ttl = absl::Minutes(10);
  // -1: no metrics endpoint; 0: a free port.
  int metrics_port = -1;
  // "": the host of --listen (the gRPC interface).
  std::string metrics_address;
  // Prometheus-format web config for /metrics (TLS, basic auth); "": none.
  std::string metrics_web_config;

  // The topology the planner and the simulator see.
  double inter_gbps = 10;        // per-host NIC, each direction
  double intra_gbps = 100;       // per-device port inside a host
  double inter_latency_us = 10;  // per message between hosts
  double intra_latency_us = 2;   // per message inside a host
  // Per-host memory-copy capacity shared by the host's devices; 0 means
  // unlimited (no such resource, the right model for GPU hosts).
  double host_copy_gbps = 0;
  // Fixed start-up cost of every transfer.
  double transfer_setup_us = 0;
  // The devices' compute rates: cpu, v100, h100, h200, or auto (h100 for
  // CUDA workers, else cpu).
  std::string device_rates = "auto";
  // Plan with the rates workers measure at start (WorkerInfo.probed_*):
  // the host copy capacity where host_copy_gbps is 0, the GEMM rate where
  // device_rates is auto and the workers are CPUs.
  bool probed_rates = true;

  // Security (docs/security.md): TLS with the cluster's certificates, or
  // --insecure explicitly; neither is an error.
  std::string tls_cert;     // the controller's certificate (server and
                            // client toward workers)
  std::string tls_key;
  std::string tls_ca;       // verifies workers' and clients' certificates
  std::string tokens_file;  // `<token> <user> <role>` per line, mode 0600
  bool insecure = false;
};

// Checks every flag and builds the daemon's configuration. Security: the
// three --tls_* flags together, or --insecure (then no --tls_* and no
// --tokens_file); the error names the flags. The topology
// values end up in config.registry (WorkerRegistry::Options), from which
// every planned job, the Plan RPC and GetCluster take them.
absl::StatusOr<ControllerConfig> ConfigFromFlags(const ControllerFlags& flags);

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_CONTROLLER_FLAGS_H_
