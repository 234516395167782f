// The cluster subcommands of meshctl (see command.h for the shape):
//
//   meshctl up [--workers N] [--devices SPEC | --devices-per-worker K]
//              [--dir D] [--monitoring] ...
//       starts a local cluster: meshcast-controller and N meshcast-worker
//       processes (each with --devices SPEC) on 127.0.0.1, detached, with
//       logs and the SQLite database under D; records them in
//       D/cluster.json; returns once every worker has registered. With
//       --monitoring the daemons also serve metrics on 127.0.0.1 and a
//       local Prometheus (local_prometheus.h) scrapes them; `up` then also
//       waits until Prometheus is ready and every target is up.
//   meshctl down [--dir D]
//       stops them and the Prometheus (SIGTERM, then SIGKILL after a grace
//       period) and removes D/cluster.json; logs, database and Prometheus
//       data stay.
//   meshctl cluster
//       the live topology and a table of workers.
//
// Thread safety: every function is reentrant, but two `up`/`down` runs on
// the same directory race.
#ifndef MESHCAST_CLI_CLUSTER_COMMANDS_H_
#define MESHCAST_CLI_CLUSTER_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cli/command.h"

namespace meshcast::cli {

CommandResult RunUpCommand(const std::vector<std::string>& args,
                           const CommandContext& context);
CommandResult RunDownCommand(const std::vector<std::string>& args,
                             const CommandContext& context);
CommandResult RunClusterCommand(const std::vector<std::string>& args,
                                const CommandContext& context);

// The controller's --lease_seconds and --heartbeat_seconds defaults
// (controller/controller_flags.h), which apply when `up` passes 0.
inline constexpr double kControllerDefaultLeaseSeconds = 5;
inline constexpr double kControllerDefaultHeartbeatSeconds = 1;

// The controller's rule for `up --lease-seconds L --heartbeat-seconds H`
// (0 = the controller's default), checked before anything starts: the
// lease must be longer than the heartbeat period. INVALID_ARGUMENT naming
// both flags otherwise. OK when `controller_flags` (--controller-flags)
// sets either value itself: those override meshctl's and the controller
// checks them.
absl::Status CheckLeaseAndHeartbeat(double lease_seconds,
                                    double heartbeat_seconds,
                                    absl::string_view controller_flags);

// The examples `up --help` gives for --controller-flags and
// --worker-flags: flags the daemons accept.
inline constexpr char kControllerFlagsExample[] = "--task_timeout_seconds=120";
inline constexpr char kWorkerFlagsExample[] = "--chunk_bytes=65536";

inline constexpr char kUpCommandSummary[] =
    "start a local cluster (controller + workers on 127.0.0.1)";
inline constexpr char kDownCommandSummary[] = "stop the local cluster";
inline constexpr char kClusterCommandSummary[] =
    "show the cluster topology and its workers";

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_CLUSTER_COMMANDS_H_
