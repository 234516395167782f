// Lowering of the resharding strategies' transfer list (ReshardPlan, the
// strategies' working form, planner/plan.h) into the plan IR that every job
// kind emits (meshcast.v1.Plan). Nothing downstream of the reshard kind sees
// a ReshardPlan.
//
//   ASSIGN_OR_RETURN(v1::Plan plan, LowerReshardPlan(reshard_plan));
//
// What it produces (docs/dataplane.md):
//  - tensors[t] = problems[t].tensor, initialized with the pattern;
//  - buffers: one ROLE_SOURCE buffer per source-mesh device with a non-empty
//    tile, one ROLE_DESTINATION buffer per destination-mesh device with a
//    non-empty tile; ids are positions in the list;
//  - groups: one per distinct ordered device list [src, dst0, dst1, ...];
//  - steps: one per transfer, id = its index; OP_SEND_RECV for a single
//    receiver, OP_BROADCAST for a relay chain; slice, bytes, stage and deps
//    copied.
// Errors: INTERNAL for a transfer naming an unknown tensor, with no
// receiver, or depending on a later transfer (a planner bug).
//
// Thread safety: pure function.
#ifndef MESHCAST_PLANNER_KINDS_RESHARD_RESHARD_LOWERING_H_
#define MESHCAST_PLANNER_KINDS_RESHARD_RESHARD_LOWERING_H_

#include "absl/status/statusor.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/plan.h"

namespace meshcast {

absl::StatusOr<v1::Plan> LowerReshardPlan(const ReshardPlan& plan);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_RESHARD_RESHARD_LOWERING_H_
