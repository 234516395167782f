// Starting, checking and stopping the daemon processes of a local cluster
// (`meshctl up` / `meshctl down`), and finding their binaries.
//
//   ASSIGN_OR_RETURN(std::string controller,
//                    FindDaemonBinary("meshcast-controller", "controller",
//                                     bin_dir, context));
//   ASSIGN_OR_RETURN(int pid, SpawnDetached(controller, {"--listen=..."},
//                                           "/d/logs/controller.log"));
//   if (!CheckProcess(pid).alive) ...
//   StopProcesses({pid}, absl::Seconds(10));
//
// Daemons run in their own session (setsid), with stdin from /dev/null and
// stdout and stderr appended to their log, so they outlive meshctl and a
// terminal's Ctrl-C does not reach them.
//
// Thread safety: thread-compatible free functions; they signal and reap
// processes, so do not race them on the same pid.
#ifndef MESHCAST_CLI_DAEMON_PROCESS_H_
#define MESHCAST_CLI_DAEMON_PROCESS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/command.h"

namespace meshcast::cli {

// Looks for an executable `name` in this order: `bin_dir` (if non-empty,
// and then only there); next to meshctl's build tree
// (<dir of meshctl>/../<build_subdir>/<name>); the directory of meshctl;
// $PATH. NOT_FOUND lists the places tried.
absl::StatusOr<std::string> FindDaemonBinary(const std::string& name,
                                             const std::string& build_subdir,
                                             const std::string& bin_dir,
                                             const CommandContext& context);

// Starts `binary` with `args` detached (see above), in `working_dir` if
// non-empty (so that anything it writes relative to its directory, a core
// dump included, lands there); returns its pid. Fails when the binary
// cannot be executed or the log cannot be opened.
absl::StatusOr<int> SpawnDetached(const std::string& binary,
                                  const std::vector<std::string>& args,
                                  const std::string& log_path,
                                  const std::string& working_dir = "");

struct ProcessStatus {
  bool alive = false;
  // For a process that ended and was our child: "exited with status 2",
  // "killed by signal 9"; empty otherwise.
  std::string exit;
};

// Whether `pid` still runs (a zombie counts as ended; our own children are
// reaped).
ProcessStatus CheckProcess(int pid);

// True if `pid` runs and its argv[0] is `binary`: guards signals against a
// pid the system reused for another program.
bool IsProcessOf(int pid, const std::string& binary);

// Sends SIGTERM to every pid, waits up to `grace` for them to end, then
// SIGKILLs the rest. Returns the pids that needed SIGKILL.
std::vector<int> StopProcesses(const std::vector<int>& pids,
                               absl::Duration grace);

// The last non-empty line of a file, or "" (for error messages that point
// at a log).
std::string LastLogLine(const std::string& path);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_DAEMON_PROCESS_H_
