// The job subcommands of meshctl, each a function from its arguments to a
// CommandResult (see command.h):
//
//   meshctl submit reshard --shape ... [--wait]   or   submit -f job.yaml
//   meshctl submit collective --op all_reduce --mesh 2x4 --bytes 256MiB
//   meshctl get JOB       one job in detail (--timeline: a Gantt chart)
//   meshctl trace ID -o trace.json   Chrome trace-event JSON of its steps
//   meshctl list          every job, newest first
//   meshctl watch ID      live state changes and progress until the job ends
//   meshctl cancel ID
//
// They talk to the controller through ControllerClient (address from
// --controller, $MESHCAST_CONTROLLER or the local cluster, see
// client_flags.h), print human text by default and one JSON object with
// --output json (-o json; yaml and wide too, output_format.h). A JOB is a
// full id, a number or a unique id prefix (job_ref.h). `submit --wait` and `watch` exit 0 only if the job
// SUCCEEDED. Exit codes: command_errors.h.
//
// Thread safety: every function is reentrant.
#ifndef MESHCAST_CLI_JOB_COMMANDS_H_
#define MESHCAST_CLI_JOB_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/command.h"
#include "cli/controller_client.h"
#include "meshcast/v1/job.pb.h"

namespace meshcast::cli {

CommandResult RunSubmitCommand(const std::vector<std::string>& args,
                               const CommandContext& context);
CommandResult RunGetCommand(const std::vector<std::string>& args,
                            const CommandContext& context);
CommandResult RunTraceCommand(const std::vector<std::string>& args,
                              const CommandContext& context);
CommandResult RunListCommand(const std::vector<std::string>& args,
                             const CommandContext& context);
CommandResult RunWatchCommand(const std::vector<std::string>& args,
                              const CommandContext& context);
CommandResult RunCancelCommand(const std::vector<std::string>& args,
                               const CommandContext& context);

// Final line of a job that ended: "job ID SUCCEEDED: message".
std::string FinalLine(const v1::Job& job);

// Follows a job until it ends, streaming its events through `context` as
// `events` says: "" nothing, "table" one line each, "json" one JSON object
// per line, "yaml" one YAML document each (output_format.h); then fetches
// and returns the final job. UNAVAILABLE when the controller ends the watch
// early.
absl::StatusOr<v1::Job> FollowJob(ControllerClient& client,
                                  const std::string& id, absl::Duration timeout,
                                  absl::string_view events,
                                  const CommandContext& context);

// The kinds `submit KIND` and `plan KIND` take with flags of their own
// (other kinds come from a job file, -f).
const std::vector<std::string>& FlagKinds();

inline constexpr char kSubmitCommandSummary[] =
    "submit a job: reshard or collective (flags or -f job.yaml); --wait";
inline constexpr char kGetCommandSummary[] =
    "show one job in detail (metrics; --timeline: a Gantt chart)";
inline constexpr char kTraceCommandSummary[] =
    "write a job's timeline as Chrome trace JSON (-o trace.json)";
inline constexpr char kListCommandSummary[] = "list jobs, newest first";
inline constexpr char kWatchCommandSummary[] =
    "follow a job's state and progress until it ends";
inline constexpr char kCancelCommandSummary[] =
    "cancel a queued or running job";

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_JOB_COMMANDS_H_
