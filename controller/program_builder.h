// ProgramBuilder: projects a job's Plan IR (meshcast.v1.Plan, built by the
// job's kind, planner/kinds/job_kind.h) into one WorkerProgram per worker,
// following the data-plane contract in docs/dataplane.md, and derives the
// job-wide figures the controller reports from the Plan.
//
//   std::vector<WorkerSlot> slots = ...;  // who owns which devices
//   ASSIGN_OR_RETURN(std::vector<v1::WorkerProgram> programs,
//                    ProjectPlan(plan, "job-000001", slots));
//
// Projection, for any op:
//  - A step touches the devices of its group (collectives, broadcast,
//    send/recv), its `device` (OP_COMPUTE) and the devices of every buffer
//    it names as an operand. The job's workers are those owning a device of
//    any buffer or step; ranks follow ascending host index (then name).
//  - Each program keeps every tensor and initializer, the buffers on its
//    devices, the steps that touch its devices (global ids and deps kept)
//    and the groups those steps use.
//  - Reference closure: every value-defining step (OP_ALL_REDUCE,
//    OP_REDUCE_SCATTER, OP_ALL_TO_ALL, OP_COMPUTE, and OP_SEND_RECV in the
//    operand form), every buffer it names as
//    an operand and its group go into EVERY program of the job, because a
//    worker verifies what it received against a reference it computes from
//    the job's deterministic inputs (docs/architecture.md). A worker executes
//    only the steps that touch its own devices and allocates only its own
//    devices' buffers; the rest is read-only description.
//
// Thread safety: pure functions.
#ifndef MESHCAST_CONTROLLER_PROGRAM_BUILDER_H_
#define MESHCAST_CONTROLLER_PROGRAM_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshcast/v1/plan.pb.h"

namespace meshcast {

// One worker (one host) and the global ids of the devices it drives.
struct WorkerSlot {
  std::string name;
  int host_index = 0;
  std::vector<int> devices;
};

// Errors (INTERNAL: a malformed plan from a kind; FAILED_PRECONDITION: the
// cluster lacks a worker): a device owned by two slots, a plan device no
// slot owns, a step naming an unknown group or operand buffer, a step that
// touches no device.
absl::StatusOr<std::vector<v1::WorkerProgram>> ProjectPlan(
    const v1::Plan& plan, absl::string_view job_id,
    const std::vector<WorkerSlot>& workers);

// Whether the step defines tensor values (rather than moving them): its
// outputs are verified against a reference computed from its inputs.
bool DefinesValues(v1::Step::Op op);
// The same for one step: also an OP_SEND_RECV in the operand form (a copy
// between two operands, maybe of different tensors).
bool DefinesValues(const v1::Step& step);

// Number of elements the ROLE_DESTINATION buffers of `plan` hold, whatever
// op writes them, except user buffers (their values are the user's): what
// full verification must account for (the workers' elements_verified
// summed).
int64_t DestinationElements(const v1::Plan& plan);

// Bytes the plan's steps deliver to receiving devices (JobResult.
// bytes_delivered, `moved_bytes` in `meshctl plan`), per op over a group of
// n devices, with `bytes` the step's bytes (plan.proto):
//  - OP_BROADCAST: bytes to each of the n - 1 receivers (at least once);
//  - OP_SEND_RECV, OP_LOCAL_COPY: bytes, once;
//  - OP_ALL_GATHER: each rank receives the n - 1 other ranks' shares of its
//    output: (n - 1) / n * bytes per rank, (n - 1) * bytes in all;
//  - OP_REDUCE_SCATTER: each rank receives the other n - 1 ranks' parts of
//    its chunk: (n - 1) * bytes in all (bytes = the per-rank input);
//  - OP_ALL_REDUCE: a reduce-scatter then an all-gather of the output:
//    2 * (n - 1) * bytes in all;
//  - OP_ALL_TO_ALL: the elements of `counts` off its diagonal (what leaves
//    a rank) times the element size; without counts, (n - 1) / n * bytes;
//  - OP_COMPUTE: 0.
// The sum of step bytes (JobResult.bytes_moved) counts each step once.
int64_t DeliveredBytes(const v1::Plan& plan);

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_PROGRAM_BUILDER_H_
