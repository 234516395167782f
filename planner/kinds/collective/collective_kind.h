// CollectiveKind: the `collective` job kind. Runs one collective (all-reduce,
// all-gather, reduce-scatter, all-to-all or broadcast) of a given size on one
// mesh, verified, and reports its bandwidth exactly as nccl-tests defines it,
// so an operator can check a cluster's fabric through meshcast:
//
//   meshctl submit collective --op all_reduce --mesh 2x4 --bytes 256MiB
//     --dtype float32 --wait
//
// Sizes follow nccl-tests: `size` is the per-rank output of all_reduce and
// all_gather, the per-rank input of reduce_scatter, the per-rank send buffer
// of all_to_all and the buffer of broadcast. Like nccl-tests, the element
// count is rounded down to a multiple of the rank count n for all_gather,
// reduce_scatter and all_to_all (the plan's Step.bytes says what ran).
//
// Plan (group = the mesh's devices in row-major order, rank r = devices[r];
// `iterations` steps back to back, each depending on the previous one):
//   all_reduce      IN [n, c] row r on rank r (SOURCE, pattern), OUT [c]
//                   whole on every rank (DESTINATION): OUT = sum/max of IN.
//   reduce_scatter  IN [n, c] as above; OUT [c], chunk r on rank r.
//   all_gather      one tensor T [c]: chunk r on rank r (SOURCE), the whole
//                   of T on every rank (DESTINATION); a move.
//   all_to_all      IN [n*c] sender-major, OUT [n*c] receiver-major, c/n
//                   elements from every rank to every rank.
//   broadcast       T [c] on rank 0 (SOURCE) relayed along the ranks in
//                   order (OP_BROADCAST) into every other rank.
// Metrics (JobResult.metrics; time = the slowest worker's time of a step,
// averaged over the iterations):
//   time_per_iteration_seconds, algbw_bytes_per_second = size / time,
//   busbw_bytes_per_second = algbw x factor (all_reduce 2(n-1)/n;
//   all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast 1), and
//   busbw_bound_bytes_per_second: the busbw the topology's lower bound
//   allows (planner/sim: no algorithm moves the bytes faster).
//
// Thread safety: stateless.
#ifndef MESHCAST_PLANNER_KINDS_COLLECTIVE_COLLECTIVE_KIND_H_
#define MESHCAST_PLANNER_KINDS_COLLECTIVE_COLLECTIVE_KIND_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "planner/kinds/job_kind.h"

namespace meshcast {

// The ops the kind runs, as written in specs and on command lines.
std::vector<std::string> CollectiveOpNames();
// nccl-tests' bus-bandwidth factor of `op` ("all_reduce") on n ranks.
double BusBandwidthFactor(absl::string_view op, int n);

// Appends the steps of the `collective` job `spec` (its op, size, dtype,
// reduction and iterations, validated as the kind validates them) on
// `devices` (the mesh's devices, placed) to `plan`, as the kind plans
// them: a group, tensors and buffers of its own, and `iterations` steps in
// a chain whose first step depends on step `after` (-1: none). Returns the
// appended steps' ids. For kinds that run collectives as measurements (the
// calibrate kind). INVALID_ARGUMENT as Validate, or when `devices` does
// not hold as many devices as the spec's mesh.
absl::StatusOr<std::vector<int>> AppendCollectiveSteps(
    const v1::JobSpec& spec, const std::vector<int>& devices, int after,
    v1::Plan& plan);

class CollectiveKind : public JobKind {
 public:
  std::string name() const override { return "collective"; }
  absl::Status Validate(const v1::JobSpec& spec) const override;
  absl::StatusOr<PlacementRequest> Meshes(
      const v1::JobSpec& spec) const override;
  absl::StatusOr<PlannedJob> Plan(const v1::JobSpec& spec,
                                  const std::vector<DeviceMesh>& meshes,
                                  const Topology& topology,
                                  const PlanOptions& options) const override;
  void Summarize(const v1::JobSpec& spec, const v1::Plan& plan,
                 v1::JobResult& result) const override;
};

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_COLLECTIVE_COLLECTIVE_KIND_H_
