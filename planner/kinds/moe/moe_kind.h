// MoeKind: the `moe` job kind: one MoE layer (gate, all-to-all dispatch,
// expert FFNs, all-to-all combine) under model, expert and expert-sharding
// parallelism, run with one of three communication schedules.
//
//   meshctl submit -f moe.yaml --wait      # moe: {tokens: 1024, hidden: 512,
//                                          #   ffn: 1024, experts: 8, top_k: 2,
//                                          #   mesh: {shape: [2, 4]},
//                                          #   schedule: auto}
//   meshctl plan -f moe.yaml               # every schedule's prediction
//
// The mesh is ep x mp: axis 1 (the devices of one host) is the MP group and
// the ESP group, axis 0 the EP group. `tokens` is the MP group's batch
// (replicated on its mp devices, as after an attention block's all-reduce);
// experts (a multiple of ep) live E/ep per EP rank, each sharded over the
// ESP group (ffn divisible by mp).
//
// Schedules (moe_lowering.h has the exact IR): baseline (every MP rank
// repeats gate, dispatch and combine; n-fold all-to-all; ESP all-reduce),
// s1 (MP paused: one slice per rank, all-to-all, ESP all-gather,
// reduce-scatter, MP all-gather), s2 (s1 with each all-to-all pipelined
// with its intra-host all-gather, `chunks` pieces), auto (the schedule, and
// for s2 the piece count, the simulator predicts fastest on the placed
// topology). Every schedule routes the same tokens (a seeded router, fixed
// at planning) and computes the same output, which the workers verify
// against a float64 reference.
//
// Metrics (Summarize, seconds; the slowest device's span of each phase):
// gate_seconds, dispatch_seconds, esp_gather_seconds, experts_seconds,
// esp_reduce_seconds, combine_seconds; total_seconds (first start to last
// end); predicted_total_seconds; dropped_tokens_fraction (choices beyond
// capacity) and expert_load_imbalance (the busiest expert's choices over
// the mean).
//
// Errors: INVALID_ARGUMENT naming the field and the allowed values.
// Thread safety: stateless.
#ifndef MESHCAST_PLANNER_KINDS_MOE_MOE_KIND_H_
#define MESHCAST_PLANNER_KINDS_MOE_MOE_KIND_H_

#include <string>
#include <vector>

#include "planner/kinds/job_kind.h"
#include "planner/kinds/moe/moe_lowering.h"

namespace meshcast {

class MoeKind final : public JobKind {
 public:
  std::string name() const override { return "moe"; }
  absl::Status Validate(const v1::JobSpec& spec) const override;
  absl::StatusOr<PlacementRequest> Meshes(
      const v1::JobSpec& spec) const override;
  absl::StatusOr<PlannedJob> Plan(const v1::JobSpec& spec,
                                  const std::vector<DeviceMesh>& meshes,
                                  const Topology& topology,
                                  const PlanOptions& options) const override;
  void Summarize(const v1::JobSpec& spec, const v1::Plan& plan,
                 v1::JobResult& result) const override;
  // total_seconds: the layer's span, which predicted_seconds is for.
  double PredictedSpanSeconds(const v1::JobResult& result) const override;
};

// The shape a spec asks for (validated), with the mesh shape it implies.
struct MoeRequest {
  MoeShape shape;
  MoeSchedule schedule = MoeSchedule::kAuto;
  int chunks = 0;  // s2 pieces; 0 = the model's pick
  MeshRequest mesh;
};
absl::StatusOr<MoeRequest> MoeRequestOf(const v1::JobSpec& spec);

// The s2 piece counts worth trying for `shape`: 2, 4, 8, 16 up to the
// capacity.
std::vector<int> MoeCandidateChunks(const MoeShape& shape);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_MOE_MOE_KIND_H_
