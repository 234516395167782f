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

#include "cli/command.h"

namespace meshcast::cli {

CommandResult RunUpCommand(const std::vector<std::string>& args,
                           const CommandContext& context);
CommandResult RunDownCommand(const std::vector<std::string>& args,
                             const CommandContext& context);
CommandResult RunClusterCommand(const std::vector<std::string>& args,
                                const CommandContext& context);

inline constexpr char kUpCommandSummary[] =
    "start a local cluster (controller + workers on 127.0.0.1)";
inline constexpr char kDownCommandSummary[] = "stop the local cluster";
inline constexpr char kClusterCommandSummary[] =
    "show the cluster topology and its workers";

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_CLUSTER_COMMANDS_H_
