#include "planner/kinds/moe/moe_lowering.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/ir/plan_building.h"
#include "planner/ir/spec_convert.h"
#include "util/text_safety.h"

namespace meshcast {
namespace {

// A well-mixed 64-bit hash (splitmix64's finalizer): the routing scores.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Seeds of the four random tensors, distinct for every job seed.
uint64_t TensorSeed(uint64_t seed, int which) { return seed * 8 + which; }

class MoeBuilder {
 public:
  MoeBuilder(const MoeShape& shape, const MoeRouting& routing,
             MoeSchedule schedule, int chunks, const std::vector<int>& devices)
      : s_(shape),
        r_(routing),
        baseline_(schedule == MoeSchedule::kBaseline),
        s2_(schedule == MoeSchedule::kS2),
        devices_(devices),
        n_(shape.mp),
        ep_(shape.ep),
        world_(shape.mp * shape.ep),
        el_(shape.local_experts()),
        b_(shape.tokens),
        m_(shape.hidden),
        hs_(shape.ffn / shape.mp),
        c_(routing.capacity),
        j_(baseline_ ? 1 : shape.mp),
        ctot_(baseline_ ? shape.mp * routing.capacity : routing.capacity) {
    chunks_ = s2_ ? static_cast<int>(std::clamp<int64_t>(chunks, 1, c_)) : 1;
    plan_.set_kind("moe");
    plan_.set_strategy(MoeScheduleName(schedule));
    BuildSlotOwners();
  }

  v1::Plan Build() {
    AddWeights();
    for (int d = 0; d < world_; ++d) AddGate(d);
    if (s2_) {
      for (int g = 0; g < ep_; ++g) AddGateWeightsGather(g);
    }
    for (int g = 0; g < ep_; ++g) AddGroupTensors(g);
    int prev = -1;
    for (int q = 0; q < chunks_; ++q) prev = AddDispatch(q, prev);
    for (int d = 0; d < world_; ++d) AddExperts(d);
    for (int g = 0; g < ep_; ++g) AddEspReduce(g);
    prev = -1;
    for (int q = 0; q < chunks_; ++q) prev = AddCombineExchange(q, prev);
    for (int d = 0; d < world_; ++d) AddCombine(d);
    if (!baseline_ && !s2_) {
      for (int g = 0; g < ep_; ++g) AddOutputGather(g);
    }
    return std::move(plan_);
  }

 private:
  // One tensor's buffer on each device (-1: none).
  using PerDevice = std::vector<int>;

  int G(int d) const { return d / n_; }
  int J(int d) const { return d % n_; }
  int64_t Size() const { return DTypeSize(s_.dtype); }
  int64_t Cq(int q) const { return ChunkEnd(q) - ChunkBegin(q); }
  int64_t ChunkBegin(int q) const { return c_ * q / chunks_; }
  int64_t ChunkEnd(int q) const { return c_ * (q + 1) / chunks_; }
  // Slots per (sender, expert) in piece q's all-to-all blocks.
  int64_t BlockSlots(int q) const { return baseline_ ? ctot_ : Cq(q); }
  int64_t BlockElements(int q) const { return el_ * BlockSlots(q) * m_; }
  // Token rows the device gates (and, for s1, combines).
  std::pair<int64_t, int64_t> GateRows(int d) const {
    const int64_t first = G(d) * b_;
    if (baseline_) return {first, first + b_};
    return {first + J(d) * s_.slice(), first + (J(d) + 1) * s_.slice()};
  }

  // owner_[(slice * E + e) * C + c]: the global token in slot c of (slice,
  // e), or -1.
  void BuildSlotOwners() {
    const int64_t slices = int64_t{world_};
    owner_.assign(slices * s_.experts * c_, -1);
    const int k = s_.top_k;
    for (int64_t t = 0; t < s_.total_tokens(); ++t) {
      for (int i = 0; i < k; ++i) {
        const int64_t slot = r_.slot[t * k + i];
        if (slot < 0) continue;
        const int64_t slice = t / s_.slice();
        owner_[(slice * s_.experts + r_.expert[t * k + i]) * c_ + slot] = t;
      }
    }
  }

  v1::Step& AddStep(v1::Step::Op op, int stage, std::vector<int> deps) {
    v1::Step& step = *plan_.add_steps();
    step.set_id(plan_.steps_size() - 1);
    step.set_op(op);
    step.set_stage(stage);
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    for (int dep : deps) step.add_deps(dep);
    return step;
  }

  v1::Step& AddCompute(int d, int stage, std::vector<int> deps, double flops) {
    v1::Step& step = AddStep(v1::Step::OP_COMPUTE, stage, std::move(deps));
    step.set_device(devices_[d]);
    step.set_flops(flops);
    return step;
  }

  int Group(std::vector<int> devices) {
    v1::CommGroup& group = *plan_.add_groups();
    group.set_id(plan_.groups_size() - 1);
    for (int d : devices) group.add_devices(devices_[d]);
    return group.id();
  }
  int WorldGroup() {
    if (world_group_ < 0) {
      std::vector<int> all(world_);
      for (int d = 0; d < world_; ++d) all[d] = d;
      world_group_ = Group(all);
    }
    return world_group_;
  }
  int MpGroup(int g) {
    if (mp_groups_.empty()) mp_groups_.assign(ep_, -1);
    if (mp_groups_[g] < 0) {
      std::vector<int> members;
      for (int j = 0; j < n_; ++j) members.push_back(g * n_ + j);
      mp_groups_[g] = Group(members);
    }
    return mp_groups_[g];
  }

  int Buffer(int tensor, int d, const Box& box, v1::Buffer::Role role) {
    const int id = AddPlanBuffer(plan_, tensor, devices_[d], box, role);
    boxes_.push_back(box);
    return id;
  }
  static void Operand(v1::Operand* operand, int buffer, const Box& slice = {}) {
    operand->set_buffer(buffer);
    if (!slice.empty()) BoxToProto(slice, operand->mutable_slice());
  }
  static int64_t Elements(const Box& box) { return NumElements(box); }

  void SetGemm(v1::Step& step, int64_t m, int64_t n, int64_t k, double alpha) {
    v1::GemmAttrs& g = *step.mutable_compute()->mutable_gemm();
    g.set_m(m);
    g.set_n(n);
    g.set_k(k);
    g.set_alpha(alpha);
  }
  static v1::GatherAttrs& SetGather(v1::Step& step, int64_t row, int k) {
    v1::GatherAttrs& g = *step.mutable_compute()->mutable_gather();
    g.set_row(row);
    g.set_k(k);
    return g;
  }

  void AddWeights() {
    const int64_t t = s_.total_tokens(), e = s_.experts, h = s_.ffn;
    x_ = AddPlanTensor(plan_, {t, m_}, s_.dtype, v1::Initializer::KIND_RANDOM,
                       TensorSeed(s_.seed, 1));
    wg_ = AddPlanTensor(plan_, {m_, e}, s_.dtype, v1::Initializer::KIND_RANDOM,
                        TensorSeed(s_.seed, 2));
    w1_ = AddPlanTensor(plan_, {e, m_, h}, s_.dtype,
                        v1::Initializer::KIND_RANDOM, TensorSeed(s_.seed, 3));
    w2_ = AddPlanTensor(plan_, {e, h, m_}, s_.dtype,
                        v1::Initializer::KIND_RANDOM, TensorSeed(s_.seed, 4));
    logits_ =
        AddPlanTensor(plan_, {t, e}, s_.dtype, v1::Initializer::KIND_ZEROS);
    chosen_ = AddPlanTensor(plan_, {t, s_.top_k}, s_.dtype,
                            v1::Initializer::KIND_ZEROS);
    weights_ = AddPlanTensor(plan_, {t, s_.top_k}, s_.dtype,
                             v1::Initializer::KIND_ZEROS);
    y_ = AddPlanTensor(plan_, {t, m_}, s_.dtype, v1::Initializer::KIND_ZEROS);
    xb_.resize(world_);
    wgb_.resize(world_);
    w1b_.resize(world_);
    w2b_.resize(world_);
    yb_.resize(world_);
    for (int d = 0; d < world_; ++d) {
      const int64_t g = G(d), j = J(d);
      const Box group_rows = {{g * b_, (g + 1) * b_}, {0, m_}};
      xb_[d] = Buffer(x_, d, group_rows, v1::Buffer::ROLE_SOURCE);
      wgb_[d] = Buffer(wg_, d, {{0, m_}, {0, e}}, v1::Buffer::ROLE_SOURCE);
      const Interval experts{g * el_, (g + 1) * el_};
      const Interval shard{j * hs_, (j + 1) * hs_};
      w1b_[d] =
          Buffer(w1_, d, {experts, {0, m_}, shard}, v1::Buffer::ROLE_SOURCE);
      w2b_[d] =
          Buffer(w2_, d, {experts, shard, {0, m_}}, v1::Buffer::ROLE_SOURCE);
      yb_[d] = Buffer(y_, d, group_rows, v1::Buffer::ROLE_DESTINATION);
    }
  }

  // Gate GEMM, the logits of the chosen experts, their sigmoid.
  void AddGate(int d) {
    const auto [first, last] = GateRows(d);
    const int64_t rows = last - first, e = s_.experts;
    const int k = s_.top_k;
    const int lb =
        Buffer(logits_, d, {{first, last}, {0, e}}, v1::Buffer::ROLE_SCRATCH);
    const int cb =
        Buffer(chosen_, d, {{first, last}, {0, k}}, v1::Buffer::ROLE_SCRATCH);
    // s2 gathers every slice's weights into every device of the group.
    const int64_t g = G(d);
    const Box weight_box =
        s2_ ? Box{{g * b_, (g + 1) * b_}, {0, k}} : Box{{first, last}, {0, k}};
    const int wb = Buffer(weights_, d, weight_box, v1::Buffer::ROLE_SCRATCH);
    weight_buffers_.push_back(wb);

    v1::Step& gemm =
        AddCompute(d, kPhaseGate, {}, 2.0 * rows * e * static_cast<double>(m_));
    Operand(gemm.add_inputs(), xb_[d], {{first, last}, {0, m_}});
    Operand(gemm.add_inputs(), wgb_[d]);
    Operand(gemm.add_outputs(), lb);
    SetGemm(gemm, rows, e, m_, 1.0 / std::sqrt(static_cast<double>(m_)));
    gate_step_.push_back(gemm.id());

    v1::Step& pick = AddCompute(d, kPhaseGate, {gemm.id()}, 0);
    Operand(pick.add_inputs(), lb);
    Operand(pick.add_outputs(), cb);
    v1::GatherAttrs& attrs = SetGather(pick, 1, 1);
    for (int64_t t = first; t < last; ++t) {
      for (int i = 0; i < k; ++i) {
        attrs.add_index((t - first) * e + r_.expert[t * k + i]);
      }
    }
    v1::Step& sigmoid = AddCompute(d, kPhaseGate, {pick.id()}, 4.0 * rows * k);
    Operand(sigmoid.add_inputs(), cb);
    Operand(sigmoid.add_outputs(), wb, {{first, last}, {0, k}});
    sigmoid.mutable_compute()->mutable_elementwise()->set_kind(
        v1::ElementwiseAttrs::KIND_SIGMOID);
    weight_step_.push_back(sigmoid.id());
  }

  // s2: every device of group g gets the weights of all B tokens.
  void AddGateWeightsGather(int g) {
    std::vector<int> deps;
    for (int j = 0; j < n_; ++j) deps.push_back(weight_step_[g * n_ + j]);
    v1::Step& step = AddStep(v1::Step::OP_ALL_GATHER, kPhaseGate, deps);
    step.set_group(MpGroup(g));
    for (int j = 0; j < n_; ++j) {
      const int d = g * n_ + j;
      const auto [first, last] = GateRows(d);
      Operand(step.add_inputs(), weight_buffers_[d],
              {{first, last}, {0, s_.top_k}});
      Operand(step.add_outputs(), weight_buffers_[d]);
    }
    step.set_bytes(b_ * s_.top_k * Size());
    weights_gathered_.push_back(step.id());
  }

  // The expert input, hidden, partial-output and output tensors of group g
  // (see the header), one buffer per device.
  void AddGroupTensors(int g) {
    const int64_t e = el_;
    const int xe = AddPlanTensor(plan_, {j_, ep_, e, ctot_, m_}, s_.dtype,
                                 v1::Initializer::KIND_ZEROS);
    const int h1 = AddPlanTensor(plan_, {n_, e, j_, ep_, ctot_, hs_}, s_.dtype,
                                 v1::Initializer::KIND_ZEROS);
    const int p = AddPlanTensor(plan_, {n_, j_, ep_, e, ctot_, m_}, s_.dtype,
                                v1::Initializer::KIND_ZEROS);
    const int ye = AddPlanTensor(plan_, {j_, ep_, e, ctot_, m_}, s_.dtype,
                                 v1::Initializer::KIND_ZEROS);
    for (int j = 0; j < n_; ++j) {
      const int d = g * n_ + j;
      xe_.resize(world_);
      h1_.resize(world_);
      p_.resize(world_);
      ye_.resize(world_);
      xe_[d] = Buffer(xe, d, {{0, j_}, {0, ep_}, {0, e}, {0, ctot_}, {0, m_}},
                      v1::Buffer::ROLE_SCRATCH);
      h1_[d] = Buffer(
          h1, d, {{j, j + 1}, {0, e}, {0, j_}, {0, ep_}, {0, ctot_}, {0, hs_}},
          v1::Buffer::ROLE_SCRATCH);
      p_[d] = Buffer(
          p, d, {{j, j + 1}, {0, j_}, {0, ep_}, {0, e}, {0, ctot_}, {0, m_}},
          v1::Buffer::ROLE_SCRATCH);
      // s1/s2: the reduce-scatter leaves chunk j (the rows EP group j
      // sent); the baseline's all-reduce leaves everything everywhere.
      const Interval mine = baseline_ ? Interval{0, 1} : Interval{j, j + 1};
      ye_[d] = Buffer(ye, d, {mine, {0, ep_}, {0, e}, {0, ctot_}, {0, m_}},
                      v1::Buffer::ROLE_SCRATCH);
    }
  }

  // A 1-D all-to-all tensor of piece q: rank r's region is [r, r+1) times
  // ep blocks. Returns the region of rank r.
  Box Region(int q, int r, int ranks = 1) const {
    const int64_t per = ep_ * BlockElements(q);
    return {{r * per, (r + ranks) * per}};
  }
  int AllToAllTensor(int q) {
    return AddPlanTensor(plan_, {world_ * ep_ * BlockElements(q)}, s_.dtype,
                         v1::Initializer::KIND_ZEROS);
  }
  v1::Step& AddAllToAll(int q, int stage, std::vector<int> deps,
                        const PerDevice& in, const PerDevice& out) {
    v1::Step& step = AddStep(v1::Step::OP_ALL_TO_ALL, stage, std::move(deps));
    step.set_group(WorldGroup());
    for (int r = 0; r < world_; ++r) {
      Operand(step.add_inputs(), in[r]);
      Operand(step.add_outputs(), out[r]);
    }
    for (int from = 0; from < world_; ++from) {
      for (int to = 0; to < world_; ++to) {
        step.add_counts(J(from) == J(to) ? BlockElements(q) : 0);
      }
    }
    step.set_bytes(ep_ * BlockElements(q) * Size());
    return step;
  }
  // An all-gather in MP group g: each device's `own(d)` slice of its buffer
  // into the whole buffer of every device.
  template <typename Own>
  v1::Step& AddMpGather(int g, int stage, std::vector<int> deps,
                        const PerDevice& buffers, Own own, int64_t bytes) {
    v1::Step& step = AddStep(v1::Step::OP_ALL_GATHER, stage, std::move(deps));
    step.set_group(MpGroup(g));
    for (int j = 0; j < n_; ++j) {
      const int d = g * n_ + j;
      Operand(step.add_inputs(), buffers[d], own(d));
      Operand(step.add_outputs(), buffers[d]);
    }
    step.set_bytes(bytes);
    return step;
  }
  // Copies the rows of `from` (row-major over its box) into `to` in the same
  // order: a layout change between a 1-D all-to-all tensor and a
  // multi-dimensional one.
  v1::Step& AddRowCopy(int d, int stage, std::vector<int> deps, int from,
                       const Box& from_box, int to, const Box& to_box) {
    v1::Step& step = AddCompute(d, stage, std::move(deps), 0);
    Operand(step.add_inputs(), from, from_box);
    Operand(step.add_outputs(), to, to_box);
    v1::GatherAttrs& attrs = SetGather(step, m_, 1);
    const int64_t rows = Elements(to_box.empty() ? boxes_[to] : to_box) / m_;
    for (int64_t i = 0; i < rows; ++i) attrs.add_index(i);
    return step;
  }
  Box SlotsOfPiece(int q, const Box& whole) const {
    Box box = whole;
    if (!baseline_) box[3] = {ChunkBegin(q), ChunkEnd(q)};
    return box;
  }

  // Order into slots, all-to-all (after the previous piece's), then (s1,
  // s2) the ESP all-gather and the expert-input layout. Returns the
  // all-to-all's id.
  int AddDispatch(int q, int prev) {
    const int in = AllToAllTensor(q), out = AllToAllTensor(q);
    PerDevice in_b(world_), out_b(world_);
    std::vector<int> orders;
    if (prev >= 0) orders.push_back(prev);
    for (int d = 0; d < world_; ++d) {
      in_b[d] = Buffer(in, d, Region(q, d), v1::Buffer::ROLE_SCRATCH);
      const Box received = baseline_ ? Region(q, d) : Region(q, G(d) * n_, n_);
      out_b[d] = Buffer(out, d, received, v1::Buffer::ROLE_SCRATCH);
      orders.push_back(AddOrder(d, q, in_b[d]));
    }
    const int exchange =
        AddAllToAll(q, kPhaseDispatch, orders, in_b, out_b).id();
    for (int g = 0; g < ep_; ++g) {
      int ready = exchange;
      if (!baseline_) {
        ready = AddMpGather(
                    g, kPhaseEspGather, {exchange}, out_b,
                    [&](int d) { return Region(q, d); },
                    n_ * ep_ * BlockElements(q) * Size())
                    .id();
      }
      for (int j = 0; j < n_; ++j) {
        const int d = g * n_ + j;
        const Box whole = boxes_[xe_[d]];
        layout_steps_.resize(world_);
        layout_steps_[d].push_back(AddRowCopy(d, kPhaseEspGather, {ready},
                                              out_b[d], {}, xe_[d],
                                              SlotsOfPiece(q, whole))
                                       .id());
      }
    }
    return exchange;
  }

  // Device d's order step for piece q: its tokens into its region of the
  // dispatch tensor, blocks (receiver g', expert x, slot).
  int AddOrder(int d, int q, int in_buffer) {
    const auto [first, last] = GateRows(d);
    v1::Step& step = AddCompute(d, kPhaseDispatch, {gate_step_[d]}, 0);
    Operand(step.add_inputs(), xb_[d], {{first, last}, {0, m_}});
    Operand(step.add_outputs(), in_buffer);
    v1::GatherAttrs& attrs = SetGather(step, m_, 1);
    const int64_t g = G(d);
    for (int64_t e = 0; e < s_.experts; ++e) {
      for (int64_t c = 0; c < BlockSlots(q); ++c) {
        int64_t slice = g * n_ + J(d), slot = ChunkBegin(q) + c;
        if (baseline_) slice = g * n_ + c / c_, slot = c % c_;
        const int64_t t = owner_[(slice * s_.experts + e) * c_ + slot];
        attrs.add_index(t < 0 ? -1 : t - first);
      }
    }
    return step.id();
  }

  void AddExperts(int d) {
    const int g = G(d), j = J(d);
    const int64_t rows = j_ * ep_ * ctot_;
    const Box xe_box = boxes_[xe_[d]];
    std::vector<int> deps = layout_steps_[d];
    for (int x = 0; x < el_; ++x) {
      const int64_t e = int64_t{g} * el_ + x;
      Box a = xe_box;
      a[2] = {x, x + 1};
      Box h = boxes_[h1_[d]];
      h[1] = {x, x + 1};
      Box out = boxes_[p_[d]];
      out[3] = {x, x + 1};
      const double flops = 2.0 * rows * m_ * static_cast<double>(hs_);
      v1::Step& fc1 = AddCompute(d, kPhaseExperts, deps, flops);
      Operand(fc1.add_inputs(), xe_[d], a);
      Operand(fc1.add_inputs(), w1b_[d],
              {{e, e + 1}, {0, m_}, {j * hs_, (j + 1) * hs_}});
      Operand(fc1.add_outputs(), h1_[d], h);
      SetGemm(fc1, rows, hs_, m_, 1.0 / std::sqrt(static_cast<double>(m_)));
      v1::Step& relu = AddCompute(d, kPhaseExperts, {fc1.id()},
                                  static_cast<double>(rows) * hs_);
      Operand(relu.add_inputs(), h1_[d], h);
      Operand(relu.add_outputs(), h1_[d], h);
      relu.mutable_compute()->mutable_elementwise()->set_kind(
          v1::ElementwiseAttrs::KIND_RELU);
      v1::Step& fc2 = AddCompute(d, kPhaseExperts, {relu.id()}, flops);
      Operand(fc2.add_inputs(), h1_[d], h);
      Operand(fc2.add_inputs(), w2b_[d],
              {{e, e + 1}, {j * hs_, (j + 1) * hs_}, {0, m_}});
      Operand(fc2.add_outputs(), p_[d], out);
      SetGemm(fc2, rows, m_, hs_, 1.0 / std::sqrt(static_cast<double>(s_.ffn)));
      expert_steps_.resize(world_);
      expert_steps_[d].push_back(fc2.id());
    }
  }

  void AddEspReduce(int g) {
    std::vector<int> deps;
    for (int j = 0; j < n_; ++j) {
      const auto& fc2 = expert_steps_[g * n_ + j];
      deps.insert(deps.end(), fc2.begin(), fc2.end());
    }
    v1::Step& step = AddStep(
        baseline_ ? v1::Step::OP_ALL_REDUCE : v1::Step::OP_REDUCE_SCATTER,
        kPhaseEspReduce, deps);
    step.set_group(MpGroup(g));
    for (int j = 0; j < n_; ++j) {
      Operand(step.add_inputs(), p_[g * n_ + j]);
      Operand(step.add_outputs(), ye_[g * n_ + j]);
    }
    const int64_t whole = j_ * ep_ * el_ * ctot_ * m_ * Size();
    step.set_bytes(whole);
    reduce_steps_.push_back(step.id());
  }

  // The expert outputs of piece q back to their senders: layout into the
  // 1-D tensor, all-to-all, and for s2 the MP all-gather and the layout
  // into CALL. Returns the all-to-all's id.
  int AddCombineExchange(int q, int prev) {
    const int in = AllToAllTensor(q), out = AllToAllTensor(q);
    PerDevice in_b(world_), out_b(world_);
    std::vector<int> deps;
    if (prev >= 0) deps.push_back(prev);
    for (int d = 0; d < world_; ++d) {
      in_b[d] = Buffer(in, d, Region(q, d), v1::Buffer::ROLE_SCRATCH);
      const Box received = s2_ ? Region(q, G(d) * n_, n_) : Region(q, d);
      out_b[d] = Buffer(out, d, received, v1::Buffer::ROLE_SCRATCH);
      deps.push_back(AddRowCopy(d, kPhaseCombine, {reduce_steps_[G(d)]}, ye_[d],
                                SlotsOfPiece(q, boxes_[ye_[d]]), in_b[d], {})
                         .id());
    }
    const int exchange = AddAllToAll(q, kPhaseCombine, deps, in_b, out_b).id();
    combine_inputs_.resize(world_);
    if (!s2_) {
      for (int d = 0; d < world_; ++d) {
        combine_inputs_[d] = {out_b[d], {exchange}};
      }
      return exchange;
    }
    for (int g = 0; g < ep_; ++g) {
      if (call_.empty()) call_.assign(world_, -1);
      if (call_[g * n_] < 0) {
        const int t = AddPlanTensor(plan_, {n_, ep_, el_, c_, m_}, s_.dtype,
                                    v1::Initializer::KIND_ZEROS);
        for (int j = 0; j < n_; ++j) {
          call_[g * n_ + j] = Buffer(
              t, g * n_ + j, {{0, n_}, {0, ep_}, {0, el_}, {0, c_}, {0, m_}},
              v1::Buffer::ROLE_SCRATCH);
        }
      }
      const int gathered = AddMpGather(
                               g, kPhaseCombine, {exchange}, out_b,
                               [&](int d) { return Region(q, d); },
                               n_ * ep_ * BlockElements(q) * Size())
                               .id();
      for (int j = 0; j < n_; ++j) {
        const int d = g * n_ + j;
        Box slots = boxes_[call_[d]];
        slots[3] = {ChunkBegin(q), ChunkEnd(q)};
        combine_inputs_[d].second.push_back(AddRowCopy(d, kPhaseCombine,
                                                       {gathered}, out_b[d], {},
                                                       call_[d], slots)
                                                .id());
        combine_inputs_[d].first = call_[d];
      }
    }
    return exchange;
  }

  // The weighted combine: Y rows of the device's tokens from the expert
  // outputs it holds (baseline, s1: what came back to it; s2: CALL).
  void AddCombine(int d) {
    const int64_t g = G(d);
    const bool all_rows = baseline_ || s2_;
    const auto gate_rows = GateRows(d);
    const int64_t first = all_rows ? g * b_ : gate_rows.first;
    const int64_t last = all_rows ? (g + 1) * b_ : gate_rows.second;
    const int k = s_.top_k;
    std::vector<int> deps = combine_inputs_[d].second;
    deps.push_back(s2_ ? weights_gathered_[g] : weight_step_[d]);
    v1::Step& step =
        AddCompute(d, kPhaseCombine, deps, 2.0 * (last - first) * k * m_);
    Operand(step.add_inputs(), combine_inputs_[d].first);
    Operand(step.add_inputs(), weight_buffers_[d], {{first, last}, {0, k}});
    Operand(step.add_outputs(), yb_[d], {{first, last}, {0, m_}});
    v1::GatherAttrs& attrs = SetGather(step, m_, k);
    for (int64_t t = first; t < last; ++t) {
      const int64_t jj = (t - g * b_) / s_.slice();  // slice in the group
      for (int i = 0; i < k; ++i) {
        const int64_t slot = r_.slot[t * k + i];
        const int64_t e = r_.expert[t * k + i];
        int64_t row = -1;
        if (slot >= 0) {
          if (baseline_) {
            row = e * ctot_ + jj * c_ + slot;  // [g'][x][j''][c]
          } else if (s2_) {
            row = (jj * s_.experts + e) * c_ + slot;  // [j''][g'][x][c]
          } else {
            row = e * c_ + slot;  // [g'][x][c]
          }
        }
        attrs.add_index(row);
      }
    }
    combine_steps_.resize(world_);
    combine_steps_[d] = step.id();
  }

  // s1: the MP all-gather of Y's slices.
  void AddOutputGather(int g) {
    std::vector<int> deps;
    for (int j = 0; j < n_; ++j) deps.push_back(combine_steps_[g * n_ + j]);
    AddMpGather(
        g, kPhaseCombine, deps, yb_,
        [&](int d) {
          const auto [first, last] = GateRows(d);
          return Box{{first, last}, {0, m_}};
        },
        b_ * m_ * Size());
  }

  const MoeShape& s_;
  const MoeRouting& r_;
  const bool baseline_, s2_;
  const std::vector<int>& devices_;
  const int n_, ep_, world_, el_;
  const int64_t b_, m_, hs_, c_, j_, ctot_;
  int chunks_ = 1;
  v1::Plan plan_;
  std::vector<Box> boxes_;  // by buffer id
  std::vector<int64_t> owner_;
  int world_group_ = -1;
  std::vector<int> mp_groups_;
  int x_ = 0, wg_ = 0, w1_ = 0, w2_ = 0, logits_ = 0, chosen_ = 0, weights_ = 0,
      y_ = 0;
  PerDevice xb_, wgb_, w1b_, w2b_, yb_, xe_, h1_, p_, ye_, call_;
  std::vector<int> weight_buffers_, gate_step_, weight_step_, weights_gathered_,
      reduce_steps_, combine_steps_;
  std::vector<std::vector<int>> layout_steps_, expert_steps_;
  // Per device: the buffer its combine reads and the steps that fill it.
  std::vector<std::pair<int, std::vector<int>>> combine_inputs_;
};

}  // namespace

int64_t MoeShape::capacity() const {
  const double slots = std::ceil(capacity_factor * top_k *
                                 static_cast<double>(slice()) / experts);
  return std::max<int64_t>(1, static_cast<int64_t>(slots));
}

std::string MoeScheduleName(MoeSchedule schedule) {
  switch (schedule) {
    case MoeSchedule::kBaseline:
      return "baseline";
    case MoeSchedule::kS1:
      return "s1";
    case MoeSchedule::kS2:
      return "s2";
    case MoeSchedule::kAuto:
      break;
  }
  return "auto";
}

absl::StatusOr<MoeSchedule> MoeScheduleFromName(absl::string_view name) {
  if (name.empty() || name == "auto") return MoeSchedule::kAuto;
  if (name == "baseline") return MoeSchedule::kBaseline;
  if (name == "s1") return MoeSchedule::kS1;
  if (name == "s2") return MoeSchedule::kS2;
  return absl::InvalidArgumentError(
      absl::StrCat("moe.schedule ", QuotePrefix(name),
                   " is not one of baseline, s1, s2, auto"));
}

const char* MoePhaseName(int phase) {
  static const char* const kNames[kMoePhases] = {
      "gate", "dispatch", "esp_gather", "experts", "esp_reduce", "combine"};
  return phase >= 0 && phase < kMoePhases ? kNames[phase] : "unknown";
}

MoeRouting RouteTokens(const MoeShape& shape) {
  MoeRouting routing;
  routing.capacity = shape.capacity();
  const int k = shape.top_k, e_count = shape.experts;
  const int64_t tokens = shape.total_tokens();
  routing.expert.resize(tokens * k);
  routing.slot.assign(tokens * k, -1);
  routing.load.assign(e_count, 0);
  // Weighted sampling of k distinct experts: the k largest log(u) / w_e.
  std::vector<double> weight(e_count);
  for (int e = 0; e < e_count; ++e) {
    weight[e] = std::pow(e + 1.0, -shape.expert_skew);
  }
  std::vector<std::pair<double, int>> scores(e_count);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int e = 0; e < e_count; ++e) {
      const uint64_t key = Mix(shape.seed * 0x100000001b3ULL ^
                               Mix(static_cast<uint64_t>(t) * e_count + e));
      // u in (0, 1): the top 53 bits, offset by half a step.
      const double u = (static_cast<double>(key >> 11) + 0.5) * 0x1.0p-53;
      scores[e] = {std::log(u) / weight[e], e};
    }
    std::partial_sort(scores.begin(), scores.begin() + k, scores.end(),
                      [](const auto& a, const auto& b) {
                        return a.first > b.first ||
                               (a.first == b.first && a.second < b.second);
                      });
    for (int i = 0; i < k; ++i) {
      routing.expert[t * k + i] = scores[i].second;
      ++routing.load[scores[i].second];
    }
  }
  // Slots: every first choice in token order, then every second, ...
  const int64_t slices = tokens / shape.slice();
  std::vector<int64_t> filled(slices * e_count, 0);
  for (int i = 0; i < k; ++i) {
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t bucket =
          (t / shape.slice()) * e_count + routing.expert[t * k + i];
      if (filled[bucket] < routing.capacity) {
        routing.slot[t * k + i] = filled[bucket]++;
      } else {
        ++routing.dropped;
      }
    }
  }
  return routing;
}

absl::StatusOr<v1::Plan> LowerMoe(const MoeShape& shape,
                                  const MoeRouting& routing,
                                  MoeSchedule schedule, int chunks,
                                  const std::vector<int>& devices) {
  if (schedule == MoeSchedule::kAuto) {
    return absl::InvalidArgumentError(
        "LowerMoe needs a schedule: baseline, s1 or s2 (auto is chosen by "
        "the kind)");
  }
  if (shape.mp < 1 || shape.ep < 1 || shape.experts % shape.ep != 0 ||
      shape.tokens % shape.mp != 0 || shape.ffn % shape.mp != 0 ||
      shape.top_k < 1 || shape.top_k > shape.experts) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe shape does not fit: tokens ", shape.tokens, ", ffn ",
                     shape.ffn, ", experts ", shape.experts, ", top_k ",
                     shape.top_k, " over mp ", shape.mp, " x ep ", shape.ep));
  }
  if (static_cast<int64_t>(devices.size()) != int64_t{shape.mp} * shape.ep) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe needs ", shape.mp * shape.ep, " devices (ep ",
                     shape.ep, " x mp ", shape.mp, "), got ", devices.size()));
  }
  if (static_cast<int64_t>(routing.expert.size()) !=
      shape.total_tokens() * shape.top_k) {
    return absl::InvalidArgumentError("moe routing is not of this shape");
  }
  return MoeBuilder(shape, routing, schedule, chunks, devices).Build();
}

}  // namespace meshcast
