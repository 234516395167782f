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
        backward_(shape.backward),
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
    for (int q = 0; q < chunks_; ++q) {
      prev = AddDispatch(
          q, prev, kPhaseDispatch, kPhaseEspGather,
          [&](int d, int in) { return AddOrder(d, q, in); }, xe_,
          layout_steps_);
    }
    for (int d = 0; d < world_; ++d) AddExperts(d);
    for (int g = 0; g < ep_; ++g) {
      reduce_steps_.push_back(
          AddEspReduce(g, kPhaseEspReduce, expert_steps_, p_, ye_));
    }
    prev = -1;
    for (int q = 0; q < chunks_; ++q) {
      prev = AddCombineExchange(q, prev, kPhaseCombine, ye_, reduce_steps_,
                                call_, combine_inputs_);
    }
    done_.resize(world_);
    for (int d = 0; d < world_; ++d) {
      combine_steps_.push_back(
          AddChoiceGather(d, kPhaseCombine, combine_inputs_[d],
                          weight_buffers_[d],
                          s2_ ? weights_gathered_[G(d)] : weight_step_[d], yb_[d]));
      done_[d] = combine_steps_[d];
    }
    if (!baseline_ && !s2_) {
      for (int g = 0; g < ep_; ++g) {
        const int gather =
            AddOutputGather(g, kPhaseCombine, combine_steps_, yb_);
        for (int j = 0; j < n_; ++j) done_[g * n_ + j] = gather;
      }
    }
    if (backward_) BuildBackward();
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
    if (backward_) AddGradients();
  }

  // The backward's inputs and outputs: dY, dX, dWg, dW1, dW2 (tensors 8 to
  // 12, buffers laid out as Y, Y, Wg, W1, W2) and its per-choice scratch.
  void AddGradients() {
    const int64_t t = s_.total_tokens(), e = s_.experts, h = s_.ffn;
    const auto zeros = v1::Initializer::KIND_ZEROS;
    dy_ = AddPlanTensor(plan_, {t, m_}, s_.dtype, v1::Initializer::KIND_RANDOM,
                        TensorSeed(s_.seed, 5));
    dx_ = AddPlanTensor(plan_, {t, m_}, s_.dtype, zeros);
    dwg_ = AddPlanTensor(plan_, {m_, e}, s_.dtype, zeros);
    dw1_ = AddPlanTensor(plan_, {e, m_, h}, s_.dtype, zeros);
    dw2_ = AddPlanTensor(plan_, {e, h, m_}, s_.dtype, zeros);
    dw_choice_ = AddPlanTensor(plan_, {t, s_.top_k}, s_.dtype, zeros);
    dl_choice_ = AddPlanTensor(plan_, {t, s_.top_k}, s_.dtype, zeros);
    dl_ = AddPlanTensor(plan_, {t, e}, s_.dtype, zeros);
    dwgp_ = AddPlanTensor(plan_, {baseline_ ? ep_ : world_, m_, e}, s_.dtype,
                          zeros);
    for (PerDevice* b : {&dyb_, &dxb_, &dwgb_, &dw1b_, &dw2b_, &dlb_, &dwgpb_}) {
      b->resize(world_);
    }
    dl_step_.resize(world_);
    dwg_step_.resize(world_);
    const auto dest = v1::Buffer::ROLE_DESTINATION;
    for (int d = 0; d < world_; ++d) {
      const Box& rows = boxes_[yb_[d]];
      dyb_[d] = Buffer(dy_, d, rows, v1::Buffer::ROLE_SOURCE);
      dxb_[d] = Buffer(dx_, d, rows, dest);
      dwgb_[d] = Buffer(dwg_, d, boxes_[wgb_[d]], dest);
      dw1b_[d] = Buffer(dw1_, d, boxes_[w1b_[d]], dest);
      dw2b_[d] = Buffer(dw2_, d, boxes_[w2b_[d]], dest);
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
      // The backward's ReLU mask needs the pre-activations: the ReLU then
      // writes a tensor of its own (in place otherwise).
      a1_.resize(world_);
      a1_[d] = h1_[d];
      if (backward_) {
        if (d == g * n_) {
          a1_tensor_ = AddPlanTensor(plan_, {n_, e, j_, ep_, ctot_, hs_},
                                     s_.dtype, v1::Initializer::KIND_ZEROS);
        }
        a1_[d] = Buffer(a1_tensor_, d, boxes_[h1_[d]],
                        v1::Buffer::ROLE_SCRATCH);
      }
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

  // Order into slots (`order(d, in_buffer)` fills device d's region of the
  // all-to-all input and returns its step), the all-to-all (after the
  // previous piece's), then (s1, s2) the ESP all-gather and the layout into
  // `target` (the expert-side [J, ep, El, Ctot, M] buffers), whose steps
  // go to `layout_steps`. Returns the all-to-all's id. The forward moves X
  // rows into XE; the backward moves the weighted dY rows into dYE.
  template <typename Order>
  int AddDispatch(int q, int prev, int exchange_stage, int gather_stage,
                  Order order, const PerDevice& target,
                  std::vector<std::vector<int>>& layout_steps) {
    const int in = AllToAllTensor(q), out = AllToAllTensor(q);
    PerDevice in_b(world_), out_b(world_);
    std::vector<int> orders;
    if (prev >= 0) orders.push_back(prev);
    for (int d = 0; d < world_; ++d) {
      in_b[d] = Buffer(in, d, Region(q, d), v1::Buffer::ROLE_SCRATCH);
      const Box received = baseline_ ? Region(q, d) : Region(q, G(d) * n_, n_);
      out_b[d] = Buffer(out, d, received, v1::Buffer::ROLE_SCRATCH);
      orders.push_back(order(d, in_b[d]));
    }
    const int exchange =
        AddAllToAll(q, exchange_stage, orders, in_b, out_b).id();
    layout_steps.resize(world_);
    for (int g = 0; g < ep_; ++g) {
      int ready = exchange;
      if (!baseline_) {
        ready = AddMpGather(
                    g, gather_stage, {exchange}, out_b,
                    [&](int d) { return Region(q, d); },
                    n_ * ep_ * BlockElements(q) * Size())
                    .id();
      }
      for (int j = 0; j < n_; ++j) {
        const int d = g * n_ + j;
        layout_steps[d].push_back(AddRowCopy(d, gather_stage, {ready},
                                             out_b[d], {}, target[d],
                                             SlotsOfPiece(q, boxes_[target[d]]))
                                      .id());
      }
    }
    return exchange;
  }

  // The global token in slot c (of piece q's blocks) of expert e in device
  // d's dispatch region, or -1.
  int64_t SlotOwner(int d, int q, int64_t e, int64_t c) const {
    int64_t slice = G(d) * n_ + J(d), slot = ChunkBegin(q) + c;
    if (baseline_) slice = G(d) * n_ + c / c_, slot = c % c_;
    return owner_[(slice * s_.experts + e) * c_ + slot];
  }

  // Device d's order step for piece q: its tokens into its region of the
  // dispatch tensor, blocks (receiver g', expert x, slot).
  int AddOrder(int d, int q, int in_buffer) {
    const auto [first, last] = GateRows(d);
    v1::Step& step = AddCompute(d, kPhaseDispatch, {gate_step_[d]}, 0);
    Operand(step.add_inputs(), xb_[d], {{first, last}, {0, m_}});
    Operand(step.add_outputs(), in_buffer);
    v1::GatherAttrs& attrs = SetGather(step, m_, 1);
    for (int64_t e = 0; e < s_.experts; ++e) {
      for (int64_t c = 0; c < BlockSlots(q); ++c) {
        const int64_t t = SlotOwner(d, q, e, c);
        attrs.add_index(t < 0 ? -1 : t - first);
      }
    }
    return step.id();
  }

  // The backward's order: dYE rows w(t, i) dY[t] in the dispatch layout.
  // The gate weight of each slot is gathered first (a gather's W is per
  // output row), then the weighted rows of dY.
  int AddGradOrder(int d, int q, int in_buffer) {
    const auto [first, last] = GateRows(d);
    const int k = s_.top_k;
    const int64_t slots = ep_ * el_ * BlockSlots(q);
    const int tensor = AddPlanTensor(plan_, {world_ * slots}, s_.dtype,
                                     v1::Initializer::KIND_ZEROS);
    const int slot_weights =
        Buffer(tensor, d, {{d * slots, (d + 1) * slots}},
               v1::Buffer::ROLE_SCRATCH);
    v1::Step& pick = AddCompute(d, kPhaseCombineBackward, {done_[d]}, 0);
    Operand(pick.add_inputs(), weight_buffers_[d], {{first, last}, {0, k}});
    Operand(pick.add_outputs(), slot_weights);
    v1::GatherAttrs& picked = SetGather(pick, 1, 1);
    std::vector<int64_t> rows;
    for (int64_t e = 0; e < s_.experts; ++e) {
      for (int64_t c = 0; c < BlockSlots(q); ++c) {
        const int64_t t = SlotOwner(d, q, e, c);
        int64_t choice = -1;
        for (int i = 0; t >= 0 && i < k; ++i) {
          if (r_.expert[t * k + i] == e) choice = (t - first) * k + i;
        }
        picked.add_index(choice);
        rows.push_back(t < 0 ? -1 : t - first);
      }
    }
    v1::Step& step = AddCompute(d, kPhaseCombineBackward, {pick.id()},
                                2.0 * slots * static_cast<double>(m_));
    Operand(step.add_inputs(), dyb_[d], {{first, last}, {0, m_}});
    Operand(step.add_inputs(), slot_weights);
    Operand(step.add_outputs(), in_buffer);
    v1::GatherAttrs& attrs = SetGather(step, m_, 1);
    for (int64_t row : rows) attrs.add_index(row);
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
      Operand(relu.add_outputs(), a1_[d], h);
      relu.mutable_compute()->mutable_elementwise()->set_kind(
          v1::ElementwiseAttrs::KIND_RELU);
      v1::Step& fc2 = AddCompute(d, kPhaseExperts, {relu.id()}, flops);
      Operand(fc2.add_inputs(), a1_[d], h);
      Operand(fc2.add_inputs(), w2b_[d],
              {{e, e + 1}, {j * hs_, (j + 1) * hs_}, {0, m_}});
      Operand(fc2.add_outputs(), p_[d], out);
      SetGemm(fc2, rows, m_, hs_, 1.0 / std::sqrt(static_cast<double>(s_.ffn)));
      expert_steps_.resize(world_);
      expert_steps_[d].push_back(fc2.id());
    }
  }

  // The ESP reduction of group g: `in` (the partials [n, J, ep, El, Ctot,
  // M]) reduce-scattered into `out` (all-reduced for the baseline) after
  // every device's `deps`. Returns its id.
  int AddEspReduce(int g, int stage,
                   const std::vector<std::vector<int>>& deps_per_device,
                   const PerDevice& in, const PerDevice& out) {
    std::vector<int> deps;
    for (int j = 0; j < n_; ++j) {
      const auto& ready = deps_per_device[g * n_ + j];
      deps.insert(deps.end(), ready.begin(), ready.end());
    }
    v1::Step& step = AddStep(
        baseline_ ? v1::Step::OP_ALL_REDUCE : v1::Step::OP_REDUCE_SCATTER,
        stage, deps);
    step.set_group(MpGroup(g));
    for (int j = 0; j < n_; ++j) {
      Operand(step.add_inputs(), in[g * n_ + j]);
      Operand(step.add_outputs(), out[g * n_ + j]);
    }
    const int64_t whole = j_ * ep_ * el_ * ctot_ * m_ * Size();
    step.set_bytes(whole);
    return step.id();
  }

  // Rows of piece q of the expert-side `source` ([J, ep, El, Ctot, M], the
  // device's chunk) back to the devices that sent them: layout into the
  // 1-D tensor (after `ready[g]`), all-to-all, and for s2 the MP all-gather
  // and the layout into `call` ([n, ep, El, C, M], created on first use).
  // `inputs[d]` gets the buffer device d's combine reads and the steps
  // that fill it. Returns the all-to-all's id.
  int AddCombineExchange(int q, int prev, int stage, const PerDevice& source,
                         const std::vector<int>& ready, PerDevice& call,
                         std::vector<std::pair<int, std::vector<int>>>& inputs) {
    const int in = AllToAllTensor(q), out = AllToAllTensor(q);
    PerDevice in_b(world_), out_b(world_);
    std::vector<int> deps;
    if (prev >= 0) deps.push_back(prev);
    for (int d = 0; d < world_; ++d) {
      in_b[d] = Buffer(in, d, Region(q, d), v1::Buffer::ROLE_SCRATCH);
      const Box received = s2_ ? Region(q, G(d) * n_, n_) : Region(q, d);
      out_b[d] = Buffer(out, d, received, v1::Buffer::ROLE_SCRATCH);
      deps.push_back(AddRowCopy(d, stage, {ready[G(d)]}, source[d],
                                SlotsOfPiece(q, boxes_[source[d]]), in_b[d], {})
                         .id());
    }
    const int exchange = AddAllToAll(q, stage, deps, in_b, out_b).id();
    inputs.resize(world_);
    if (!s2_) {
      for (int d = 0; d < world_; ++d) inputs[d] = {out_b[d], {exchange}};
      return exchange;
    }
    for (int g = 0; g < ep_; ++g) {
      if (call.empty()) call.assign(world_, -1);
      if (call[g * n_] < 0) {
        const int t = AddPlanTensor(plan_, {n_, ep_, el_, c_, m_}, s_.dtype,
                                    v1::Initializer::KIND_ZEROS);
        for (int j = 0; j < n_; ++j) {
          call[g * n_ + j] = Buffer(
              t, g * n_ + j, {{0, n_}, {0, ep_}, {0, el_}, {0, c_}, {0, m_}},
              v1::Buffer::ROLE_SCRATCH);
        }
      }
      const int gathered = AddMpGather(
                               g, stage, {exchange}, out_b,
                               [&](int d) { return Region(q, d); },
                               n_ * ep_ * BlockElements(q) * Size())
                               .id();
      for (int j = 0; j < n_; ++j) {
        const int d = g * n_ + j;
        Box slots = boxes_[call[d]];
        slots[3] = {ChunkBegin(q), ChunkEnd(q)};
        inputs[d].second.push_back(
            AddRowCopy(d, stage, {gathered}, out_b[d], {}, call[d], slots)
                .id());
        inputs[d].first = call[d];
      }
    }
    return exchange;
  }

  // The token rows device d combines: its slice for s1, all B of its group
  // for the baseline and s2.
  std::pair<int64_t, int64_t> CombineRows(int d) const {
    if (baseline_ || s2_) return {G(d) * b_, (G(d) + 1) * b_};
    return GateRows(d);
  }
  // The row of choice i of token t (of device d's group) in the buffer
  // device d combines from, or -1 when the choice was dropped.
  int64_t CombineRow(int d, int64_t t, int i) const {
    const int k = s_.top_k;
    const int64_t slot = r_.slot[t * k + i];
    if (slot < 0) return -1;
    const int64_t e = r_.expert[t * k + i];
    const int64_t jj = (t - G(d) * b_) / s_.slice();  // slice in the group
    if (baseline_) return e * ctot_ + jj * c_ + slot;   // [g'][x][j''][c]
    if (s2_) return (jj * s_.experts + e) * c_ + slot;  // [j''][g'][x][c]
    return e * c_ + slot;                               // [g'][x][c]
  }

  // Device d's rows of `out` (CombineRows): each token's kept choices'
  // rows of `input` summed, weighted by `weights` (the forward combine) or
  // not (-1: the backward's dX). Returns the step's id.
  int AddChoiceGather(int d, int stage,
                      const std::pair<int, std::vector<int>>& input,
                      int weights, int weights_ready, int out) {
    const auto [first, last] = CombineRows(d);
    const int k = s_.top_k;
    std::vector<int> deps = input.second;
    if (weights_ready >= 0) deps.push_back(weights_ready);
    v1::Step& step = AddCompute(d, stage, deps, 2.0 * (last - first) * k * m_);
    Operand(step.add_inputs(), input.first);
    if (weights >= 0) {
      Operand(step.add_inputs(), weights, {{first, last}, {0, k}});
    }
    Operand(step.add_outputs(), out, {{first, last}, {0, m_}});
    v1::GatherAttrs& attrs = SetGather(step, m_, k);
    for (int64_t t = first; t < last; ++t) {
      for (int i = 0; i < k; ++i) attrs.add_index(CombineRow(d, t, i));
    }
    return step.id();
  }

  // s1: the MP all-gather of the slices of `buffers` (Y, or dX) in group g
  // after each device's `ready` step. Returns its id.
  int AddOutputGather(int g, int stage, const std::vector<int>& ready,
                      const PerDevice& buffers) {
    std::vector<int> deps;
    for (int j = 0; j < n_; ++j) deps.push_back(ready[g * n_ + j]);
    return AddMpGather(
               g, stage, deps, buffers,
               [&](int d) {
                 const auto [first, last] = GateRows(d);
                 return Box{{first, last}, {0, m_}};
               },
               b_ * m_ * Size())
        .id();
  }

  // ---- The backward pass (shape.backward; see the header) ----

  void BuildBackward() {
    for (int d = 0; d < world_; ++d) AddGateGradient(d);
    for (int g = 0; g < ep_; ++g) AddGroupGradTensors(g);
    int prev = -1;
    std::vector<std::vector<int>> dye_ready;
    for (int q = 0; q < chunks_; ++q) {
      prev = AddDispatch(
          q, prev, kPhaseCombineBackward, kPhaseEspReduceBackward,
          [&](int d, int in) { return AddGradOrder(d, q, in); }, dye_,
          dye_ready);
    }
    std::vector<std::vector<int>> dxe_ready(world_);
    for (int d = 0; d < world_; ++d) {
      dxe_ready[d] = AddExpertsBackward(d, dye_ready[d]);
    }
    std::vector<int> reduced;
    for (int g = 0; g < ep_; ++g) {
      reduced.push_back(
          AddEspReduce(g, kPhaseEspGatherBackward, dxe_ready, dxep_, dxer_));
    }
    prev = -1;
    PerDevice dcall;
    std::vector<std::pair<int, std::vector<int>>> dx_inputs;
    for (int q = 0; q < chunks_; ++q) {
      prev = AddCombineExchange(q, prev, kPhaseDispatchBackward, dxer_,
                                reduced, dcall, dx_inputs);
    }
    std::vector<int> dx_done(world_);
    for (int d = 0; d < world_; ++d) {
      const int gathered = AddChoiceGather(d, kPhaseDispatchBackward,
                                           dx_inputs[d], -1, -1, dxb_[d]);
      dx_done[d] = AddGateInputGradients(d, gathered);
    }
    AddGateWeightReduce();
    if (!baseline_ && !s2_) {
      for (int g = 0; g < ep_; ++g) {
        AddOutputGather(g, kPhaseDispatchBackward, dx_done, dxb_);
      }
    }
  }

  // dw = dY . (the expert output of each choice), dL of the chosen experts
  // = dw w (1 - w), scattered into dL [rows, E]: on the rows device d
  // combined, from the buffer it combined.
  void AddGateGradient(int d) {
    const auto [first, last] = CombineRows(d);
    const int64_t rows = last - first, e_count = s_.experts;
    const int k = s_.top_k;
    const Box choices = {{first, last}, {0, k}};
    const int dw = Buffer(dw_choice_, d, choices, v1::Buffer::ROLE_SCRATCH);
    v1::Step& dot = AddCompute(d, kPhaseCombineBackward, {done_[d]},
                               2.0 * rows * k * static_cast<double>(m_));
    Operand(dot.add_inputs(), dyb_[d], {{first, last}, {0, m_}});
    Operand(dot.add_inputs(), combine_inputs_[d].first);
    Operand(dot.add_outputs(), dw);
    v1::RowDotAttrs& attrs = *dot.mutable_compute()->mutable_row_dot();
    attrs.set_row(m_);
    for (int64_t t = first; t < last; ++t) {
      for (int i = 0; i < k; ++i) {
        const int64_t row = CombineRow(d, t, i);
        attrs.add_index(row < 0 ? -1 : t - first);
        attrs.add_index(row);
      }
    }
    const int dl_choice =
        Buffer(dl_choice_, d, choices, v1::Buffer::ROLE_SCRATCH);
    v1::Step& grad =
        AddCompute(d, kPhaseGateBackward, {dot.id()}, 3.0 * rows * k);
    Operand(grad.add_inputs(), dw);
    Operand(grad.add_inputs(), weight_buffers_[d], choices);
    Operand(grad.add_outputs(), dl_choice);
    grad.mutable_compute()->mutable_elementwise()->set_kind(
        v1::ElementwiseAttrs::KIND_SIGMOID_GRAD);
    dlb_[d] = Buffer(dl_, d, {{first, last}, {0, e_count}},
                     v1::Buffer::ROLE_SCRATCH);
    v1::Step& scatter = AddCompute(d, kPhaseGateBackward, {grad.id()}, 0);
    Operand(scatter.add_inputs(), dl_choice);
    Operand(scatter.add_outputs(), dlb_[d]);
    v1::GatherAttrs& to_logits = SetGather(scatter, 1, 1);
    for (int64_t t = first; t < last; ++t) {
      for (int64_t e = 0; e < e_count; ++e) {
        int64_t from = -1;
        for (int i = 0; i < k; ++i) {
          if (r_.expert[t * k + i] == e && r_.slot[t * k + i] >= 0) {
            from = (t - first) * k + i;
          }
        }
        to_logits.add_index(from);
      }
    }
    dl_step_[d] = scatter.id();
  }

  // dYE, dH, dXE partials and dXE of group g, shaped as XE, H1, P and YE.
  void AddGroupGradTensors(int g) {
    auto like = [&](const PerDevice& forward, PerDevice& grad) {
      grad.resize(world_);
      const auto& shape =
          plan_.tensors(plan_.buffers(forward[g * n_]).tensor()).shape();
      const int t = AddPlanTensor(
          plan_, std::vector<int64_t>(shape.begin(), shape.end()), s_.dtype,
          v1::Initializer::KIND_ZEROS);
      for (int j = 0; j < n_; ++j) {
        const int d = g * n_ + j;
        grad[d] = Buffer(t, d, boxes_[forward[d]], v1::Buffer::ROLE_SCRATCH);
      }
    };
    like(xe_, dye_);
    like(h1_, dh1_);
    like(p_, dxep_);
    like(ye_, dxer_);
  }

  // Device d's FFN shards backward, expert by expert, after `ready` (its
  // dYE layout steps). Returns the steps that write its dXE partials.
  std::vector<int> AddExpertsBackward(int d, const std::vector<int>& ready) {
    const int g = G(d), j = J(d);
    const int64_t rows = j_ * ep_ * ctot_;
    const double flops = 2.0 * rows * m_ * static_cast<double>(hs_);
    const double rm = 1.0 / std::sqrt(static_cast<double>(m_));
    const double rh = 1.0 / std::sqrt(static_cast<double>(s_.ffn));
    const Interval shard{j * hs_, (j + 1) * hs_};
    std::vector<int> partials;
    for (int x = 0; x < el_; ++x) {
      const int64_t e = int64_t{g} * el_ + x;
      Box a = boxes_[xe_[d]];
      a[2] = {x, x + 1};
      Box h = boxes_[h1_[d]];
      h[1] = {x, x + 1};
      Box out = boxes_[p_[d]];
      out[3] = {x, x + 1};
      const Box w1 = {{e, e + 1}, {0, m_}, shard};
      const Box w2 = {{e, e + 1}, shard, {0, m_}};
      std::vector<int> deps = ready;
      deps.push_back(expert_steps_[d][x]);  // H1 is final
      // dH = dYE W2[e]^T / sqrt(H), then masked where z (H1) <= 0.
      v1::Step& dh = AddCompute(d, kPhaseExpertsBackward, deps, flops);
      Operand(dh.add_inputs(), dye_[d], a);
      Operand(dh.add_inputs(), w2b_[d], w2);
      Operand(dh.add_outputs(), dh1_[d], h);
      SetGemm(dh, rows, hs_, m_, rh);
      dh.mutable_compute()->mutable_gemm()->set_trans_b(true);
      v1::Step& mask = AddCompute(d, kPhaseExpertsBackward, {dh.id()},
                                  static_cast<double>(rows) * hs_);
      Operand(mask.add_inputs(), dh1_[d], h);
      Operand(mask.add_inputs(), h1_[d], h);
      Operand(mask.add_outputs(), dh1_[d], h);
      mask.mutable_compute()->mutable_elementwise()->set_kind(
          v1::ElementwiseAttrs::KIND_RELU_GRAD);
      // dW2[e] = H1^T dYE / sqrt(H).
      v1::Step& dw2 = AddCompute(d, kPhaseExpertsBackward, deps, flops);
      Operand(dw2.add_inputs(), a1_[d], h);
      Operand(dw2.add_inputs(), dye_[d], a);
      Operand(dw2.add_outputs(), dw2b_[d], w2);
      SetGemm(dw2, hs_, m_, rows, rh);
      dw2.mutable_compute()->mutable_gemm()->set_trans_a(true);
      // dW1[e] = XE^T dZ / sqrt(M).
      v1::Step& dw1 = AddCompute(d, kPhaseExpertsBackward, {mask.id()}, flops);
      Operand(dw1.add_inputs(), xe_[d], a);
      Operand(dw1.add_inputs(), dh1_[d], h);
      Operand(dw1.add_outputs(), dw1b_[d], w1);
      SetGemm(dw1, m_, hs_, rows, rm);
      dw1.mutable_compute()->mutable_gemm()->set_trans_a(true);
      // The partial dXE of this shard = dZ W1[e]^T / sqrt(M).
      v1::Step& dxe = AddCompute(d, kPhaseExpertsBackward, {mask.id()}, flops);
      Operand(dxe.add_inputs(), dh1_[d], h);
      Operand(dxe.add_inputs(), w1b_[d], w1);
      Operand(dxe.add_outputs(), dxep_[d], out);
      SetGemm(dxe, rows, m_, hs_, rm);
      dxe.mutable_compute()->mutable_gemm()->set_trans_b(true);
      partials.push_back(dxe.id());
    }
    return partials;
  }

  // dX += dL Wg^T / sqrt(M) on the rows device d combined (after the
  // gather of the dispatch's share, `dx_ready`), and the partial dWg =
  // X^T dL / sqrt(M) of its gate rows. Returns the dX step.
  int AddGateInputGradients(int d, int dx_ready) {
    const auto [first, last] = CombineRows(d);
    const auto [gate_first, gate_last] = GateRows(d);
    const int64_t e_count = s_.experts;
    const double rm = 1.0 / std::sqrt(static_cast<double>(m_));
    v1::Step& dx = AddCompute(d, kPhaseGateBackward, {dx_ready, dl_step_[d]},
                              2.0 * (last - first) * e_count * m_);
    Operand(dx.add_inputs(), dlb_[d]);
    Operand(dx.add_inputs(), wgb_[d]);
    Operand(dx.add_outputs(), dxb_[d], {{first, last}, {0, m_}});
    SetGemm(dx, last - first, m_, e_count, rm);
    dx.mutable_compute()->mutable_gemm()->set_trans_b(true);
    dx.mutable_compute()->mutable_gemm()->set_accumulate(true);

    const int slot = baseline_ ? G(d) : d;  // the all-reduce's rank
    dwgpb_[d] = Buffer(dwgp_, d, {{slot, slot + 1}, {0, m_}, {0, e_count}},
                       v1::Buffer::ROLE_SCRATCH);
    v1::Step& dwg =
        AddCompute(d, kPhaseGateBackward, {dl_step_[d]},
                   2.0 * (gate_last - gate_first) * e_count * m_);
    Operand(dwg.add_inputs(), xb_[d], {{gate_first, gate_last}, {0, m_}});
    Operand(dwg.add_inputs(), dlb_[d],
            {{gate_first, gate_last}, {0, e_count}});
    Operand(dwg.add_outputs(), dwgpb_[d]);
    SetGemm(dwg, m_, e_count, gate_last - gate_first, rm);
    dwg.mutable_compute()->mutable_gemm()->set_trans_a(true);
    dwg_step_[d] = dwg.id();
    return dx.id();
  }

  // dWg = the sum of the partials: over the whole mesh, or for the
  // baseline (whose MP ranks hold the same partial) over each EP group.
  void AddGateWeightReduce() {
    const int groups = baseline_ ? n_ : 1;
    for (int j = 0; j < groups; ++j) {
      std::vector<int> members;
      for (int d = 0; d < world_; ++d) {
        if (!baseline_ || J(d) == j) members.push_back(d);
      }
      std::vector<int> deps;
      for (int d : members) deps.push_back(dwg_step_[d]);
      v1::Step& step =
          AddStep(v1::Step::OP_ALL_REDUCE, kPhaseGateBackward, deps);
      step.set_group(Group(members));
      for (int d : members) {
        Operand(step.add_inputs(), dwgpb_[d]);
        Operand(step.add_outputs(), dwgb_[d]);
      }
      step.set_bytes(m_ * s_.experts * Size());
    }
  }

  const MoeShape& s_;
  const MoeRouting& r_;
  const bool baseline_, s2_, backward_;
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
  PerDevice xb_, wgb_, w1b_, w2b_, yb_, xe_, h1_, a1_, p_, ye_, call_;
  int a1_tensor_ = -1;
  std::vector<int> weight_buffers_, gate_step_, weight_step_, weights_gathered_,
      reduce_steps_, combine_steps_;
  std::vector<std::vector<int>> layout_steps_, expert_steps_;
  // Per device: the buffer its combine reads and the steps that fill it.
  std::vector<std::pair<int, std::vector<int>>> combine_inputs_;
  // Per device: the forward's last step (Y final), where the backward
  // starts.
  std::vector<int> done_;
  // The backward's tensors and buffers.
  int dy_ = 0, dx_ = 0, dwg_ = 0, dw1_ = 0, dw2_ = 0, dw_choice_ = 0,
      dl_choice_ = 0, dl_ = 0, dwgp_ = 0;
  PerDevice dyb_, dxb_, dwgb_, dw1b_, dw2b_, dlb_, dwgpb_, dye_, dh1_, dxep_,
      dxer_;
  std::vector<int> dl_step_, dwg_step_;
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
      "gate",
      "dispatch",
      "esp_gather",
      "experts",
      "esp_reduce",
      "combine",
      "combine_backward",
      "esp_reduce_backward",
      "experts_backward",
      "esp_gather_backward",
      "dispatch_backward",
      "gate_backward"};
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
