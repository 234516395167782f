// meshctl's top level: the table of subcommands and the dispatcher that
// main() calls.
//
//   CommandResult result = RunMeshctl({"plan", "--cluster", "5x4", ...});
//
// Each subcommand (up, down, cluster, submit, get, trace, list, watch,
// cancel, plan, calibrate, completion, version) is one entry of MeshctlCommands(): a name, a one-line summary and a
// function taking the arguments after the name and a CommandContext.
//
// Thread safety: RunMeshctl is reentrant if every subcommand is.
#ifndef MESHCAST_CLI_MESHCTL_H_
#define MESHCAST_CLI_MESHCTL_H_

#include <string>
#include <vector>

#include "cli/command.h"

namespace meshcast::cli {

// Every subcommand, in the order `meshctl --help` lists them.
const std::vector<Command>& MeshctlCommands();

// The shared flags that take a value and may come before the command
// (`meshctl -o json list`): their values are never taken for a command.
const std::vector<std::string>& LeadingValueFlags();

// Runs meshctl with `args` (without the program name): "--help", "help
// [COMMAND]", "--version [flags]" (the version command), or "COMMAND
// [flags]", in `context` (the
// one-argument form uses the process's environment and stdout).
CommandResult RunMeshctl(const std::vector<std::string>& args,
                         const CommandContext& context);
CommandResult RunMeshctl(const std::vector<std::string>& args);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_MESHCTL_H_
