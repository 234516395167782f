// Lowering of a `pipeline` job (one training step of a model cut into
// stages on separate device meshes) to the plan IR, under one schedule.
//
//   PipelineShape shape;  shape.microbatches = 4;  shape.hidden = 64; ...
//   ASSIGN_OR_RETURN(std::vector<PipelineHop> hops,
//                    PlanPipelineHops(shape, stages, topology,
//                                     Strategy::kAuto));
//   ASSIGN_OR_RETURN(LoweredPipeline lowered,
//                    LowerPipeline(shape, stages, hops,
//                                  PipelineSchedule::kEager1F1B));
//
// The model. Stage s holds L = shape.layers MLP blocks; block l maps an
// activation X [b, h] (b = microbatch_size, h = hidden) to
//   Y = relu(X W1 / sqrt(h)) W2 / sqrt(f)      W1 [h, f], W2 [f, h]
// (f = ffn), the next block's input; the stage's input is the previous
// stage's output (the job's input X_m [b, h] for stage 0, seeded random per
// micro-batch m). The backward runs from a seeded output gradient dY_m [b,
// h] on the last stage: with Z = X W1 / sqrt(h), H = relu(Z),
//   dH = dY W2^T / sqrt(f)      dZ = dH where Z > 0, else 0
//   dW2 += H^T dY / sqrt(f)     dW1 += X^T dZ / sqrt(h)
//   dX = dZ W1^T / sqrt(h)      (the previous block's dY; not computed for
//                                the first block of stage 0)
// summed over the micro-batches.
//
// Parallelism inside a stage: the blocks are tensor-parallel over every
// device of the stage's mesh (tp = its size; f divisible by tp): device r
// holds columns [r f/tp, (r+1) f/tp) of W1 and those rows of W2, computes
// its part of Z, H and a partial Y, and the partials are all-reduced over
// the mesh (likewise dX), so activations are whole on every device between
// blocks. A stage receives its input in its `input_spec` layout and, when
// that is not whole on every device, all-gathers it over its mesh first;
// it sends its output in its `output_spec` layout (each device the part of
// the output that layout gives it). Gradients travel back the same way:
// from the next stage's input layout to this stage's output layout.
//
// Between stages: the activation A_{s,m} (stage s's output, micro-batch m)
// moves from mesh s in output_spec(s) to mesh s+1 in input_spec(s+1), and
// its gradient back from mesh s+1 in input_spec(s+1) to mesh s in
// output_spec(s), each by the resharding plan of `hops[s]` (planned once
// per stage boundary, instantiated per micro-batch). A send depends on the
// step that produced its data and on the stage's previous send (a stage's
// sends leave in order, as on one communication stream), not on the
// stage's compute, so it overlaps the stage's next block; with
// shape.overlap false the stage's next block waits for it (the no-overlap
// baseline).
//
// Schedule: each stage runs its blocks in PipelineOrder(schedule) order,
// every block's first steps depending on the previous block's last ones.
//
// Step fields: stage = the pipeline stage (the sender's for a send); label
// = the block ("F3", "B3") for compute, all-gathers and all-reduces, "F3>"
// for the forward send of micro-batch 3 to the next stage, "<B3" for the
// gradient sent to the previous one.
//
// Outputs (ROLE_DESTINATION, verified): every stage output A_{s,m} on every
// device of mesh s (the last stage's is the step's output), what each
// receiving device gets of it and of its gradient, and each device's
// shard of dW1 and dW2 of every block.
//
// Errors: INVALID_ARGUMENT when the shape does not fit the meshes (the kind
// validates first; these guard direct callers).
//
// Thread safety: pure functions.
#ifndef MESHCAST_PLANNER_KINDS_PIPELINE_PIPELINE_LOWERING_H_
#define MESHCAST_PLANNER_KINDS_PIPELINE_PIPELINE_LOWERING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/kinds/pipeline/pipeline_schedule.h"
#include "planner/mesh.h"
#include "planner/plan.h"
#include "planner/sharding.h"
#include "planner/strategy.h"
#include "planner/tensor.h"
#include "planner/topology.h"

namespace meshcast {

struct PipelineShape {
  int microbatches = 1;        // M
  int64_t microbatch_size = 0; // b
  int64_t hidden = 0;          // h
  int64_t ffn = 0;             // f
  int layers = 1;              // L, per stage
  DType dtype = DType::kFloat32;
  uint64_t seed = 1;
  bool overlap = true;
};

struct PipelineStageLayout {
  DeviceMesh mesh;  // placed
  ShardingSpec input_spec;
  ShardingSpec output_spec;
};

// The resharding plans of one stage boundary (s -> s+1), for one
// micro-batch's [b, h] activation: forward in output_spec(s) ->
// input_spec(s+1), backward the reverse.
struct PipelineHop {
  ReshardPlan forward;
  ReshardPlan backward;
};

// Tensor ids of a lowered pipeline (tests, summaries).
struct PipelineTensors {
  std::vector<int> input;        // X_m, per micro-batch
  std::vector<int> output;       // the last stage's output, per micro-batch
  std::vector<int> output_grad;  // dY_m
  // [stage][layer]
  std::vector<std::vector<int>> w1, w2, dw1, dw2;
};

struct LoweredPipeline {
  v1::Plan plan;
  PipelineTensors tensors;
};

// The activation bytes one device of a stage of `tp` devices keeps per
// micro-batch between its forward and its backward: each block's input X
// [b, h] and its parts of Z and H [b, f/tp].
int64_t PipelineActivationBytes(const PipelineShape& shape, int tp);

// The stage boundaries' resharding plans (stages.size() - 1 of them), by
// `strategy` on `topology`.
absl::StatusOr<std::vector<PipelineHop>> PlanPipelineHops(
    const PipelineShape& shape, const std::vector<PipelineStageLayout>& stages,
    const Topology& topology, Strategy strategy);

// The plan of `schedule` (not kAuto). Not simulated.
absl::StatusOr<LoweredPipeline> LowerPipeline(
    const PipelineShape& shape, const std::vector<PipelineStageLayout>& stages,
    const std::vector<PipelineHop>& hops, PipelineSchedule schedule);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_PIPELINE_PIPELINE_LOWERING_H_
