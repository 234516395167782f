// ProgramBuilder: turns the planner's ReshardPlan into the plan IR
// (meshcast.v1.Plan) and projects that Plan into one WorkerProgram per worker,
// following the data-plane contract in docs/dataplane.md.
//
//   ASSIGN_OR_RETURN(v1::Plan plan, BuildPlanProto(reshard_plan, 1.2, 0.9));
//   std::vector<WorkerSlot> slots = ...;  // who owns which devices
//   ASSIGN_OR_RETURN(std::vector<v1::WorkerProgram> programs,
//                    ProjectPlan(plan, "job-000001", slots));
//
// Plan IR produced (docs/dataplane.md, "Plan -> proto Plan"):
//  - tensors[t] = problems[t].tensor;
//  - buffers: one ROLE_SOURCE buffer per source-mesh device with a non-empty
//    tile, one ROLE_DESTINATION buffer per destination-mesh device with a
//    non-empty tile; ids are positions in the list;
//  - groups: one per distinct ordered device list [src, dst0, dst1, ...];
//  - steps: one per transfer, id = its index; OP_SEND_RECV for a single
//    receiver, OP_BROADCAST for a relay chain (the worker treats them alike).
//
// Projection: the job's workers are those owning a device of any buffer or
// group; ranks follow ascending host index. Each program keeps every tensor,
// the buffers on its devices, the steps whose group touches its devices (with
// their global ids and deps), and the groups those steps use.
//
// Thread safety: pure functions.
#ifndef MESHCAST_CONTROLLER_PROGRAM_BUILDER_H_
#define MESHCAST_CONTROLLER_PROGRAM_BUILDER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/plan.h"

namespace meshcast {

absl::StatusOr<v1::Plan> BuildPlanProto(const ReshardPlan& plan,
                                        double predicted_seconds,
                                        double lower_bound_seconds);

// One worker (one host) and the global ids of the devices it drives.
struct WorkerSlot {
  std::string name;
  int host_index = 0;
  std::vector<int> devices;
};

// Errors: a plan device no slot owns, a device owned twice, a step naming an
// unknown group.
absl::StatusOr<std::vector<v1::WorkerProgram>> ProjectPlan(
    const v1::Plan& plan, absl::string_view job_id,
    const std::vector<WorkerSlot>& workers);

// Number of elements the destination buffers of `plan` hold: what the
// workers' verification must account for.
int64_t DestinationElements(const v1::Plan& plan);

// The bytes the plan's steps deliver to receiving devices: a broadcast over
// a group of n devices counts its bytes n - 1 times, a send/recv or a local
// copy once. This is the plan's `moved_bytes` as `meshctl plan` reports it
// (every receiver's copy); the sum of step bytes counts a broadcast once.
int64_t DeliveredBytes(const v1::Plan& plan);

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_PROGRAM_BUILDER_H_
