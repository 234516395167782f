// AttentionKind: the `attention` job kind, self-attention over a sequence
// split across a sequence-parallel group (attention_lowering.h says what is
// computed and how each algorithm moves K and V).
//
//   meshctl plan -f attention.yaml --cluster 1x8     # every algorithm
//   meshctl submit -f attention.yaml --wait          # runs it, verified
//
// Spec (AttentionSpec): batch (default 1), heads, kv_heads (default heads;
// divides heads), seq_len, head_dim, mesh (the group, row-major), causal,
// layout (contiguous | zigzag | striped), algorithm (rsa | ring | ulysses |
// auto), dtype (float32 default, float64, float16, bfloat16), pass
// (forward, or forward_backward: the gradients dQ, dK, dV too), seed.
//
// Plan: the algorithm asked for, or for auto every algorithm that fits
// (ulysses needs heads and kv_heads divisible by the group size),
// simulated on the placed topology; the fastest runs. The lower bound is
// the compute-only ideal: the attention FLOPs (causal: the unmasked
// half) split evenly over the group at the device's FLOP rate, with no
// communication.
//
// Metrics (JobResult.metrics): total_seconds (first step start to last
// step end), predicted_total_seconds, compute_only_ideal_seconds and
// ideal_fraction (ideal / total), compute_max_seconds and
// compute_mean_seconds (per rank: the sum of its attention steps' spans)
// and causal_balance_wall (their max / mean), compute_cpu_max_seconds and
// compute_cpu_mean_seconds (per rank: the CPU time those steps' threads
// used, where the engine measures it: StepResult.cpu_seconds) and
// causal_balance (max / mean of the CPU seconds where every step has them,
// else causal_balance_wall: a span also holds the time a shared core ran
// another process), work_balance (max / mean of the attention FLOPs the
// plan gives each rank: what the layout promises, where causal_balance is
// what the machine made of it),
// bytes_sent_per_rank_max (what the plan
// makes one rank send), memory_bytes_per_rank_max (the plan's buffers on
// the busiest rank).
//
// Errors: INVALID_ARGUMENT naming the field and the allowed values.
// Thread safety: stateless.
#ifndef MESHCAST_PLANNER_KINDS_ATTENTION_ATTENTION_KIND_H_
#define MESHCAST_PLANNER_KINDS_ATTENTION_ATTENTION_KIND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/kinds/attention/attention_lowering.h"
#include "planner/kinds/job_kind.h"

namespace meshcast {

struct AttentionRequest {
  AttentionShape shape;
  AttentionAlgorithm algorithm = AttentionAlgorithm::kAuto;
  MeshRequest mesh;
};
absl::StatusOr<AttentionRequest> AttentionRequestOf(const v1::JobSpec& spec);

// The attention FLOPs of `shape` over the whole sequence (4 B H S^2 D, and
// 10 B H S^2 D more for the backward, the fused backward's five GEMMs;
// half of the score pairs with causal).
double AttentionFlops(const AttentionShape& shape);

// Bytes of the plan's buffers on each global device.
std::vector<int64_t> PlanMemoryPerDevice(const v1::Plan& plan);

class AttentionKind : public JobKind {
 public:
  std::string name() const override { return "attention"; }
  absl::Status Validate(const v1::JobSpec& spec) const override;
  absl::StatusOr<PlacementRequest> Meshes(
      const v1::JobSpec& spec) const override;
  absl::StatusOr<PlannedJob> Plan(const v1::JobSpec& spec,
                                  const std::vector<DeviceMesh>& meshes,
                                  const Topology& topology,
                                  const PlanOptions& options) const override;
  void Summarize(const v1::JobSpec& spec, const v1::Plan& plan,
                 v1::JobResult& result) const override;
  double PredictedSpanSeconds(const v1::JobResult& result) const override;
};

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_ATTENTION_ATTENTION_KIND_H_
