// `meshctl plan [KIND]`: plans a job without running it: a cross-mesh
// resharding (the default kind, as always) or any other kind
// (`meshctl plan collective --op all_reduce --mesh 2x4 --bytes 256MiB`),
// offline on --cluster or live through Controller.Plan. Other kinds go
// through the job-kind plug-ins (planner/kinds/job_kind.h): offline with the
// same library the controller links (FindJobKind, Meshes, placement on the
// idle cluster, Plan with compare_all), live with PlanRequest.spec.
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
    "plan a job (reshard, collective) offline or live; compare alternatives";

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_PLAN_COMMAND_H_
