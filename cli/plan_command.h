// `meshctl plan`: plans a cross-mesh resharding offline, without a cluster.
//
// Builds a Topology, a tensor and two layouts from flags, plans the move
// with every strategy of planner/strategy.h, simulates each with the cost
// model, and prints either a comparison table (default) or the chosen plan
// as one JSON object (--output json). See PlanCommandUsage() or
// `meshctl plan --help` for the flags.
//
//   CommandResult result = RunPlanCommand(
//       {"--cluster", "5x4", "--shape", "1024x1024x512", "--dtype", "int32",
//        "--src-mesh", "2x4@0", "--src-spec", "S0RR",
//        "--dst-mesh", "2x4@2", "--dst-spec", "S0RR", "--output", "json"});
//
// Bad input gives exit code 2 and one line on `err` naming the flag and what
// it accepts; a planning failure gives exit code 1.
//
// Thread safety: RunPlanCommand is reentrant (no shared state).
#ifndef MESHCAST_CLI_PLAN_COMMAND_H_
#define MESHCAST_CLI_PLAN_COMMAND_H_

#include <string>
#include <vector>

#include "cli/command.h"

namespace meshcast::cli {

// Runs `meshctl plan` with `args` (the arguments after "plan"). With --live
// or --controller it asks the controller for a dry-run plan on the live
// topology instead (Controller.Plan); `context` supplies the environment
// that finds the controller. The one-argument form uses the process's.
CommandResult RunPlanCommand(const std::vector<std::string>& args,
                             const CommandContext& context);
CommandResult RunPlanCommand(const std::vector<std::string>& args);

// One-line summary for `meshctl --help`.
inline constexpr char kPlanCommandSummary[] =
    "plan a cross-mesh resharding offline and compare strategies";

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_PLAN_COMMAND_H_
