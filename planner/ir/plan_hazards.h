// Data races in a plan: two steps that touch overlapping elements of one
// buffer, at least one of them writing, with no path of `deps` between
// them. The engine runs every step whose dependencies are done, so such a
// pair may run in either order or at once, and the result depends on the
// timing: a lowering bug that tests on one machine may never show.
//
//   RETURN_IF_ERROR(CheckPlanHazards(plan));  // in a lowering's tests
//
// What a step touches is what its operands name: `inputs` are read,
// `outputs` written (an accumulating GEMM or attention backward, or an
// attention block updating its state in place, reads and writes its output:
// a write), each over its `slice` or, without one, its whole buffer. The
// tensor form of OP_BROADCAST / OP_SEND_RECV (a `slice` on the step) moves
// one region of a tensor between whichever buffers hold it and is not
// checked here (the reshard planner's own verifier owns it).
//
// Errors: FAILED_PRECONDITION naming both steps, the buffer and the region
// they share ("steps 12 and 17 both touch buffer 3 at [0:4,0:8] (step 12
// writes, step 17 reads) and neither depends on the other");
// INVALID_ARGUMENT for a malformed plan (an operand's buffer unknown, a
// dependency on an unknown step, a cycle); RESOURCE_EXHAUSTED for plans of
// more than kMaxHazardCheckSteps steps (the reachability it keeps grows
// with the square of the steps).
// Thread safety: a pure function.
#ifndef MESHCAST_PLANNER_IR_PLAN_HAZARDS_H_
#define MESHCAST_PLANNER_IR_PLAN_HAZARDS_H_

#include "absl/status/status.h"
#include "meshcast/v1/plan.pb.h"

namespace meshcast {

inline constexpr int kMaxHazardCheckSteps = 40000;

absl::Status CheckPlanHazards(const v1::Plan& plan);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_IR_PLAN_HAZARDS_H_
