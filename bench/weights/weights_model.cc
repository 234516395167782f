#include "bench/weights/weights_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace meshcast::bench {
namespace {

// Mesh axes. Training mesh [dp, ep, tp]; inference replica [hosts, gpus].
constexpr int kTrainEp = 1;
constexpr int kTrainTp = 2;
constexpr int kInferHosts = 0;
constexpr int kInferGpus = 1;

// A spec from one list of mesh axes per tensor dimension ({} = replicated).
ShardingSpec SpecOf(std::vector<std::vector<int>> axes) {
  ShardingSpec spec;
  for (std::vector<int>& dim : axes) spec.dims.push_back({std::move(dim)});
  return spec;
}

// How a tensor is split in both layouts.
enum class Split {
  kReplicated,  // norms, router, the MLA down-projections
  kColumn,      // tensor-parallel over the last dimension
  kRow,         // tensor-parallel over the first dimension
  kExpertIn,    // [experts, hidden, ffn]: by expert, and ffn over tp
  kExpertOut,   // [experts, ffn, hidden]: by expert, and ffn over tp
};

std::pair<ShardingSpec, ShardingSpec> Layouts(Split split, int dims) {
  std::vector<std::vector<int>> none(dims);
  switch (split) {
    case Split::kReplicated:
      return {SpecOf(none), SpecOf(none)};
    case Split::kColumn:
      return {SpecOf({{}, {kTrainTp}}), SpecOf({{}, {kInferGpus}})};
    case Split::kRow:
      return {SpecOf({{kTrainTp}, {}}), SpecOf({{kInferGpus}, {}})};
    case Split::kExpertIn:
      return {SpecOf({{kTrainEp}, {}, {kTrainTp}}),
              SpecOf({{kInferHosts, kInferGpus}, {}, {}})};
    case Split::kExpertOut:
      return {SpecOf({{kTrainEp}, {kTrainTp}, {}}),
              SpecOf({{kInferHosts, kInferGpus}, {}, {}})};
  }
  return {SpecOf(none), SpecOf(none)};
}

class Builder {
 public:
  Builder(const MoeModelShape& shape, std::vector<WeightTensor>& out)
      : shape_(shape), out_(out) {}

  void Add(std::string name, std::vector<int64_t> dims, Split split,
           int layer = -1, BlockKind block = BlockKind::kOther) {
    auto [train, infer] = Layouts(split, static_cast<int>(dims.size()));
    out_.push_back({std::move(name), TensorSpec{std::move(dims), shape_.dtype},
                    std::move(train), std::move(infer), layer, block});
  }

  void Attention(const std::string& at, int layer, BlockKind block) {
    const MoeModelShape& s = shape_;
    const int64_t qk = s.qk_nope_head_dim + s.qk_rope_head_dim;
    Add(at + "input_norm", {s.hidden}, Split::kReplicated, layer, block);
    Add(at + "attn.q_a", {s.hidden, s.q_lora_rank}, Split::kReplicated,
        layer, block);
    Add(at + "attn.q_a_norm", {s.q_lora_rank}, Split::kReplicated, layer,
        block);
    Add(at + "attn.q_b", {s.q_lora_rank, s.heads * qk}, Split::kColumn,
        layer, block);
    Add(at + "attn.kv_a", {s.hidden, s.kv_lora_rank + s.qk_rope_head_dim},
        Split::kReplicated, layer, block);
    Add(at + "attn.kv_a_norm", {s.kv_lora_rank}, Split::kReplicated, layer,
        block);
    Add(at + "attn.kv_b",
        {s.kv_lora_rank, s.heads * (s.qk_nope_head_dim + s.v_head_dim)},
        Split::kColumn, layer, block);
    Add(at + "attn.o", {s.heads * s.v_head_dim, s.hidden}, Split::kRow, layer,
        block);
    Add(at + "post_attn_norm", {s.hidden}, Split::kReplicated, layer, block);
  }

  void Mlp(const std::string& at, int64_t ffn, int layer, BlockKind block) {
    Add(at + "w1", {shape_.hidden, ffn}, Split::kColumn, layer, block);
    Add(at + "w3", {shape_.hidden, ffn}, Split::kColumn, layer, block);
    Add(at + "w2", {ffn, shape_.hidden}, Split::kRow, layer, block);
  }

  void Moe(const std::string& at, int layer) {
    const MoeModelShape& s = shape_;
    const BlockKind moe = BlockKind::kMoe;
    Add(at + "router", {s.experts, s.hidden}, Split::kReplicated, layer, moe);
    Add(at + "router_bias", {s.experts}, Split::kReplicated, layer, moe);
    Add(at + "experts.w1", {s.experts, s.hidden, s.expert_ffn},
        Split::kExpertIn, layer, moe);
    Add(at + "experts.w3", {s.experts, s.hidden, s.expert_ffn},
        Split::kExpertIn, layer, moe);
    Add(at + "experts.w2", {s.experts, s.expert_ffn, s.hidden},
        Split::kExpertOut, layer, moe);
    if (s.shared_experts > 0) {
      Mlp(at + "shared.", s.shared_experts * s.expert_ffn, layer, moe);
    }
  }

 private:
  const MoeModelShape& shape_;
  std::vector<WeightTensor>& out_;
};

}  // namespace

MoeModelShape MoeModelShape::KimiK2() { return MoeModelShape{}; }

absl::Status MoeModelShape::Validate() const {
  for (int64_t v : {hidden, vocab, dense_ffn, experts, expert_ffn, heads,
                    q_lora_rank, kv_lora_rank, qk_nope_head_dim,
                    qk_rope_head_dim, v_head_dim}) {
    if (v < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("model ", name, ": every size must be >= 1"));
    }
  }
  if (layers < 1 || dense_layers < 0 || dense_layers > layers ||
      shared_experts < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", name, ": layers ", layers, ", dense_layers ", dense_layers,
        ", shared_experts ", shared_experts,
        "; allowed: layers >= 1, 0 <= dense_layers <= layers"));
  }
  return absl::OkStatus();
}

int64_t MoeModelShape::NumParams() const {
  int64_t params = 0;
  for (const WeightTensor& w : ModelWeights(*this)) {
    params += w.tensor.num_elements();
  }
  return params;
}

std::string MoeModelShape::Describe() const {
  return absl::StrFormat(
      "%s: %d layers (%d dense, ffn %d), hidden %d, vocab %d, %d routed + %d "
      "shared experts of ffn %d, %d heads, MLA q_lora %d, kv_lora %d, "
      "qk_nope %d, qk_rope %d, v_head %d, %s",
      name, layers, dense_layers, dense_ffn, hidden, vocab, experts,
      shared_experts, expert_ffn, heads, q_lora_rank, kv_lora_rank,
      qk_nope_head_dim, qk_rope_head_dim, v_head_dim, DTypeName(dtype));
}

std::vector<WeightTensor> ModelWeights(const MoeModelShape& shape,
                                       int first_layer, int num_layers,
                                       bool with_ends) {
  std::vector<WeightTensor> out;
  Builder b(shape, out);
  if (with_ends) b.Add("embed", {shape.vocab, shape.hidden}, Split::kRow);
  const int end = num_layers < 0 ? shape.layers
                                 : std::min(shape.layers,
                                            first_layer + num_layers);
  for (int l = first_layer; l < end; ++l) {
    const std::string at = absl::StrCat("layers.", l, ".");
    const BlockKind block =
        l < shape.dense_layers ? BlockKind::kDense : BlockKind::kMoe;
    b.Attention(at, l, block);
    if (block == BlockKind::kDense) {
      b.Mlp(at + "mlp.", shape.dense_ffn, l, block);
    } else {
      b.Moe(at + "mlp.", l);
    }
  }
  if (with_ends) {
    b.Add("final_norm", {shape.hidden}, Split::kReplicated);
    b.Add("lm_head", {shape.hidden, shape.vocab}, Split::kColumn);
  }
  return out;
}

}  // namespace meshcast::bench
