#include "planner/kinds/attention/attention_lowering.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/ir/plan_building.h"
#include "planner/ir/spec_convert.h"
#include "util/text_safety.h"

namespace meshcast {
namespace {

uint64_t TensorSeed(uint64_t seed, int which) { return seed * 8 + which; }

class AttentionBuilder {
 public:
  AttentionBuilder(const AttentionShape& shape, AttentionAlgorithm algorithm,
                   const std::vector<int>& devices)
      : s_(shape),
        devices_(devices),
        p_(shape.ranks),
        b_(shape.batch),
        h_(shape.heads),
        hkv_(shape.kv_heads),
        l_(shape.rows()),
        d_(shape.head_dim) {
    plan_.set_kind("attention");
    plan_.set_strategy(AttentionAlgorithmName(algorithm));
    algorithm_ = algorithm;
  }

  v1::Plan Build() {
    AddTensors();
    switch (algorithm_) {
      case AttentionAlgorithm::kRing:
        BuildRing(/*overlap=*/true);
        break;
      case AttentionAlgorithm::kRsa:
        BuildRsa();
        break;
      default:
        BuildUlysses();
        break;
    }
    return std::move(plan_);
  }

 private:
  using PerDevice = std::vector<int>;

  int64_t Size() const { return DTypeSize(s_.dtype); }
  Box Rows(int p, int64_t heads, int64_t width) const {
    return {{0, b_}, {0, heads}, {p * l_, (p + 1) * l_}, {0, width}};
  }
  // Device p's rows of dKV [2, B, Hkv, S, D].
  Box DkvRows(int p) const {
    return {{0, 2}, {0, b_}, {0, hkv_}, {p * l_, (p + 1) * l_}, {0, d_}};
  }
  std::vector<int64_t> Positions(int p) const {
    std::vector<int64_t> out(l_);
    for (int64_t r = 0; r < l_; ++r) out[r] = s_.LayoutPosition(p * l_ + r);
    return out;
  }

  v1::Step& AddStep(v1::Step::Op op, int stage, std::vector<int> deps) {
    v1::Step& step = *plan_.add_steps();
    step.set_id(plan_.steps_size() - 1);
    step.set_op(op);
    step.set_stage(stage);
    deps.erase(std::remove(deps.begin(), deps.end(), -1), deps.end());
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    for (int dep : deps) step.add_deps(dep);
    return step;
  }
  v1::Step& AddCompute(int p, int stage, std::vector<int> deps, double flops) {
    v1::Step& step = AddStep(v1::Step::OP_COMPUTE, stage, std::move(deps));
    step.set_device(devices_[p]);
    step.set_flops(flops);
    return step;
  }
  int Buffer(int tensor, int p, const Box& box, v1::Buffer::Role role) {
    boxes_.push_back(box);
    return AddPlanBuffer(plan_, tensor, devices_[p], box, role);
  }
  static void Operand(v1::Operand* operand, int buffer, const Box& slice = {}) {
    operand->set_buffer(buffer);
    if (!slice.empty()) BoxToProto(slice, operand->mutable_slice());
  }
  int Group(std::vector<int> ranks) {
    v1::CommGroup& group = *plan_.add_groups();
    group.set_id(plan_.groups_size() - 1);
    for (int r : ranks) group.add_devices(devices_[r]);
    return group.id();
  }
  int PairGroup(int from, int to) {
    const auto key = std::make_pair(from, to);
    auto it = pairs_.find(key);
    if (it != pairs_.end()) return it->second;
    const int id = Group({from, to});
    pairs_[key] = id;
    return id;
  }

  void AddTensors() {
    const int64_t s = s_.seq_len;
    q_ = AddPlanTensor(plan_, {b_, h_, s, d_}, s_.dtype,
                       v1::Initializer::KIND_RANDOM, TensorSeed(s_.seed, 1));
    k_ = AddPlanTensor(plan_, {b_, hkv_, s, d_}, s_.dtype,
                       v1::Initializer::KIND_RANDOM, TensorSeed(s_.seed, 2));
    v_ = AddPlanTensor(plan_, {b_, hkv_, s, d_}, s_.dtype,
                       v1::Initializer::KIND_RANDOM, TensorSeed(s_.seed, 3));
    o_ = AddPlanTensor(plan_, {b_, h_, s, d_}, s_.dtype,
                       v1::Initializer::KIND_ZEROS);
    for (int p = 0; p < p_; ++p) {
      qb_.push_back(Buffer(q_, p, Rows(p, h_, d_), v1::Buffer::ROLE_SOURCE));
      kb_.push_back(Buffer(k_, p, Rows(p, hkv_, d_), v1::Buffer::ROLE_SOURCE));
      vb_.push_back(Buffer(v_, p, Rows(p, hkv_, d_), v1::Buffer::ROLE_SOURCE));
      ob_.push_back(
          Buffer(o_, p, Rows(p, h_, d_), v1::Buffer::ROLE_DESTINATION));
    }
    if (!s_.backward) return;
    const int dout = AddPlanTensor(plan_, {b_, h_, s, d_}, s_.dtype,
                                   v1::Initializer::KIND_RANDOM,
                                   TensorSeed(s_.seed, 4));
    const int dq = AddPlanTensor(plan_, {b_, h_, s, d_}, s_.dtype,
                                 v1::Initializer::KIND_ZEROS);
    const int dkv = AddPlanTensor(plan_, {2, b_, hkv_, s, d_}, s_.dtype,
                                  v1::Initializer::KIND_ZEROS);
    for (int p = 0; p < p_; ++p) {
      dob_.push_back(Buffer(dout, p, Rows(p, h_, d_), v1::Buffer::ROLE_SOURCE));
      dqb_.push_back(
          Buffer(dq, p, Rows(p, h_, d_), v1::Buffer::ROLE_DESTINATION));
      dkvb_.push_back(
          Buffer(dkv, p, DkvRows(p), v1::Buffer::ROLE_DESTINATION));
    }
  }

  // A copy of `from` (row-major over its slice) into `to`'s slice, rows of
  // `row` elements in `order` (the input row of each output row).
  int AddCopy(int p, int stage, std::vector<int> deps, int from,
              const Box& from_box, int to, const Box& to_box,
              const std::vector<int64_t>& order, int64_t row) {
    v1::Step& step = AddCompute(p, stage, std::move(deps), 0);
    Operand(step.add_inputs(), from, from_box);
    Operand(step.add_outputs(), to, to_box);
    v1::GatherAttrs& g = *step.mutable_compute()->mutable_gather();
    g.set_row(row);
    g.set_k(1);
    for (int64_t i : order) g.add_index(i);
    return step.id();
  }
  std::vector<int64_t> Identity(int64_t n) const {
    std::vector<int64_t> order(n);
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    return order;
  }

  // One attention block on device p into its state; `first` starts it.
  struct BlockOperand {
    int buffer;
    Box box;
  };
  int AddBlock(int p, std::vector<int> deps, const BlockOperand& q,
               const BlockOperand& k, const BlockOperand& v,
               const BlockOperand& state, bool first, int64_t heads,
               int64_t kv_heads, const std::vector<int64_t>& q_positions,
               const std::vector<int64_t>& kv_positions) {
    const double flops = 4.0 * b_ * heads *
                         static_cast<double>(VisiblePairs(q_positions,
                                                          kv_positions)) *
                         d_;
    v1::Step& step =
        AddCompute(p, kAttentionCompute, std::move(deps), flops);
    Operand(step.add_inputs(), q.buffer, q.box);
    Operand(step.add_inputs(), k.buffer, k.box);
    Operand(step.add_inputs(), v.buffer, v.box);
    if (!first) Operand(step.add_inputs(), state.buffer, state.box);
    Operand(step.add_outputs(), state.buffer, state.box);
    SetBlockAttrs(*step.mutable_compute()->mutable_attention_block(), heads,
                  kv_heads, q_positions, kv_positions);
    return step.id();
  }
  // The geometry and mask of a block of `heads` query heads on `kv_heads`
  // kv heads, query rows at `q_positions` and keys at `kv_positions`.
  void SetBlockAttrs(v1::AttentionBlockAttrs& a, int64_t heads,
                     int64_t kv_heads, const std::vector<int64_t>& q_positions,
                     const std::vector<int64_t>& kv_positions) const {
    a.set_batch(b_);
    a.set_heads(heads);
    a.set_kv_heads(kv_heads);
    a.set_q_rows(static_cast<int64_t>(q_positions.size()));
    a.set_kv_rows(static_cast<int64_t>(kv_positions.size()));
    a.set_head_dim(d_);
    a.set_scale(1.0 / std::sqrt(static_cast<double>(d_)));
    a.set_causal(s_.causal);
    if (s_.causal) {
      for (int64_t x : q_positions) a.add_q_position(x);
      for (int64_t x : kv_positions) a.add_kv_position(x);
    }
  }
  // The (query, key) pairs a block computes: all of them, or with causal
  // masks those whose key position is not after the query's (the kernels
  // skip what a mask hides).
  int64_t VisiblePairs(const std::vector<int64_t>& q_positions,
                       std::vector<int64_t> kv_positions) const {
    const int64_t all = static_cast<int64_t>(q_positions.size()) *
                        static_cast<int64_t>(kv_positions.size());
    if (!s_.causal) return all;
    std::sort(kv_positions.begin(), kv_positions.end());
    int64_t pairs = 0;
    for (int64_t q : q_positions) {
      pairs += std::upper_bound(kv_positions.begin(), kv_positions.end(), q) -
               kv_positions.begin();
    }
    return pairs;
  }

  int AddFinish(int p, int last, const BlockOperand& state,
                const BlockOperand& out) {
    v1::Step& step = AddCompute(p, kAttentionCompute, {last},
                                2.0 * NumElements(out.box));
    Operand(step.add_inputs(), state.buffer, state.box);
    Operand(step.add_outputs(), out.buffer, out.box);
    step.mutable_compute()->mutable_attention_finish()->set_head_dim(d_);
    return step.id();
  }

  // The gradients of one block on device p (plan.proto
  // AttentionBackwardAttrs) into `out`: dQ of its query rows, or dK and dV
  // of the block's keys; `accumulate` adds to what `out` holds.
  struct Grad {
    BlockOperand q, k, v, dout, o, state;
    int64_t heads, kv_heads;
  };
  int AddGrad(int p, std::vector<int> deps, const Grad& g,
              v1::AttentionBackwardAttrs::Target target,
              const BlockOperand& out, bool accumulate,
              const std::vector<int64_t>& q_positions,
              const std::vector<int64_t>& kv_positions) {
    // Per visible pair: the scores and dP (2 d each), then dQ (2 d), or dK
    // and dV (4 d).
    const bool dq = target == v1::AttentionBackwardAttrs::TARGET_DQ;
    const double flops = (dq ? 6.0 : 8.0) * b_ * g.heads *
                         static_cast<double>(
                             VisiblePairs(q_positions, kv_positions)) *
                         d_;
    v1::Step& step = AddCompute(p, kAttentionCompute, std::move(deps), flops);
    for (const BlockOperand* in : {&g.q, &g.k, &g.v, &g.dout, &g.o, &g.state}) {
      Operand(step.add_inputs(), in->buffer, in->box);
    }
    Operand(step.add_outputs(), out.buffer, out.box);
    v1::AttentionBackwardAttrs& ab =
        *step.mutable_compute()->mutable_attention_backward();
    ab.set_target(target);
    ab.set_accumulate(accumulate);
    SetBlockAttrs(*ab.mutable_block(), g.heads, g.kv_heads, q_positions,
                  kv_positions);
    return step.id();
  }
  // Device p's state over its L rows.
  void AddStates() {
    st_ = AddPlanTensor(plan_, {b_, h_, s_.seq_len, d_ + 2}, s_.dtype,
                        v1::Initializer::KIND_ZEROS);
    for (int p = 0; p < p_; ++p) {
      stb_.push_back(
          Buffer(st_, p, Rows(p, h_, d_ + 2), v1::Buffer::ROLE_SCRATCH));
    }
  }

  // A send/recv of `from` (device p-1's region) into `to` (device p's).
  int AddTransfer(int p, std::vector<int> deps, int from, const Box& from_box,
                  int to, const Box& to_box) {
    const int sender = (p + p_ - 1) % p_;
    v1::Step& step =
        AddStep(v1::Step::OP_SEND_RECV, kAttentionExchange, std::move(deps));
    step.set_group(PairGroup(sender, p));
    Operand(step.add_inputs(), from, from_box);
    Operand(step.add_outputs(), to, to_box);
    step.set_bytes(NumElements(to_box) * Size());
    return step.id();
  }

  // Ring (and RSA's second pass): K and V blocks in double-buffered slots
  // of KVR [P, 2, 2, B, Hkv, L, D] (slot, then K or V). With `overlap`
  // false, a transfer waits for the previous block's compute on both ends.
  // RSA passes `keys` (per device its buffer of KS [P, P, B, Hkv, L, D],
  // every K block on every device) and moves only V.
  void BuildRing(bool overlap, const PerDevice& keys = {},
                 const std::vector<std::vector<int>>& keys_ready = {}) {
    AddStates();
    const bool rsa = !keys.empty();
    const int kinds = rsa ? 1 : 2;  // what travels: K and V, or V
    const int kvr = AddPlanTensor(plan_, {p_, 2, kinds, b_, hkv_, l_, d_},
                                  s_.dtype, v1::Initializer::KIND_ZEROS);
    PerDevice kvrb;
    for (int p = 0; p < p_; ++p) {
      kvrb.push_back(Buffer(kvr, p,
                            {{p, p + 1}, {0, 2}, {0, kinds}, {0, b_},
                             {0, hkv_}, {0, l_}, {0, d_}},
                            v1::Buffer::ROLE_SCRATCH));
    }
    auto slot = [&](int p, int t, int kind) {
      return Box{{p, p + 1}, {t % 2, t % 2 + 1}, {kind, kind + 1},
                 {0, b_},    {0, hkv_},          {0, l_},
                 {0, d_}};
    };
    auto slots = [&](int p, int t) {
      return Box{{p, p + 1}, {t % 2, t % 2 + 1}, {0, kinds}, {0, b_},
                 {0, hkv_},  {0, l_},            {0, d_}};
    };
    const int64_t block = b_ * hkv_ * l_;
    // Step 0: every device copies its own block into slot 0 (to forward
    // it) and computes on its own rows.
    std::vector<int> copied(p_), last(p_, -1);
    std::vector<std::vector<int>> compute(p_, std::vector<int>(p_, -1));
    std::vector<std::vector<int>> transfer(p_, std::vector<int>(p_, -1));
    for (int p = 0; p < p_; ++p) {
      std::vector<int> ready;
      if (rsa) ready = keys_ready[p];
      int id = -1;
      if (!rsa) {
        id = AddCopy(p, kAttentionExchange, ready, kb_[p], {}, kvrb[p],
                     slot(p, 0, 0), Identity(block), d_);
      }
      copied[p] = AddCopy(p, kAttentionExchange, ready, vb_[p], {}, kvrb[p],
                          slot(p, 0, rsa ? 0 : 1), Identity(block), d_);
      if (id >= 0) copied[p] = std::max(copied[p], id);
      if (!rsa) {
        // The K copy and the V copy: the transfer needs both.
        copy_k_.push_back(id);
      }
      const BlockOperand k = rsa ? BlockOperand{keys[p], KeySlot(p, p)}
                                 : BlockOperand{kb_[p], {}};
      last[p] = compute[0][p] = AddBlock(
          p, ready, {qb_[p], {}}, k, {vb_[p], {}}, {stb_[p], {}}, true, h_,
          hkv_, Positions(p), Positions(p));
    }
    for (int t = 1; t < p_; ++t) {
      for (int p = 0; p < p_; ++p) {
        const int sender = (p + p_ - 1) % p_;
        std::vector<int> deps;
        if (t == 1) {
          deps.push_back(copied[sender]);
          if (!rsa) deps.push_back(copy_k_[sender]);
        } else {
          deps.push_back(transfer[t - 1][sender]);
        }
        // The slot it overwrites: read by this device's compute at t - 2
        // and by the next device's transfer at t - 1.
        if (t >= 2) {
          deps.push_back(LastUpTo(compute, p, t - 2));
          deps.push_back(transfer[t - 1][(p + 1) % p_]);
        }
        if (!overlap) {
          deps.push_back(LastUpTo(compute, p, t - 1));
          deps.push_back(LastUpTo(compute, sender, t - 1));
        }
        transfer[t][p] = AddTransfer(p, deps, kvrb[sender],
                                     slots(sender, t - 1), kvrb[p],
                                     slots(p, t));
      }
      for (int p = 0; p < p_; ++p) {
        const int src = (p - t + p_) % p_;
        if (s_.causal && !s_.BlockVisible(p, src)) continue;
        const BlockOperand k = rsa ? BlockOperand{keys[p], KeySlot(p, src)}
                                   : BlockOperand{kvrb[p], slot(p, t, 0)};
        last[p] = compute[t][p] = AddBlock(
            p, {transfer[t][p], last[p]}, {qb_[p], {}}, k,
            {kvrb[p], slot(p, t, rsa ? 0 : 1)}, {stb_[p], {}}, false, h_,
            hkv_, Positions(p), Positions(src));
      }
    }
    for (int p = 0; p < p_; ++p) {
      finished_.push_back(AddFinish(p, last[p], {stb_[p], {}}, {ob_[p], {}}));
    }
    if (s_.backward) BuildRingBackward(overlap, keys);
  }

  // The backward ring after the forward (finished_): K and V go around
  // again in double-buffered slots of KVB [P, 2, kinds, B, Hkv, L, D] (RSA:
  // V only; its keys are all on every device already), and with each block
  // its gradient accumulator, dK and dV in GR [P, 2, 2, B, Hkv, L, D]. At
  // step t device p holds block src = p - t: it adds its rows' part to the
  // block's dK and dV and to its own dQ, then passes K, V and the
  // accumulator on; after P steps every accumulator is back on its owner,
  // in the job's dKV. The K/V transfer of the next step overlaps this
  // step's compute; so does the accumulator's, since each device computes
  // its part of dK and dV on its own and only adds it to the accumulator
  // when that arrives. With `overlap` false (RSA), every transfer waits
  // for the previous compute on both ends.
  void BuildRingBackward(bool overlap, const PerDevice& keys) {
    const bool rsa = !keys.empty();
    const int kinds = rsa ? 1 : 2;
    const int kvb = AddPlanTensor(plan_, {p_, 2, kinds, b_, hkv_, l_, d_},
                                  s_.dtype, v1::Initializer::KIND_ZEROS);
    const int gr = AddPlanTensor(plan_, {p_, 2, 2, b_, hkv_, l_, d_},
                                 s_.dtype, v1::Initializer::KIND_ZEROS);
    // This device's part of the block's dK and dV, added to the
    // accumulator when that arrives (double-buffered like the slots).
    const int part = AddPlanTensor(plan_, {p_, 2, 2, b_, hkv_, l_, d_},
                                   s_.dtype, v1::Initializer::KIND_ZEROS);
    PerDevice kvbb, grb, partb;
    for (int p = 0; p < p_; ++p) {
      kvbb.push_back(Buffer(kvb, p,
                            {{p, p + 1}, {0, 2}, {0, kinds}, {0, b_},
                             {0, hkv_}, {0, l_}, {0, d_}},
                            v1::Buffer::ROLE_SCRATCH));
      const Box slots = {{p, p + 1}, {0, 2}, {0, 2}, {0, b_}, {0, hkv_},
                         {0, l_},    {0, d_}};
      grb.push_back(Buffer(gr, p, slots, v1::Buffer::ROLE_SCRATCH));
      if (p_ > 1) partb.push_back(Buffer(part, p, slots, v1::Buffer::ROLE_SCRATCH));
    }
    auto slot = [&](int p, int t, int kind, int count) {
      return Box{{p, p + 1}, {t % 2, t % 2 + 1}, {kind, kind + count},
                 {0, b_},    {0, hkv_},          {0, l_},
                 {0, d_}};
    };
    const int64_t block = b_ * hkv_ * l_;
    auto grad = [&](int p, int src, int t) {
      Grad g;
      g.q = {qb_[p], {}};
      if (t == 0) {
        g.k = rsa ? BlockOperand{keys[p], KeySlot(p, p)}
                  : BlockOperand{kb_[p], {}};
        g.v = {vb_[p], {}};
      } else {
        g.k = rsa ? BlockOperand{keys[p], KeySlot(p, src)}
                  : BlockOperand{kvbb[p], slot(p, t, 0, 1)};
        g.v = {kvbb[p], slot(p, t, rsa ? 0 : 1, 1)};
      }
      g.dout = {dob_[p], {}};
      g.o = {ob_[p], {}};
      g.state = {stb_[p], {}};
      g.heads = h_;
      g.kv_heads = hkv_;
      return g;
    };
    using Target = v1::AttentionBackwardAttrs;
    // Per step and device: the K/V transfer into it, the accumulator
    // transfer into it, the step that last wrote its accumulator slot, and
    // its two gradient steps (-1 where a causal mask hides the block).
    auto grid = [&] {
      return std::vector<std::vector<int>>(p_, std::vector<int>(p_, -1));
    };
    std::vector<std::vector<int>> kv_in = grid(), g_in = grid(),
                                  g_done = grid(), dq_step = grid(),
                                  dkv_step = grid(), add_step = grid();
    // The last gradient steps of device p up to step t: what reads its
    // K/V slot of step t (and so what must finish before it is reused).
    auto readers = [&](int p, int t) {
      return std::vector<int>{LastUpTo(dq_step, p, t),
                              LastUpTo(dkv_step, p, t)};
    };
    std::vector<std::vector<int>> copies(p_);
    for (int p = 0; p < p_; ++p) {
      const Grad g = grad(p, p, 0);
      dq_step[0][p] = AddGrad(p, {finished_[p]}, g, Target::TARGET_DQ,
                              {dqb_[p], {}}, false, Positions(p), Positions(p));
      const BlockOperand acc = p_ == 1 ? BlockOperand{dkvb_[p], {}}
                                       : BlockOperand{grb[p], slot(p, 0, 0, 2)};
      g_done[0][p] = dkv_step[0][p] =
          AddGrad(p, {finished_[p]}, g, Target::TARGET_DKV, acc, false,
                  Positions(p), Positions(p));
      if (p_ == 1) return;
      // Its own K and V into slot 0, to pass on.
      if (!rsa) {
        copies[p].push_back(AddCopy(p, kAttentionExchange, {}, kb_[p], {},
                                    kvbb[p], slot(p, 0, 0, 1),
                                    Identity(block), d_));
      }
      copies[p].push_back(AddCopy(p, kAttentionExchange, {}, vb_[p], {},
                                  kvbb[p], slot(p, 0, rsa ? 0 : 1, 1),
                                  Identity(block), d_));
    }
    for (int t = 1; t < p_; ++t) {
      for (int p = 0; p < p_; ++p) {
        const int sender = (p + p_ - 1) % p_, next = (p + 1) % p_;
        std::vector<int> deps =
            t == 1 ? copies[sender] : std::vector<int>{kv_in[t - 1][sender]};
        std::vector<int> gdeps = {g_done[t - 1][sender]};
        if (t >= 2) {  // the slots it overwrites: read at t - 2 and by t - 1
          for (int id : readers(p, t - 2)) deps.push_back(id);
          deps.push_back(kv_in[t - 1][next]);
          gdeps.push_back(g_done[t - 2][p]);
          gdeps.push_back(g_in[t - 1][next]);
        }
        if (!overlap) {
          for (int id : readers(p, t - 1)) deps.push_back(id);
          for (int id : readers(sender, t - 1)) deps.push_back(id);
          for (int id : readers(p, t - 1)) gdeps.push_back(id);
        }
        kv_in[t][p] = AddTransfer(p, deps, kvbb[sender],
                                  slot(sender, t - 1, 0, kinds), kvbb[p],
                                  slot(p, t, 0, kinds));
        g_done[t][p] = g_in[t][p] =
            AddTransfer(p, gdeps, grb[sender], slot(sender, t - 1, 0, 2),
                        grb[p], slot(p, t, 0, 2));
      }
      for (int p = 0; p < p_; ++p) {
        const int src = (p - t + p_) % p_;
        if (s_.causal && !s_.BlockVisible(p, src)) continue;
        const Grad g = grad(p, src, t);
        dq_step[t][p] = AddGrad(
            p, {kv_in[t][p], LastUpTo(dq_step, p, t - 1)}, g,
            Target::TARGET_DQ, {dqb_[p], {}}, true, Positions(p),
            Positions(src));
        // dK and dV of its rows into its part (its state and output are
        // final once its forward finished; the part's slot was last read by
        // the add two steps back), computed while the accumulator travels;
        // then the add, the one step the accumulator waits for.
        dkv_step[t][p] = AddGrad(
            p, {kv_in[t][p], finished_[p], LastUpTo(add_step, p, t - 2)}, g,
            Target::TARGET_DKV, {partb[p], slot(p, t, 0, 2)}, false,
            Positions(p), Positions(src));
        v1::Step& add = AddCompute(
            p, kAttentionCompute,
            {dkv_step[t][p], g_in[t][p], LastUpTo(add_step, p, t - 1)},
            static_cast<double>(2 * block * d_));
        Operand(add.add_inputs(), grb[p], slot(p, t, 0, 2));
        Operand(add.add_inputs(), partb[p], slot(p, t, 0, 2));
        Operand(add.add_outputs(), grb[p], slot(p, t, 0, 2));
        add.mutable_compute()->mutable_elementwise()->set_kind(
            v1::ElementwiseAttrs::KIND_ADD);
        g_done[t][p] = add_step[t][p] = add.id();
      }
    }
    // Every accumulator home: device p's (block p + 1's) to device p + 1.
    for (int p = 0; p < p_; ++p) {
      const int owner = (p + 1) % p_;
      AddTransfer(owner, {g_done[p_ - 1][p]}, grb[p], slot(p, p_ - 1, 0, 2),
                  dkvb_[owner], DkvRows(owner));
    }
  }
  // The last compute on device p at step <= t (-1: none).
  static int LastUpTo(const std::vector<std::vector<int>>& compute, int p,
                      int t) {
    for (; t >= 0; --t) {
      if (compute[t][p] >= 0) return compute[t][p];
    }
    return -1;
  }
  Box KeySlot(int p, int block) const {
    return {{p, p + 1}, {block, block + 1}, {0, b_}, {0, hkv_}, {0, l_},
            {0, d_}};
  }

  // RSA: every K block to every device first (no compute), then the V
  // ring without overlap.
  void BuildRsa() {
    const int ks = AddPlanTensor(plan_, {p_, p_, b_, hkv_, l_, d_}, s_.dtype,
                                 v1::Initializer::KIND_ZEROS);
    PerDevice ksb;
    for (int p = 0; p < p_; ++p) {
      ksb.push_back(Buffer(
          ks, p, {{p, p + 1}, {0, p_}, {0, b_}, {0, hkv_}, {0, l_}, {0, d_}},
          v1::Buffer::ROLE_SCRATCH));
    }
    const int64_t block = b_ * hkv_ * l_;
    // Every step that writes a K block into device p: its pass 2 waits for
    // all of them (the last one alone does not order the earlier ones).
    std::vector<std::vector<int>> written(p_);
    std::vector<int> prev(p_);
    for (int p = 0; p < p_; ++p) {
      prev[p] = AddCopy(p, kAttentionExchange, {}, kb_[p], {}, ksb[p],
                        KeySlot(p, p), Identity(block), d_);
      written[p].push_back(prev[p]);
    }
    for (int t = 1; t < p_; ++t) {
      std::vector<int> next(p_);
      for (int p = 0; p < p_; ++p) {
        const int sender = (p + p_ - 1) % p_;
        const int src = (p - t + p_) % p_;
        next[p] = AddTransfer(p, {prev[sender]}, ksb[sender],
                              KeySlot(sender, src), ksb[p], KeySlot(p, src));
        written[p].push_back(next[p]);
      }
      prev = next;
    }
    BuildRing(/*overlap=*/false, ksb, written);
  }

  // Ulysses: Q, K, V to head-sharded over the whole sequence, one
  // attention per device, O back.
  void BuildUlysses() {
    const int64_t hp = h_ / p_, hkvp = hkv_ / p_, s = s_.seq_len;
    std::vector<int64_t> all(s);
    for (int64_t r = 0; r < s; ++r) all[r] = s_.LayoutPosition(r);
    const PerDevice qu = ToHeads(qb_, h_, hp), ku = ToHeads(kb_, hkv_, hkvp),
                    vu = ToHeads(vb_, hkv_, hkvp);
    const int st = AddPlanTensor(plan_, {p_, b_, hp, s, d_ + 2}, s_.dtype,
                                 v1::Initializer::KIND_ZEROS);
    const int ou = AddPlanTensor(plan_, {p_, b_, hp, s, d_}, s_.dtype,
                                 v1::Initializer::KIND_ZEROS);
    PerDevice oub, stu;
    std::vector<int> finished;
    for (int r = 0; r < p_; ++r) {
      const int stb = Buffer(st, r, {{r, r + 1}, {0, b_}, {0, hp}, {0, s},
                                     {0, d_ + 2}},
                             v1::Buffer::ROLE_SCRATCH);
      stu.push_back(stb);
      oub.push_back(Buffer(ou, r, {{r, r + 1}, {0, b_}, {0, hp}, {0, s},
                                   {0, d_}},
                           v1::Buffer::ROLE_SCRATCH));
      const int block =
          AddBlock(r, heads_ready_[r], {qu[r], {}}, {ku[r], {}},
                   {vu[r], {}}, {stb, {}}, true, hp, hkvp, all, all);
      finished.push_back(AddFinish(r, block, {stb, {}}, {oub[r], {}}));
    }
    // Back: device r's rows (b, hh, p L + l) to device p, heads r hp + hh.
    std::vector<BlockOperand> o_heads, o_rows;
    for (int p = 0; p < p_; ++p) {
      o_heads.push_back({oub[p], {}});
      o_rows.push_back({ob_[p], {}});
    }
    FromHeads(finished, o_heads, h_, hp, o_rows);
    if (!s_.backward) return;
    // The backward, head-sharded: dO to heads, both halves of the
    // gradient over the whole sequence, dQ, dK and dV back.
    const PerDevice du = ToHeads(dob_, h_, hp);
    const int dq = AddPlanTensor(plan_, {p_, b_, hp, s, d_}, s_.dtype,
                                 v1::Initializer::KIND_ZEROS);
    const int dkv = AddPlanTensor(plan_, {p_, 2, b_, hkvp, s, d_}, s_.dtype,
                                  v1::Initializer::KIND_ZEROS);
    std::vector<BlockOperand> dqu, dku, dvu;
    std::vector<int> dq_done, dkv_done;
    using Target = v1::AttentionBackwardAttrs;
    for (int r = 0; r < p_; ++r) {
      const int dqb = Buffer(dq, r, {{r, r + 1}, {0, b_}, {0, hp}, {0, s},
                                     {0, d_}},
                             v1::Buffer::ROLE_SCRATCH);
      const int dkvb = Buffer(dkv, r, {{r, r + 1}, {0, 2}, {0, b_},
                                       {0, hkvp}, {0, s}, {0, d_}},
                              v1::Buffer::ROLE_SCRATCH);
      dqu.push_back({dqb, {}});
      dku.push_back({dkvb, {{r, r + 1}, {0, 1}, {0, b_}, {0, hkvp}, {0, s},
                            {0, d_}}});
      dvu.push_back({dkvb, {{r, r + 1}, {1, 2}, {0, b_}, {0, hkvp}, {0, s},
                            {0, d_}}});
      Grad g{{qu[r], {}}, {ku[r], {}}, {vu[r], {}}, {du[r], {}},
             {oub[r], {}}, {stu[r], {}}, hp, hkvp};
      std::vector<int> deps = heads_ready_[r];
      deps.push_back(finished[r]);
      const int a = AddGrad(r, deps, g, Target::TARGET_DQ, dqu[r], false,
                            all, all);
      const int b = AddGrad(r, deps, g, Target::TARGET_DKV, {dkvb, {}},
                            false, all, all);
      dq_done.push_back(a);
      dkv_done.push_back(b);
    }
    std::vector<BlockOperand> dq_out, dk_out, dv_out;
    for (int p = 0; p < p_; ++p) {
      dq_out.push_back({dqb_[p], {}});
      dk_out.push_back({dkvb_[p], {{0, 1}, {0, b_}, {0, hkv_},
                                   {p * l_, (p + 1) * l_}, {0, d_}}});
      dv_out.push_back({dkvb_[p], {{1, 2}, {0, b_}, {0, hkv_},
                                   {p * l_, (p + 1) * l_}, {0, d_}}});
    }
    FromHeads(dq_done, dqu, h_, hp, dq_out);
    FromHeads(dkv_done, dku, hkv_, hkvp, dk_out);
    FromHeads(dkv_done, dvu, hkv_, hkvp, dv_out);
  }

  // Head-sharded `source` (device r: [B, heads / P, S, D] over its
  // operand) back to sequence-sharded `dest` (device p: [B, heads, L, D]):
  // row-major into blocks, one all-to-all, rows into place.
  void FromHeads(const std::vector<int>& deps,
                 const std::vector<BlockOperand>& source, int64_t heads,
                 int64_t per, const std::vector<BlockOperand>& dest) {
    const int64_t s = s_.seq_len, blk = b_ * per * l_ * d_;
    const int in = AddPlanTensor(plan_, {p_ * p_ * blk}, s_.dtype,
                                 v1::Initializer::KIND_ZEROS);
    const int out = AddPlanTensor(plan_, {p_ * p_ * blk}, s_.dtype,
                                  v1::Initializer::KIND_ZEROS);
    PerDevice inb, outb;
    std::vector<int> orders;
    for (int r = 0; r < p_; ++r) {
      inb.push_back(Buffer(in, r, {{r * p_ * blk, (r + 1) * p_ * blk}},
                           v1::Buffer::ROLE_SCRATCH));
      outb.push_back(Buffer(out, r, {{r * p_ * blk, (r + 1) * p_ * blk}},
                            v1::Buffer::ROLE_SCRATCH));
      std::vector<int64_t> order;  // blocks (p, b, hh, l) from (b, hh, s)
      for (int p = 0; p < p_; ++p) {
        for (int64_t b = 0; b < b_; ++b) {
          for (int64_t hh = 0; hh < per; ++hh) {
            for (int64_t l = 0; l < l_; ++l) {
              order.push_back((b * per + hh) * s + p * l_ + l);
            }
          }
        }
      }
      orders.push_back(AddCopy(r, kAttentionExchange, {deps[r]},
                               source[r].buffer, source[r].box, inb[r], {},
                               order, d_));
    }
    const int exchange = AddAllToAll(orders, inb, outb, blk);
    for (int p = 0; p < p_; ++p) {
      std::vector<int64_t> order;  // rows (b, h, l) of device p
      for (int64_t b = 0; b < b_; ++b) {
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t r = h / per, hh = h % per;
          for (int64_t l = 0; l < l_; ++l) {
            order.push_back(((r * b_ + b) * per + hh) * l_ + l);
          }
        }
      }
      AddCopy(p, kAttentionExchange, {exchange}, outb[p], {}, dest[p].buffer,
              dest[p].box, order, d_);
    }
  }

  // The all-to-all of 1-D tensors whose rank regions hold P blocks of
  // `blk` elements each (sender-major in, receiver-major out).
  int AddAllToAll(const std::vector<int>& deps, const PerDevice& in,
                  const PerDevice& out, int64_t blk) {
    v1::Step& step =
        AddStep(v1::Step::OP_ALL_TO_ALL, kAttentionExchange, deps);
    if (world_group_ < 0) {
      std::vector<int> ranks(p_);
      for (int r = 0; r < p_; ++r) ranks[r] = r;
      world_group_ = Group(ranks);
    }
    step.set_group(world_group_);
    for (int r = 0; r < p_; ++r) {
      Operand(step.add_inputs(), in[r]);
      Operand(step.add_outputs(), out[r]);
    }
    for (int64_t i = 0; i < int64_t{p_} * p_; ++i) step.add_counts(blk);
    step.set_bytes(p_ * blk * Size());
    return step.id();
  }

  // Sequence-sharded `source` (device p: [B, heads, L rows, D]) to
  // head-sharded [P, B, heads / P, S, D] (device r: its heads, every row).
  PerDevice ToHeads(const PerDevice& source, int64_t heads, int64_t per) {
    const int64_t s = s_.seq_len, blk = b_ * per * l_ * d_;
    const int in = AddPlanTensor(plan_, {p_ * p_ * blk}, s_.dtype,
                                 v1::Initializer::KIND_ZEROS);
    const int out = AddPlanTensor(plan_, {p_ * p_ * blk}, s_.dtype,
                                  v1::Initializer::KIND_ZEROS);
    const int full = AddPlanTensor(plan_, {p_, b_, per, s, d_}, s_.dtype,
                                   v1::Initializer::KIND_ZEROS);
    PerDevice inb, outb, fullb;
    std::vector<int> orders;
    for (int p = 0; p < p_; ++p) {
      inb.push_back(Buffer(in, p, {{p * p_ * blk, (p + 1) * p_ * blk}},
                           v1::Buffer::ROLE_SCRATCH));
      outb.push_back(Buffer(out, p, {{p * p_ * blk, (p + 1) * p_ * blk}},
                            v1::Buffer::ROLE_SCRATCH));
      fullb.push_back(Buffer(full, p, {{p, p + 1}, {0, b_}, {0, per},
                                       {0, s}, {0, d_}},
                             v1::Buffer::ROLE_SCRATCH));
      std::vector<int64_t> order;  // blocks (r, b, hh, l) from (b, h, l)
      for (int r = 0; r < p_; ++r) {
        for (int64_t b = 0; b < b_; ++b) {
          for (int64_t hh = 0; hh < per; ++hh) {
            for (int64_t l = 0; l < l_; ++l) {
              order.push_back((b * heads + r * per + hh) * l_ + l);
            }
          }
        }
      }
      orders.push_back(AddCopy(p, kAttentionExchange, {}, source[p], {},
                               inb[p], {}, order, d_));
    }
    const int exchange = AddAllToAll(orders, inb, outb, blk);
    heads_ready_.resize(p_);
    for (int r = 0; r < p_; ++r) {
      std::vector<int64_t> order;  // rows (b, hh, s) from blocks (s', b, hh, l)
      for (int64_t b = 0; b < b_; ++b) {
        for (int64_t hh = 0; hh < per; ++hh) {
          for (int64_t row = 0; row < s; ++row) {
            const int64_t from = row / l_, l = row % l_;
            order.push_back(((from * b_ + b) * per + hh) * l_ + l);
          }
        }
      }
      heads_ready_[r].push_back(AddCopy(r, kAttentionExchange, {exchange},
                                        outb[r], {}, fullb[r], {}, order,
                                        d_));
    }
    return fullb;
  }

  const AttentionShape& s_;
  const std::vector<int>& devices_;
  const int p_;
  const int64_t b_, h_, hkv_, l_, d_;
  AttentionAlgorithm algorithm_;
  v1::Plan plan_;
  std::vector<Box> boxes_;
  std::map<std::pair<int, int>, int> pairs_;
  int world_group_ = -1;
  int q_ = 0, k_ = 0, v_ = 0, o_ = 0, st_ = 0;
  PerDevice qb_, kb_, vb_, ob_, stb_;
  std::vector<int> copy_k_;
  PerDevice dob_, dqb_, dkvb_;
  std::vector<int> finished_;  // the forward's finish step per device
  std::vector<std::vector<int>> heads_ready_;
};

}  // namespace

int64_t AttentionShape::LayoutPosition(int64_t r) const {
  const int64_t l = rows();
  const int p = static_cast<int>(r / l);
  const int64_t i = r % l;
  switch (layout) {
    case AttentionLayout::kZigzag: {
      const int64_t half = l / 2;
      return i < half ? p * half + i
                      : (2 * int64_t{ranks} - 1 - p) * half + (i - half);
    }
    case AttentionLayout::kStriped:
      return i * ranks + p;
    case AttentionLayout::kContiguous:
      break;
  }
  return r;
}

bool AttentionShape::BlockVisible(int p, int q) const {
  if (!causal) return true;
  // Visible when some key position <= some query position: the smallest
  // key of q's block against the largest query of p's.
  int64_t min_key = seq_len, max_query = -1;
  for (int64_t i = 0; i < rows(); ++i) {
    min_key = std::min(min_key, LayoutPosition(q * rows() + i));
    max_query = std::max(max_query, LayoutPosition(p * rows() + i));
  }
  return min_key <= max_query;
}

std::string AttentionLayoutName(AttentionLayout layout) {
  switch (layout) {
    case AttentionLayout::kZigzag:
      return "zigzag";
    case AttentionLayout::kStriped:
      return "striped";
    case AttentionLayout::kContiguous:
      break;
  }
  return "contiguous";
}

std::string AttentionAlgorithmName(AttentionAlgorithm algorithm) {
  switch (algorithm) {
    case AttentionAlgorithm::kRsa:
      return "rsa";
    case AttentionAlgorithm::kRing:
      return "ring";
    case AttentionAlgorithm::kUlysses:
      return "ulysses";
    case AttentionAlgorithm::kAuto:
      break;
  }
  return "auto";
}

absl::StatusOr<AttentionLayout> AttentionLayoutFromName(
    absl::string_view name) {
  if (name.empty() || name == "contiguous") return AttentionLayout::kContiguous;
  if (name == "zigzag") return AttentionLayout::kZigzag;
  if (name == "striped") return AttentionLayout::kStriped;
  return absl::InvalidArgumentError(
      absl::StrCat("attention.layout ", QuotePrefix(name),
                   " is not one of contiguous, zigzag, striped"));
}

absl::StatusOr<AttentionAlgorithm> AttentionAlgorithmFromName(
    absl::string_view name) {
  if (name.empty() || name == "auto") return AttentionAlgorithm::kAuto;
  if (name == "rsa") return AttentionAlgorithm::kRsa;
  if (name == "ring") return AttentionAlgorithm::kRing;
  if (name == "ulysses") return AttentionAlgorithm::kUlysses;
  return absl::InvalidArgumentError(
      absl::StrCat("attention.algorithm ", QuotePrefix(name),
                   " is not one of rsa, ring, ulysses, auto"));
}

absl::StatusOr<v1::Plan> LowerAttention(const AttentionShape& shape,
                                        AttentionAlgorithm algorithm,
                                        const std::vector<int>& devices) {
  if (algorithm == AttentionAlgorithm::kAuto) {
    return absl::InvalidArgumentError(
        "LowerAttention needs an algorithm: rsa, ring or ulysses");
  }
  const int p = shape.ranks;
  if (p < 1 || static_cast<int>(devices.size()) != p ||
      shape.seq_len % p != 0 || shape.heads % shape.kv_heads != 0 ||
      (shape.layout == AttentionLayout::kZigzag && shape.rows() % 2 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention shape does not fit: seq_len ", shape.seq_len, ", heads ",
        shape.heads, ", kv_heads ", shape.kv_heads, " over ", devices.size(),
        " devices (ranks ", p, ")"));
  }
  if (algorithm == AttentionAlgorithm::kUlysses &&
      (shape.heads % p != 0 || shape.kv_heads % p != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ulysses needs heads (", shape.heads, ") and kv_heads (",
        shape.kv_heads, ") divisible by the group size ", p));
  }
  return AttentionBuilder(shape, algorithm, devices).Build();
}

}  // namespace meshcast
