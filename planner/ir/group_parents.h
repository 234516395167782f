// The rule for a relay tree in the plan IR (CommGroup.parents), checked in
// one place for every reader of a plan: the simulator, VerifyPlan's callers
// and the worker's program parser.
//
//   RETURN_IF_ERROR(CheckGroupParents(group));   // empty parents: a chain
//
// Contract: a group's parents are either absent (a chain: rank i receives
// from rank i-1) or one per device, parents[0] = -1 (rank 0 sends) and
// parents[i] in [0, i-1] for every other rank, so every tree is listed
// parents first.
//
// Errors: INVALID_ARGUMENT naming the group, the field and the allowed
// values; callers prefix the step.
// Thread safety: pure functions.
#ifndef MESHCAST_PLANNER_IR_GROUP_PARENTS_H_
#define MESHCAST_PLANNER_IR_GROUP_PARENTS_H_

#include "absl/status/status.h"
#include "meshcast/v1/plan.pb.h"

namespace meshcast {

absl::Status CheckGroupParents(const v1::CommGroup& group);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_IR_GROUP_PARENTS_H_
