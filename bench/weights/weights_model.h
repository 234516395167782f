// The weights of an MLA + MoE model (DeepSeek-V3 / Kimi-K2 architecture) as
// resharding problems: every tensor with its layout on the training mesh
// and on one inference replica, for the weights benchmark (weights_bench.cc).
//
//   const MoeModelShape shape = MoeModelShape::KimiK2();
//   const std::vector<WeightTensor> weights = ModelWeights(shape);
//   // shape.NumParams() == sum of weights[i].tensor.num_elements()
//
// Layouts. The training mesh is [dp, ep, tp] (data-parallel groups x
// expert-parallel groups of hosts x GPUs of a host): routed experts split
// by expert over the ep axis and by their ffn dimension over tp; every
// other matrix tensor-parallel over tp (Megatron-style: column-parallel
// q_b, kv_b, w1, w3, lm_head; row-parallel o_proj, w2; the embedding by
// vocabulary) and replicated over dp and ep; the low-rank MLA
// down-projections (q_a, kv_a), the router and the norms replicated, as
// inference engines keep them. One inference replica is [hosts, gpus]:
// routed experts split by expert over all its GPUs (expert parallelism
// across the replica), every other tensor tensor-parallel over the GPUs of
// a host as in training and replicated over hosts.
//
// Thread safety: pure functions over value types.
#ifndef MESHCAST_BENCH_WEIGHTS_WEIGHTS_MODEL_H_
#define MESHCAST_BENCH_WEIGHTS_WEIGHTS_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "planner/sharding.h"
#include "planner/tensor.h"

namespace meshcast::bench {

// The shape figures of the model. KimiK2() holds Kimi K2's published
// configuration (the DeepSeek-V3 architecture with 384 routed experts and
// 64 heads).
struct MoeModelShape {
  std::string name = "kimi-k2";
  int layers = 61;        // transformer blocks
  int dense_layers = 1;   // the first blocks have a dense MLP, the rest MoE
  int64_t hidden = 7168;
  int64_t vocab = 163840;
  int64_t dense_ffn = 18432;
  int64_t experts = 384;  // routed
  int64_t shared_experts = 1;
  int64_t expert_ffn = 2048;
  int64_t heads = 64;
  int64_t q_lora_rank = 1536;
  int64_t kv_lora_rank = 512;
  int64_t qk_nope_head_dim = 128;
  int64_t qk_rope_head_dim = 64;
  int64_t v_head_dim = 128;
  DType dtype = DType::kBFloat16;

  static MoeModelShape KimiK2();

  // Every size >= 1, 0 <= dense_layers <= layers, shared_experts >= 0.
  absl::Status Validate() const;
  int64_t NumParams() const;
  int64_t NumBytes() const { return NumParams() * DTypeSize(dtype); }
  // One line: "61 layers (1 dense), hidden 7168, ...".
  std::string Describe() const;
};

// Which block a tensor belongs to.
enum class BlockKind { kOther, kDense, kMoe };

struct WeightTensor {
  std::string name;  // "layers.3.mlp.experts.w1"
  TensorSpec tensor;
  ShardingSpec train_spec;  // on the [dp, ep, tp] training mesh
  ShardingSpec infer_spec;  // on one [hosts, gpus] inference replica
  int layer = -1;           // -1: embedding, final norm, lm_head
  BlockKind block = BlockKind::kOther;
};

// Every tensor of the model, block by block: the tensors of layers
// [first_layer, first_layer + num_layers) (num_layers < 0: to the end),
// plus the embedding, final norm and lm_head when `with_ends`.
std::vector<WeightTensor> ModelWeights(const MoeModelShape& shape,
                                       int first_layer = 0,
                                       int num_layers = -1,
                                       bool with_ends = true);

}  // namespace meshcast::bench

#endif  // MESHCAST_BENCH_WEIGHTS_WEIGHTS_MODEL_H_
