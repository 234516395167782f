// `meshctl completion bash|zsh`: a shell completion script for meshctl,
// generated from meshctl's own tables: the command names of
// MeshctlCommands(), the words a command takes (Command::words), and every
// command's flags as its FlagSet lists them (`COMMAND --help=flags`, see
// flags.h), with the choices of choice flags (--output table|wide|json|
// yaml, --verify ...). Nothing is listed by hand, so a new command or flag
// completes as soon as it exists.
//
//   source <(meshctl completion bash)     # in ~/.bashrc
//   source <(meshctl completion zsh)      # in ~/.zshrc, after compinit
//
// The bash script defines _meshctl and `complete -F _meshctl meshctl`; it
// completes commands, flags, choice values, file names for FILE / PATH
// values, directories for DIR values, submit's and plan's kinds, and job
// ids for the commands that take a JOB (from `meshctl list -o json` against
// the controller of the environment, quietly nothing without one). The zsh
// script loads the same function through zsh's bashcompinit.
//
// Thread safety: reentrant.
#ifndef MESHCAST_CLI_COMPLETION_COMMAND_H_
#define MESHCAST_CLI_COMPLETION_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/command.h"

namespace meshcast::cli {

// The script for `shell` ("bash" or "zsh") completing `commands`, whose
// flags are asked from each command in `context`. INVALID_ARGUMENT for
// another shell.
absl::StatusOr<std::string> CompletionScript(
    absl::string_view shell, const std::vector<Command>& commands,
    const CommandContext& context);

CommandResult RunCompletionCommand(const std::vector<std::string>& args,
                                   const CommandContext& context);

inline constexpr char kCompletionCommandSummary[] =
    "print a bash or zsh completion script (source <(meshctl completion "
    "bash))";

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_COMPLETION_COMMAND_H_
