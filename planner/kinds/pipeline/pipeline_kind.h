// PipelineKind: the `pipeline` job kind: one training step of a model cut
// into stages that live on different device meshes, run with the gpipe,
// 1f1b or eager_1f1b schedule; activations and their gradients move
// between the meshes by cross-mesh resharding.
//
//   meshctl submit -f pipeline.yaml --wait   # pipeline: {stages: [
//                                            #   {mesh: 1x2, input_spec: "S0,R",
//                                            #    output_spec: "R,S1"}, ...],
//                                            #  microbatches: 8, hidden: 256, ...}
//   meshctl plan -f pipeline.yaml            # every schedule, predicted
//
// The model and its lowering: pipeline_lowering.h; the orders:
// pipeline_schedule.h. auto plans the three schedules on the placed
// topology and runs the fastest whose predicted activation memory fits
// memory_limit_bytes on every device (schedules within 1% of the fastest
// tie, and the one keeping fewer activations wins); a forced schedule that
// does not fit is refused, at submit. With `no_overlap` every stage waits for its sends before its
// next block (the baseline that eager_1f1b's overlap is measured against).
//
// Metrics (Summarize; measured from the step timeline, or predicted from
// the plan when the result has none): step_seconds (first start to last
// end), predicted_step_seconds, bubble_fraction (1 - the stages' mean busy
// time over step_seconds), stage<i>_busy_seconds (the time any device of
// stage i runs one of its blocks: compute, all-gathers, all-reduces), stage<i>_peak_activation_bytes (the
// most micro-batches between the start of their forward and the end of
// their backward at once on stage i, times the activation bytes a device
// keeps per micro-batch) and peak_activation_bytes (their maximum),
// predicted_peak_activation_bytes (the schedule's own).
//
// Errors: INVALID_ARGUMENT naming the field and the allowed values.
// Thread safety: stateless.
#ifndef MESHCAST_PLANNER_KINDS_PIPELINE_PIPELINE_KIND_H_
#define MESHCAST_PLANNER_KINDS_PIPELINE_PIPELINE_KIND_H_

#include <string>
#include <vector>

#include "planner/kinds/job_kind.h"
#include "planner/kinds/pipeline/pipeline_lowering.h"
#include "planner/kinds/pipeline/pipeline_schedule.h"
#include "planner/strategy.h"

namespace meshcast {

class PipelineKind final : public JobKind {
 public:
  std::string name() const override { return "pipeline"; }
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

// A stage as asked for: its mesh request and layouts.
struct PipelineStageRequest {
  MeshRequest mesh;
  ShardingSpec input_spec;
  ShardingSpec output_spec;
  int devices() const;
};

// The validated spec.
struct PipelineRequest {
  PipelineShape shape;
  std::vector<PipelineStageRequest> stages;
  PipelineSchedule schedule = PipelineSchedule::kAuto;
  int64_t memory_limit_bytes = 0;  // 0: no limit
  Strategy strategy = Strategy::kAuto;
};
absl::StatusOr<PipelineRequest> PipelineRequestOf(const v1::JobSpec& spec);

// The most activation bytes a device keeps under `schedule` (the largest
// over stages of its peak in-flight micro-batches times the bytes each
// keeps).
int64_t PredictedPeakActivationBytes(const PipelineRequest& request,
                                     PipelineSchedule schedule);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_PIPELINE_PIPELINE_KIND_H_
