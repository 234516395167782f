// ReshardModelKind: the `reshard_model` job kind: a whole model's weights
// moved from their training layout on one mesh to their inference layout on
// one or more replica meshes (what a reinforcement-learning loop does after
// every training step), every tensor planned together.
//
//   meshctl submit -f weights.yaml --wait   # reshard_model: {src_mesh: 1x4,
//                                           #   dst_meshes: [1x2, 1x2],
//                                           #   tensors: [{name: wq,
//                                           #     shape: 4096x4096,
//                                           #     src_spec: "R,S1",
//                                           #     dst_spec: "S1,R"}, ...]}
//   meshctl plan -f weights.yaml            # every strategy, predicted
//
// The replicas share one shape; together they form one destination mesh
// with a leading replica axis ([R] + the replica's shape), over which every
// tensor's dst_spec is replicated. Each tensor is then one resharding
// problem from src_mesh to that mesh, and all of them are planned in one
// request by the strategies of planner/strategy.h (auto: the fastest), so
// the load is balanced across tensors, senders and hosts and a slice bound
// for several replicas is relayed rather than sent once per replica.
//
// Meshes: [src_mesh, dst_meshes[0], ...]; they may share hosts (the
// replicas beside the trainer on a small cluster), never devices. With
// src_pipeline, src_mesh's first axis is a pipeline axis: each tensor's
// source is the row of its stage (a preset puts the embedding on the first
// stage, layer l on stage l x stages / layers and the final norm and the
// head on the last; a listed tensor names its stage or has "layers.N." in
// its name), laid out there by its src_spec. Every
// destination element is verified against its pattern. Metrics: as the
// reshard kind's (movbw_bytes_per_second, lower_bound_ratio), plus
// model_bytes (one copy of the model) and replicas.
//
// Errors: INVALID_ARGUMENT naming the field (e.g.
// "reshard_model.tensors[3].dst_spec") and the allowed values.
// Thread safety: stateless.
#ifndef MESHCAST_PLANNER_KINDS_RESHARD_MODEL_RESHARD_MODEL_KIND_H_
#define MESHCAST_PLANNER_KINDS_RESHARD_MODEL_RESHARD_MODEL_KIND_H_

#include <optional>
#include <string>
#include <vector>

#include "planner/kinds/job_kind.h"
#include "planner/sharding.h"
#include "planner/strategy.h"
#include "planner/tensor.h"

namespace meshcast {

class ReshardModelKind final : public JobKind {
 public:
  std::string name() const override { return "reshard_model"; }
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

struct ModelTensorRequest {
  std::string name;
  TensorSpec tensor;
  ShardingSpec src_spec;  // on src_mesh, or on its row with src_pipeline
  ShardingSpec dst_spec;  // on one replica's mesh
  int stage = 0;          // with src_pipeline: the row of src_mesh
};

struct ReshardModelRequest {
  MeshRequest src_mesh;
  std::vector<MeshRequest> dst_meshes;
  std::vector<ModelTensorRequest> tensors;
  Strategy strategy = Strategy::kAuto;
  // User buffers (v1::ReshardModelSpec): tensor NAME's source tiles are the
  // buffers named src_buffer_prefix + NAME, its destinations
  // dst_buffer_prefix + NAME; both empty: the worker's own tiles.
  std::string src_buffer_prefix;
  std::string dst_buffer_prefix;
  // Pipeline-parallel training (v1::ReshardModelSpec.src_pipeline): row s
  // of src_mesh (its first axis) holds the tensors of stage s.
  bool src_pipeline = false;
  // v1::ReshardModelSpec.max_transfers_per_host (planner/transfer_window.h);
  // 0: no bound.
  int max_transfers_per_host = 0;
  bool user_buffers() const { return !src_buffer_prefix.empty(); }
  int64_t model_bytes() const;
};
absl::StatusOr<ReshardModelRequest> ReshardModelRequestOf(
    const v1::JobSpec& spec);

// The tensors of a preset model (v1::ModelPreset) with Megatron-style
// tensor-parallel layouts over the last axis of each mesh (`src_rank`,
// `dst_rank` axes): embed [vocab, h] split by vocabulary; per layer
// attn_norm, mlp_norm [h] replicated, wq [h, h], wk and wv [h, kv_heads x
// head_dim] split by columns, wo [h, h] by rows; llama: w1, w3 [h, ffn] by
// columns, w2 [ffn, h] by rows; llama_moe: router [h, experts] replicated
// and experts.w1, w3 [experts, h, ffn], experts.w2 [experts, ffn, h] split
// by expert; final_norm [h]; lm_head [h, vocab] by columns. Errors name the
// preset's field.
absl::StatusOr<std::vector<ModelTensorRequest>> PresetTensors(
    const v1::ModelPreset& preset, int src_rank, int dst_rank);

// The pipeline stage of a tensor named `name` in a model of `layers`
// layers cut into `stages` stages: N x stages / layers for a name with
// "layers.N." in it, else nullopt.
std::optional<int> StageOfLayerName(const std::string& name, int layers,
                                    int stages);

// Row `row` of `mesh` (its first axis) as a mesh of the remaining axes.
DeviceMesh MeshRow(const DeviceMesh& mesh, int row);

// The replicas as one mesh with a leading replica axis, and `spec` (on one
// replica) replicated over that axis.
DeviceMesh ReplicaMesh(const std::vector<DeviceMesh>& replicas);
ShardingSpec OverReplicas(const ShardingSpec& spec);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_RESHARD_MODEL_RESHARD_MODEL_KIND_H_
