#include "cli/command_errors.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cli/suggest.h"
#include "util/text_safety.h"

namespace meshcast::cli {

int ExitCodeForStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kAlreadyExists:
      return kExitUsage;
    case absl::StatusCode::kUnavailable:
      return kExitUnreachable;
    default:
      return kExitFailure;
  }
}

CommandResult Fail(absl::string_view command, int exit_code,
                   absl::string_view message) {
  // One line per problem: a multi-line message (e.g. from a server) is
  // joined so that scripts can read stderr line by line; what remains of
  // control characters (a server's message may carry any) is escaped. A
  // value that is not among those "allowed: ..." gets the closest of them
  // as a hint (suggest.h), whichever layer wrote the message.
  const std::string one_line = EscapeForTerminal(AppendSuggestion(
      absl::StrReplaceAll(message, {{"\r\n", "; "}, {"\n", "; "}})));
  CommandResult result;
  result.exit_code = exit_code;
  result.err = absl::StrCat(command, ": ", one_line, "\n");
  return result;
}

CommandResult FailWithStatus(absl::string_view command,
                             const absl::Status& status) {
  return Fail(command, ExitCodeForStatus(status), status.message());
}

std::optional<CommandResult> ParseCommandFlags(
    FlagSet& flags, const std::vector<std::string>& args,
    absl::string_view command, size_t max_positional, absl::string_view hint) {
  const absl::Status parsed = flags.Parse(args);
  if (flags.help_requested()) return CommandResult{kExitOk, flags.Usage(), ""};
  if (!parsed.ok()) return Fail(command, kExitUsage, parsed.message());
  if (flags.positional().size() > max_positional) {
    return Fail(command, kExitUsage,
                absl::StrCat("unexpected argument '",
                             flags.positional()[max_positional], "'; ", hint));
  }
  return std::nullopt;
}

}  // namespace meshcast::cli
