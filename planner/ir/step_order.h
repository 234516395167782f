// The steps of a plan in dependency order: every step after the steps it
// depends on, as the engine's scheduler, the simulator and the hazard check
// need them.
//
//   ASSIGN_OR_RETURN(std::vector<int> order, StepsInDependencyOrder(plan));
//   for (int i : order) Use(plan.steps(i));  // i: position in plan.steps
//
// Among steps that are ready at once, the one earlier in plan.steps comes
// first (Kahn's algorithm with a min-queue), so a plan already in order
// comes back unchanged.
// Errors: INVALID_ARGUMENT for a step id used twice ("plan step 3 (OP_...):
// id used by an earlier step"), a dependency on an unknown id ("plan step
// 3 (OP_...): depends on unknown step 9"; unless
// StepOrderOptions::skip_unknown_deps), or a cycle, naming the first step
// that can never start ("plan step 3 (OP_...): deps form a cycle (the step
// can never start)").
// Thread safety: a pure function.
#ifndef MESHCAST_PLANNER_IR_STEP_ORDER_H_
#define MESHCAST_PLANNER_IR_STEP_ORDER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "meshcast/v1/plan.pb.h"

namespace meshcast {

struct StepOrderOptions {
  // Leave out deps on ids no step of the plan has, instead of refusing
  // them: a worker's projection of a plan keeps its deps on the steps that
  // other workers run.
  bool skip_unknown_deps = false;
};

absl::StatusOr<std::vector<int>> StepsInDependencyOrder(
    const v1::Plan& plan, const StepOrderOptions& options = {});

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_IR_STEP_ORDER_H_
