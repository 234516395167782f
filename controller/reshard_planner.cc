#include "controller/reshard_planner.h"

#include "absl/strings/str_cat.h"
#include "planner/cost_model.h"
#include "util/status_macros.h"

namespace meshcast {

absl::StatusOr<PlanningResult> LibraryPlanner::Plan(
    const std::vector<ReshardProblem>& problems, const Topology& topology,
    Strategy strategy, bool compare_all) {
  PlanningResult result;
  if (strategy == Strategy::kAuto || compare_all) {
    ASSIGN_OR_RETURN(StrategyComparison comparison,
                     CompareStrategies(problems, topology));
    if (comparison.rows.empty()) {
      return absl::InternalError("planner compared no strategies");
    }
    int chosen = comparison.chosen;
    if (strategy != Strategy::kAuto) {
      chosen = -1;
      for (size_t i = 0; i < comparison.rows.size(); ++i) {
        if (comparison.rows[i].strategy == strategy) {
          chosen = static_cast<int>(i);
        }
      }
      if (chosen < 0) {
        return absl::InternalError(absl::StrCat(
            "planner comparison has no row for ", StrategyName(strategy)));
      }
    }
    for (size_t i = 0; i < comparison.rows.size(); ++i) {
      const StrategyEvaluation& row = comparison.rows[i];
      result.rows.push_back(
          {StrategyName(row.strategy), row.predicted_seconds,
           row.lower_bound_seconds, static_cast<int>(row.plan.transfers.size()),
           row.plan.total_bytes(), static_cast<int>(i) == chosen});
    }
    StrategyEvaluation& best = comparison.rows[chosen];
    result.plan = std::move(best.plan);
    result.predicted_seconds = best.predicted_seconds;
    result.lower_bound_seconds = best.lower_bound_seconds;
    return result;
  }
  ASSIGN_OR_RETURN(result.plan, PlanReshard(problems, topology, strategy));
  ASSIGN_OR_RETURN(const SimulationResult simulation,
                   Simulate(result.plan, topology));
  result.predicted_seconds = simulation.seconds;
  std::vector<UnitTask> tasks;
  for (size_t i = 0; i < problems.size(); ++i) {
    ASSIGN_OR_RETURN(std::vector<UnitTask> more,
                     ComputeUnitTasks(problems[i], static_cast<int>(i)));
    tasks.insert(tasks.end(), more.begin(), more.end());
  }
  result.lower_bound_seconds = LowerBoundSeconds(tasks, topology);
  return result;
}

}  // namespace meshcast
