// TpOverlapKind: the `tp_overlap` job kind: a tensor-parallel GEMM whose
// output feeds a reduce-scatter or all-reduce (the T3 setting).
//
//   meshctl submit tp_overlap --m 1024 --n 1024 --k 4096 --mesh 1x4 --wait
//
// Rank r of the mesh (tp ranks, row-major) holds A_r = A[:, k_r] and
// B_r = B[k_r, :], k_r its chunk of k (k divisible by tp); A [m, k] and
// B [k, n] are seeded random tensors (seeds 1 and 2). Each rank computes the
// partial product P[r] = A_r B_r (one OP_COMPUTE GEMM on its device), then
// one collective over the mesh combines them into Y [m, n]:
//   reduce_scatter  Y's rows in tp chunks, chunk r on rank r (m divisible
//                   by tp);
//   all_reduce      the whole Y on every rank.
// Y is checked against the float64 reference of sum_r A_r B_r.
//
// Modes: `sequential` (the default): the whole GEMM, then the whole
// collective: the baseline every overlap scheme is compared against. The
// overlapping modes (chunked, fused, auto) are not built yet; asking for one
// is INVALID_ARGUMENT naming the modes available.
//
// Metrics: gemm_seconds (slowest rank's GEMM), comm_seconds (the
// collective), total_seconds (their sum along the DAG as measured: the
// data-plane time), overlap_efficiency = (t_gemm + t_comm - t_total) /
// min(t_gemm, t_comm) (docs/conventions.md: 0 for sequential, up to 1).
//
// Thread safety: stateless.
#ifndef MESHCAST_PLANNER_KINDS_TP_OVERLAP_TP_OVERLAP_KIND_H_
#define MESHCAST_PLANNER_KINDS_TP_OVERLAP_TP_OVERLAP_KIND_H_

#include <string>
#include <vector>

#include "planner/kinds/job_kind.h"

namespace meshcast {

class TpOverlapKind : public JobKind {
 public:
  std::string name() const override { return "tp_overlap"; }
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

#endif  // MESHCAST_PLANNER_KINDS_TP_OVERLAP_TP_OVERLAP_KIND_H_
