// ReshardKind: the `reshard` job kind. Moves one tensor from a source layout
// on one mesh to a destination layout on another (cross-mesh resharding),
// with the strategies of planner/strategy.h; `auto` (the default) picks the
// fastest simulated one.
//
//   v1::JobSpec spec;  // spec.reshard: tensor, src/dst mesh and spec
//   ReshardKind kind;
//   ASSIGN_OR_RETURN(PlannedJob job, kind.Plan(spec, {src, dst}, topology,
//                                              {.compare_all = true}));
//
// Meshes: [src_mesh, dst_mesh]. Plan: the chosen strategy's transfers
// lowered to the IR (reshard_lowering.h); alternatives: one row per
// strategy when compared (always for auto). Metrics:
// `movbw_bytes_per_second` (bytes delivered to receivers / data-plane
// seconds) and `lower_bound_ratio` (seconds / lower bound).
//
// Thread safety: stateless.
#ifndef MESHCAST_PLANNER_KINDS_RESHARD_RESHARD_KIND_H_
#define MESHCAST_PLANNER_KINDS_RESHARD_RESHARD_KIND_H_

#include <string>
#include <vector>

#include "planner/kinds/job_kind.h"
#include "planner/strategy.h"
#include "planner/unit_task.h"

namespace meshcast {

class ReshardKind : public JobKind {
 public:
  std::string name() const override { return "reshard"; }
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

// Shared with the reshard_model kind: plans `problems` together with
// `strategy` (auto: the fastest simulated plan; strategies that cannot win
// are listed as pruned, not planned; a forced strategy is planned alone),
// lowers the chosen plan to the IR with its prediction and lower bound, and
// lists the alternatives for auto or options.compare_all. With
// max_transfers_per_host > 0, every plan runs at most that many transfers
// touching one host at once (planner/transfer_window.h), and is predicted so.
absl::StatusOr<PlannedJob> PlanReshardJob(
    const std::vector<ReshardProblem>& problems, const Topology& topology,
    Strategy strategy, const PlanOptions& options,
    int max_transfers_per_host = 0);
// movbw_bytes_per_second and lower_bound_ratio of a reshard's result.
void SummarizeReshard(v1::JobResult& result);

// User buffers (docs/user_buffers.md): the source tiles of plan tensor t
// are the user buffer src_names[t] and its destinations dst_names[t]
// (v1::Buffer.user_buffer); a tensor past the lists, or an empty name,
// keeps the worker's own tiles.
void NameUserBuffers(const std::vector<std::string>& src_names,
                     const std::vector<std::string>& dst_names,
                     v1::Plan& plan);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_RESHARD_RESHARD_KIND_H_
