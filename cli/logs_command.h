// `meshctl logs`: a local cluster's daemon logs, merged in time order.
//
//   meshctl logs                      every daemon's lines, oldest first
//   meshctl logs 42                   one job's story: the controller's and
//                                     every worker's lines about job-000042
//   meshctl logs --worker worker-1    one daemon's lines (controller too)
//   meshctl logs 42 --follow          then new lines as they are written
//
// The daemons write one line format (util/log.h): time, severity,
// component, `job=ID`, message. This reads DIR/logs/*.log of the cluster
// `meshctl up` started (DIR: --dir, else $MESHCAST_HOME, else ./.meshcast;
// the logs stay after `meshctl down`), keeps the lines in that format and
// sorts them by time; what a daemon printed outside its logger (start-up
// banners) stays in its file. JOB is a full id, a number or a unique
// prefix (job_ref.h), matched against the jobs the logs name, so it works
// with the cluster down. --follow polls the files and prints new lines
// until interrupted, until --for has passed, or until the cluster is
// stopped (its cluster.json is removed).
//
// Errors (exit 2): no logs in DIR, an unknown --worker (with "did you
// mean"), a JOB no log line names or that names several jobs.
//
// Thread safety: reentrant.
#ifndef MESHCAST_CLI_LOGS_COMMAND_H_
#define MESHCAST_CLI_LOGS_COMMAND_H_

#include <string>
#include <vector>

#include "cli/command.h"

namespace meshcast::cli {

inline constexpr char kLogsCommandSummary[] =
    "a local cluster's daemon logs in time order, for one job or worker";

CommandResult RunLogsCommand(const std::vector<std::string>& args,
                             const CommandContext& context);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_LOGS_COMMAND_H_
