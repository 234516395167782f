// `meshctl version` (and `meshctl --version`): meshctl's own version and,
// when a controller answers, the controller's.
//
//   meshctl version            meshctl 0.1.0
//                              controller 0.1.0 at 127.0.0.1:41234
//   meshctl --version -o json  {"client": {...}, "controller": {...}}
//
// The controller is found as every command finds it (client_flags.h) and
// asked with GetCluster, whose answer carries its version as metadata
// (ControllerClient::ControllerVersion). An unreachable controller, or one
// that refuses the call (a user token: GetCluster is for admins), is
// reported on the controller line and does not fail the command: the exit
// code is 0 unless a flag is wrong (2). The controller gets
// --connect-timeout seconds, 1 by default.
//
// Thread safety: reentrant.
#ifndef MESHCAST_CLI_VERSION_COMMAND_H_
#define MESHCAST_CLI_VERSION_COMMAND_H_

#include <string>
#include <vector>

#include "cli/command.h"

namespace meshcast::cli {

// meshctl's version: the project version it was built from ("0.1.0").
const char* MeshctlVersion();

CommandResult RunVersionCommand(const std::vector<std::string>& args,
                                const CommandContext& context);

inline constexpr char kVersionCommandSummary[] =
    "print meshctl's version and the controller's (also --version)";

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_VERSION_COMMAND_H_
