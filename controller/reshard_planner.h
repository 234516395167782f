// ReshardPlanner: the controller's seam to the planner library. The job
// manager and the Plan RPC ask it for a plan (and optionally a comparison of
// every strategy); tests substitute hand-made plans.
//
//   LibraryPlanner planner;
//   ASSIGN_OR_RETURN(PlanningResult r,
//                    planner.Plan(problems, topology, Strategy::kAuto,
//                                 /*compare_all=*/true));
//
// Thread safety: implementations must allow concurrent Plan calls
// (LibraryPlanner is stateless).
#ifndef MESHCAST_CONTROLLER_RESHARD_PLANNER_H_
#define MESHCAST_CONTROLLER_RESHARD_PLANNER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/plan.h"
#include "planner/strategy.h"
#include "planner/topology.h"
#include "planner/unit_task.h"

namespace meshcast {

// One row of a strategy comparison, as the Plan RPC reports it.
struct StrategyRowResult {
  std::string strategy;
  double predicted_seconds = 0;
  double lower_bound_seconds = 0;
  int transfers = 0;
  int64_t bytes = 0;  // sum of transfer bytes of that strategy's plan
  bool chosen = false;
};

struct PlanningResult {
  ReshardPlan plan;  // the chosen plan
  double predicted_seconds = 0;
  double lower_bound_seconds = 0;
  std::vector<StrategyRowResult> rows;  // empty unless compared
};

class ReshardPlanner {
 public:
  virtual ~ReshardPlanner() = default;
  // Plans `problems` with `strategy` (kAuto: the fastest simulated). With
  // `compare_all`, also plans and times every concrete strategy into rows.
  virtual absl::StatusOr<PlanningResult> Plan(
      const std::vector<ReshardProblem>& problems, const Topology& topology,
      Strategy strategy, bool compare_all) = 0;
};

// The real thing: PlanReshard / CompareStrategies / Simulate /
// LowerBoundSeconds from planner/.
class LibraryPlanner : public ReshardPlanner {
 public:
  absl::StatusOr<PlanningResult> Plan(
      const std::vector<ReshardProblem>& problems, const Topology& topology,
      Strategy strategy, bool compare_all) override;
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_RESHARD_PLANNER_H_
