// How meshctl reports a failed absl::Status: the exit code its status code
// maps to and one line on stderr.
//
//   absl::StatusOr<v1::Job> job = client.GetJob(id);
//   if (!job.ok()) return FailWithStatus("meshctl get", job.status());
//
// Mapping (also printed by `meshctl --help`, see kExitCodesHelp):
//   INVALID_ARGUMENT, NOT_FOUND, OUT_OF_RANGE, ALREADY_EXISTS -> 2 bad input
//   UNAVAILABLE (controller down or unreachable)              -> 3
//   everything else (FAILED_PRECONDITION, INTERNAL, ...)      -> 1 failure
//
// Thread safety: pure functions.
#ifndef MESHCAST_CLI_COMMAND_ERRORS_H_
#define MESHCAST_CLI_COMMAND_ERRORS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cli/command.h"
#include "cli/flags.h"

namespace meshcast::cli {

// Exit code for a non-OK status (kExitOk for OK).
int ExitCodeForStatus(const absl::Status& status);

// A result with the status's exit code and "<command>: <message>\n" on err.
// The message is flattened to one line.
CommandResult FailWithStatus(absl::string_view command,
                             const absl::Status& status);

// A result with `exit_code` and "<command>: <message>\n" on err. A message
// that lists what is "allowed: A, B, C" for a quoted value gets "; did you
// mean B?" when B is close to it (AppendSuggestion, suggest.h): the one
// place every bad enum value (flags, strategies, dtypes, device kinds, ...)
// gets its hint, whichever layer wrote the message.
CommandResult Fail(absl::string_view command, int exit_code,
                   absl::string_view message);

// Parses a command's flags the way every meshctl command does: --help
// returns the usage (exit 0); a bad flag fails (exit 2) with the parser's
// message; an argument past the first `max_positional` fails (exit 2) as
// "unexpected argument 'X'; HINT". nullopt when the command should go on.
//
//   if (auto done = ParseCommandFlags(flags, args, kCommand, 0,
//                                     "see 'meshctl down --help'")) {
//     return *done;
//   }
std::optional<CommandResult> ParseCommandFlags(
    FlagSet& flags, const std::vector<std::string>& args,
    absl::string_view command, size_t max_positional, absl::string_view hint);

// The exit-code table for help texts.
inline constexpr char kExitCodesHelp[] =
    "exit codes: 0 ok; 1 failed (a job that did not succeed, a daemon that\n"
    "died, a server error); 2 bad input (flags, specs, unknown job id, a mesh\n"
    "the cluster cannot hold); 3 controller unreachable.";

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_COMMAND_ERRORS_H_
