// TpOverlapKind: the `tp_overlap` job kind: a tensor-parallel GEMM whose
// output feeds a reduce-scatter or all-reduce (the T3 setting), run in one
// of several modes so that the collective's cost can be hidden behind the
// GEMM.
//
//   meshctl submit tp_overlap --m 1024 --n 1024 --k 4096 --mesh 1x4 --wait
//
// Rank r of the mesh (tp ranks, row-major) holds A_r = A[:, k_r] and
// B_r = B[k_r, :], k_r its chunk of k (k divisible by tp); A [m, k] and
// B [k, n] are seeded random tensors (seeds 1 and 2). The output sum_r A_r
// B_r is reduce-scattered (rows in tp equal pieces; m divisible by tp) or
// all-reduced, and checked against the float64 reference.
//
// Modes (tp_overlap_lowering.h has the exact IR of each):
//   sequential (default)  the whole GEMM, then the whole collective;
//   chunked               the GEMM in `chunks` row blocks, each block's
//                         collective issued after it;
//   fused                 T3's track & trigger: staggered chunk order, a
//                         ring of point-to-point sends and additions, each
//                         send triggered by its own tiles only;
//   auto                  the mode and chunk count the cost model
//                         (tp_overlap_cost.h) predicts fastest.
// `chunks` 0 lets the cost model pick the count for the mode.
//
// Stages of the plan (one job measures everything it reports):
//   stage 0  the full GEMM alone on every rank (scratch output);
//   stage 1  the collective alone on that scratch output, after stage 0;
//   stage 2  the mode's communication and ring additions, stage 3 its
//            GEMMs; every mode step runs after stage 1 has finished on its
//            rank. Only the mode writes the DESTINATION (verified) output.
// plan.predicted_seconds is the predicted MODE PHASE (first start to last
// finish of the stage >= 2 steps), the figure comparable across modes and
// with total_seconds; the stages 0 and 1 before it make the job's wall time
// (JobResult.seconds) longer. plan.lower_bound_seconds =
// max(GEMM alone as predicted, the collective's lower bound).
//
// Metrics (Summarize, seconds): gemm_seconds (stage 0: the slowest
// device's span), comm_seconds (stage 1: the slowest worker's span),
// total_seconds (the mode phase: last end - first start over every
// worker), overlap_efficiency = (gemm + comm - total) / min(gemm, comm)
// clipped to [0, 1], gemm_slowdown = the slowest device's span of the mode's
// GEMM steps (first start to last end: dispatch gaps included) over
// gemm_seconds, predicted_total_seconds = plan.predicted_seconds. Without
// measured steps (`meshctl plan`) the plan's predicted step times stand in.
//
// Errors: INVALID_ARGUMENT naming the field and the allowed values (mode,
// chunks against the mode and tp, collective, dtype, extents, k and m
// against tp).
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
  // total_seconds: the mode phase, which predicted_seconds is for.
  double PredictedSpanSeconds(const v1::JobResult& result) const override;
};

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_TP_OVERLAP_TP_OVERLAP_KIND_H_
