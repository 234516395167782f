// CalibrateKind: the `calibrate` job kind. Measures how long the
// collectives take on the live cluster, per class of links, and fits
// t = alpha + beta x bytes, so that planners predict with the cluster's own
// rates rather than the topology's nominal figures:
//
//   meshctl calibrate --mesh 2x4          # runs it, stores the fit
//   meshctl calibrate --show              # the fitted table
//
// The job (CalibrateSpec): on a mesh of H hosts x D devices, each op of
// `ops` runs over the D devices of the mesh's first host (intra_host, when
// D >= 2) and over the first device of each of its H hosts (inter_host,
// when H >= 2), at `points` sizes from `min_size` to `max_size` (geometric,
// per-rank bytes as a `collective` job counts them), `repeat` times each,
// every step after the previous one so that no two measurements share the
// links. The steps are the `collective` kind's (AppendCollectiveSteps),
// verified the same way.
//
// Summarize: per (op, class), the median of each size's runs (a step's time
// is its slowest worker's) fitted by FitAlphaBeta, and the same fit of the
// simulator's prediction of the very same steps on the topology without
// calibration. Metrics, per op and class ("all_to_all_inter_host_..."):
// alpha_seconds, beta_seconds_per_byte, model_alpha_seconds,
// model_beta_seconds_per_byte, ranks; and `points_fitted`. A pair whose fit
// fails (beta <= 0 from too few or too noisy points) is left out.
// Calibration() reads them back; the controller attaches the latest
// successful job's to the topology it plans on (planner/topology.h).
//
// Errors: INVALID_ARGUMENT naming the field (calibrate.ops[i],
// calibrate.mesh, calibrate.min_size, calibrate.max_size, calibrate.points,
// calibrate.repeat, calibrate.dtype) and the allowed values.
//
// Thread safety: stateless; pure functions.
#ifndef MESHCAST_PLANNER_KINDS_CALIBRATE_CALIBRATE_KIND_H_
#define MESHCAST_PLANNER_KINDS_CALIBRATE_CALIBRATE_KIND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/kinds/job_kind.h"
#include "planner/topology.h"

namespace meshcast {

// The ops a calibrate job may measure, in their default order.
std::vector<std::string> CalibratedOpNames();

struct AlphaBeta {
  double alpha_seconds = 0;
  double beta_seconds_per_byte = 0;
};

// The fit of t = alpha + beta x bytes to (bytes[i], seconds[i]) minimizing
// the relative error sum ((alpha + beta x_i - t_i) / t_i)^2, so that small
// sizes (which fix alpha) weigh as much as large ones (which fix beta);
// alpha is then clamped at 0 (and beta refitted through the origin).
// INVALID_ARGUMENT for fewer than 2 points, two sizes alike, a time <= 0,
// or a fit whose beta is not > 0.
absl::StatusOr<AlphaBeta> FitAlphaBeta(const std::vector<double>& bytes,
                                       const std::vector<double>& seconds);

class CalibrateKind : public JobKind {
 public:
  std::string name() const override { return "calibrate"; }
  absl::Status Validate(const v1::JobSpec& spec) const override;
  absl::StatusOr<PlacementRequest> Meshes(
      const v1::JobSpec& spec) const override;
  absl::StatusOr<PlannedJob> Plan(const v1::JobSpec& spec,
                                  const std::vector<DeviceMesh>& meshes,
                                  const Topology& topology,
                                  const PlanOptions& options) const override;
  void Summarize(const v1::JobSpec& spec, const v1::Plan& plan,
                 v1::JobResult& result) const override;
  std::vector<CollectiveCalibration> Calibration(
      const v1::JobSpec& spec, const v1::JobResult& result) const override;
};

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_CALIBRATE_CALIBRATE_KIND_H_
