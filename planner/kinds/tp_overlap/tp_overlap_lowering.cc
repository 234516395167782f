#include "planner/kinds/tp_overlap/tp_overlap_lowering.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/ir/plan_building.h"
#include "planner/ir/spec_convert.h"
#include "planner/kinds/tp_overlap/tp_overlap_cost.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

int64_t Mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }

// Builds one plan: tensors with initializers, buffers, groups and steps,
// ids = positions.
class PlanBuilder {
 public:
  PlanBuilder(const TpShape& shape, const std::vector<int>& devices,
              const TpCostModel& model)
      : shape_(shape), devices_(devices), model_(model) {
    plan_.set_kind("tp_overlap");
  }

  int tp() const { return static_cast<int>(devices_.size()); }
  int64_t kr() const { return shape_.k / tp(); }
  int64_t element() const { return DTypeSize(shape_.dtype); }

  int AddTensor(std::vector<int64_t> shape, v1::Initializer::Kind init,
                uint64_t seed = 0) {
    return AddPlanTensor(plan_, shape, shape_.dtype, init, seed);
  }

  int AddBuffer(int tensor, int rank, const Box& box, v1::Buffer::Role role) {
    return AddPlanBuffer(plan_, tensor, devices_[rank], box, role);
  }

  int AddGroup(const std::vector<int>& devices) {
    v1::CommGroup* group = plan_.add_groups();
    group->set_id(plan_.groups_size() - 1);
    for (int d : devices) group->add_devices(d);
    return group->id();
  }

  v1::Step* AddStep(v1::Step::Op op, int stage, const std::vector<int>& deps) {
    v1::Step* step = plan_.add_steps();
    step->set_id(plan_.steps_size() - 1);
    step->set_op(op);
    step->set_stage(stage);
    for (int d : deps) step->add_deps(d);
    return step;
  }

  // C[out] = A_r[rows, :] B_r on rank r; `out` a whole buffer or a slice.
  int Gemm(int rank, int a_buffer, int b_buffer, Interval rows, int out,
           const Box& out_slice, int stage, const std::vector<int>& deps) {
    v1::Step* gemm = AddStep(v1::Step::OP_COMPUTE, stage, deps);
    gemm->set_device(devices_[rank]);
    v1::Operand* a = gemm->add_inputs();
    a->set_buffer(a_buffer);
    if (rows.begin != 0 || rows.end != shape_.m) {
      BoxToProto({rows, {rank * kr(), (rank + 1) * kr()}}, a->mutable_slice());
    }
    gemm->add_inputs()->set_buffer(b_buffer);
    v1::Operand* c = gemm->add_outputs();
    c->set_buffer(out);
    if (!out_slice.empty()) BoxToProto(out_slice, c->mutable_slice());
    v1::GemmAttrs* attrs = gemm->mutable_compute()->mutable_gemm();
    attrs->set_m(rows.size());
    attrs->set_n(shape_.n);
    attrs->set_k(kr());
    attrs->set_alpha(1);
    // The effective operation count (tp_overlap_cost.h): what the
    // simulator charges, the small-chunk efficiency included.
    gemm->set_flops(EffectiveGemmFlops(rows.size(), shape_.n, kr(), model_));
    return gemm->id();
  }

  // out = in0 + in1 on rank r (elementwise, row-major over the slices).
  int Add(int rank, int in0, const Box& in0_slice, int in1,
          const Box& in1_slice, int out, const Box& out_slice, int stage,
          const std::vector<int>& deps) {
    v1::Step* add = AddStep(v1::Step::OP_COMPUTE, stage, deps);
    add->set_device(devices_[rank]);
    AddOperand(add->add_inputs(), in0, in0_slice);
    AddOperand(add->add_inputs(), in1, in1_slice);
    AddOperand(add->add_outputs(), out, out_slice);
    add->mutable_compute()->mutable_elementwise()->set_kind(
        v1::ElementwiseAttrs::KIND_ADD);
    add->set_flops(static_cast<double>(NumElements(out_slice)));
    return add->id();
  }

  // OP_SEND_RECV in operand form: `from` (on the group's rank 0) to `to`
  // (on its rank 1), the same element count.
  int SendRecv(int group, int from, const Box& from_slice, int to,
               const Box& to_slice, int stage, const std::vector<int>& deps) {
    v1::Step* step = AddStep(v1::Step::OP_SEND_RECV, stage, deps);
    step->set_group(group);
    AddOperand(step->add_inputs(), from, from_slice);
    AddOperand(step->add_outputs(), to, to_slice);
    step->set_bytes(NumElements(from_slice) * element());
    return step->id();
  }

  // One reduce-scatter / all-reduce of tensor `in` ([tp] + OUT's shape)
  // over group `group`.
  int Collective(int group, int in, const std::vector<int>& inputs,
                 const std::vector<int>& outputs, int64_t rows, int stage,
                 const std::vector<int>& deps) {
    v1::Step* step = AddStep(shape_.all_reduce ? v1::Step::OP_ALL_REDUCE
                                               : v1::Step::OP_REDUCE_SCATTER,
                             stage, deps);
    step->set_group(group);
    step->set_tensor(in);
    step->set_bytes(rows * shape_.n * element());
    step->set_reduction(v1::REDUCTION_SUM);
    for (int b : inputs) step->add_inputs()->set_buffer(b);
    for (int b : outputs) step->add_outputs()->set_buffer(b);
    return step->id();
  }

  v1::Plan& plan() { return plan_; }

 private:
  static void AddOperand(v1::Operand* operand, int buffer, const Box& slice) {
    operand->set_buffer(buffer);
    BoxToProto(slice, operand->mutable_slice());
  }

  const TpShape& shape_;
  const std::vector<int>& devices_;
  const TpCostModel& model_;
  v1::Plan plan_;
};

// What every mode shares: A, B, the tp-group, stages 0 and 1.
struct Common {
  int all_group = 0;
  std::vector<int> a, b;  // A_r, B_r buffers
  int comm_alone = 0;     // the stage-1 collective
};

// Rank r's rows of a reduce-scattered block of `rows` rows from `first`.
Interval PieceOf(int64_t first, int64_t rows, int tp, int r) {
  return {first + r * (rows / tp), first + (r + 1) * (rows / tp)};
}

Common AddCommon(PlanBuilder& p, const TpShape& shape,
                 const std::vector<int>& devices) {
  const int tp = p.tp();
  const int64_t m = shape.m, n = shape.n, k = shape.k, kr = p.kr();
  Common c;
  const int a = p.AddTensor({m, k}, v1::Initializer::KIND_RANDOM, kTpSeedA);
  const int b = p.AddTensor({k, n}, v1::Initializer::KIND_RANDOM, kTpSeedB);
  const int g = p.AddTensor({tp, m, n}, v1::Initializer::KIND_ZEROS);
  const int out = p.AddTensor({m, n}, v1::Initializer::KIND_ZEROS);
  c.all_group = p.AddGroup(devices);
  std::vector<int> g_buffers, out_buffers, gemms;
  for (int r = 0; r < tp; ++r) {
    c.a.push_back(p.AddBuffer(a, r, {{0, m}, {r * kr, (r + 1) * kr}},
                              v1::Buffer::ROLE_SOURCE));
    c.b.push_back(p.AddBuffer(b, r, {{r * kr, (r + 1) * kr}, {0, n}},
                              v1::Buffer::ROLE_SOURCE));
    g_buffers.push_back(p.AddBuffer(g, r, {{r, r + 1}, {0, m}, {0, n}},
                                    v1::Buffer::ROLE_SCRATCH));
    const Box piece = shape.all_reduce ? Box{{0, m}, {0, n}}
                                       : Box{PieceOf(0, m, tp, r), {0, n}};
    out_buffers.push_back(p.AddBuffer(out, r, piece, v1::Buffer::ROLE_SCRATCH));
  }
  for (int r = 0; r < tp; ++r) {
    gemms.push_back(p.Gemm(r, c.a[r], c.b[r], {0, m}, g_buffers[r], {},
                           kStageGemmAlone, {}));
  }
  c.comm_alone = p.Collective(c.all_group, g, g_buffers, out_buffers, m,
                              kStageCommAlone, gemms);
  return c;
}

void LowerChunked(PlanBuilder& p, const TpShape& shape, int chunks,
                  const Common& c, std::vector<TpOutput>& outputs) {
  const int tp = p.tp();
  const int64_t n = shape.n;
  // reduce_scatter: chunks of whole tp-row units, so every rank's piece of
  // a chunk is whole.
  std::vector<Interval> blocks;
  if (shape.all_reduce) {
    blocks = SplitRows(0, shape.m, chunks);
  } else {
    for (const Interval& units : SplitRows(0, shape.m / tp, chunks)) {
      blocks.push_back({units.begin * tp, units.end * tp});
    }
  }
  std::vector<int> last_gemm(tp, c.comm_alone);
  int last_collective = c.comm_alone;
  for (const Interval& rows : blocks) {
    const int64_t count = rows.size();
    const int partial =
        p.AddTensor({tp, count, n}, v1::Initializer::KIND_ZEROS);
    const int y = p.AddTensor({count, n}, v1::Initializer::KIND_ZEROS);
    outputs.push_back({y, rows.begin});
    std::vector<int> inputs, outs, deps;
    for (int r = 0; r < tp; ++r) {
      inputs.push_back(p.AddBuffer(partial, r, {{r, r + 1}, {0, count}, {0, n}},
                                   v1::Buffer::ROLE_SCRATCH));
      const Box piece = shape.all_reduce
                            ? Box{{0, count}, {0, n}}
                            : Box{PieceOf(0, count, tp, r), {0, n}};
      outs.push_back(p.AddBuffer(y, r, piece, v1::Buffer::ROLE_DESTINATION));
      last_gemm[r] = p.Gemm(r, c.a[r], c.b[r], rows, inputs[r], {},
                            kStageModeGemm, {last_gemm[r]});
      deps.push_back(last_gemm[r]);
    }
    deps.push_back(last_collective);
    last_collective = p.Collective(c.all_group, partial, inputs, outs, count,
                                   kStageModeComm, deps);
  }
}

// The fused ring (see the header).
class FusedLowering {
 public:
  FusedLowering(PlanBuilder& p, const TpShape& shape, int j, const Common& c,
                const TpCostModel& model)
      : p_(p), shape_(shape), tp_(p.tp()), j_(j), c_(c), model_(model) {}

  void Lower(const std::vector<int>& devices, std::vector<TpOutput>& outputs) {
    const int64_t m = shape_.m, n = shape_.n;
    // reduce_scatter: m % tp == 0, so these are the ranks' equal pieces.
    pieces_ = SplitRows(0, m, tp_);
    partial_ = p_.AddTensor({tp_, m, n}, v1::Initializer::KIND_ZEROS);
    acc_ = tp_ > 2 ? p_.AddTensor({tp_ - 2, m, n}, v1::Initializer::KIND_ZEROS)
                   : -1;
    y_ = p_.AddTensor({m, n}, v1::Initializer::KIND_ZEROS);
    outputs.push_back({y_, 0});
    for (int r = 0; r < tp_; ++r) {
      links_.push_back(p_.AddGroup({devices[r], devices[(r + 1) % tp_]}));
      link_tail_.push_back(c_.comm_alone);
      p_buffers_.push_back(p_.AddBuffer(
          partial_, r, {{r, r + 1}, {0, m}, {0, n}}, v1::Buffer::ROLE_SCRATCH));
      const Box mine =
          shape_.all_reduce ? Box{{0, m}, {0, n}} : Box{pieces_[r], {0, n}};
      y_buffers_.push_back(
          p_.AddBuffer(y_, r, mine, v1::Buffer::ROLE_DESTINATION));
    }
    EmitGemms();
    EmitReduceScatterRing();
    if (shape_.all_reduce) EmitAllGatherRing();
  }

 private:
  Interval Sub(int piece, int q) const {
    return SplitRows(pieces_[piece].begin, pieces_[piece].size(), j_)[q];
  }
  Box PBox(int r, Interval rows) const {
    return {{r, r + 1}, rows, {0, shape_.n}};
  }
  Box AccBox(int s, Interval rows) const {
    return {{s, s + 1}, rows, {0, shape_.n}};
  }
  Box YBox(Interval rows) const { return {rows, {0, shape_.n}}; }

  // Rank r: pieces r-1, r-2, ..., r; each sub-chunk's tiles chained.
  void EmitGemms() {
    tiles_.assign(tp_, std::vector<std::vector<std::vector<int>>>(
                           tp_, std::vector<std::vector<int>>(j_)));
    for (int r = 0; r < tp_; ++r) {
      int last = c_.comm_alone;
      for (int pos = 0; pos < tp_; ++pos) {
        const int c = static_cast<int>(Mod(r - 1 - pos, tp_));
        for (int q = 0; q < j_; ++q) {
          const Interval sub = Sub(c, q);
          for (const Interval& tile :
               SplitRows(sub.begin, sub.size(), model_.TileCount(sub.size()))) {
            last = p_.Gemm(r, c_.a[r], c_.b[r], tile, p_buffers_[r],
                           PBox(r, tile), kStageModeGemm, {last});
            tiles_[r][c][q].push_back(last);
          }
        }
      }
    }
  }

  // Chains a p2p step on link r -> r+1 after the link's previous one.
  std::vector<int> OnLink(int r, std::vector<int> deps) {
    deps.push_back(link_tail_[r]);
    return deps;
  }

  void EmitReduceScatterRing() {
    // last_add[r][q]: rank r's addition of sub-chunk q at the previous
    // ring step. Every step allocates, per receiving rank, one receive and
    // one running-sum buffer over the whole piece; sub-chunks are slices.
    std::vector<std::vector<int>> last_add(tp_, std::vector<int>(j_, -1));
    for (int s = 0; s + 1 < tp_; ++s) {
      std::vector<std::vector<int>> adds(tp_, std::vector<int>(j_));
      for (int r = 0; r < tp_; ++r) {
        const int to = (r + 1) % tp_;
        const int c = static_cast<int>(Mod(r - s - 1, tp_));
        const Interval piece = pieces_[c];
        // What r sends: P[r] (s = 0) or ACC[s-1], piece c; r+1 receives it
        // into a scratch buffer of the same tensor and coordinates.
        const int tensor = s == 0 ? partial_ : acc_;
        const int row = s == 0 ? r : s - 1;
        const Box piece_box = {{row, row + 1}, piece, {0, shape_.n}};
        const int source = s == 0 ? p_buffers_[r] : acc_buffers_[r];
        const int receive =
            p_.AddBuffer(tensor, to, piece_box, v1::Buffer::ROLE_SCRATCH);
        const bool last_step = s + 2 == tp_;
        const int sum = last_step ? y_buffers_[to]
                                  : p_.AddBuffer(acc_, to, AccBox(s, piece),
                                                 v1::Buffer::ROLE_SCRATCH);
        next_acc_[to] = sum;
        for (int q = 0; q < j_; ++q) {
          const Interval rows = Sub(c, q);
          const Box moved = {{row, row + 1}, rows, {0, shape_.n}};
          const std::vector<int> ready =
              s == 0 ? tiles_[r][c][q] : std::vector<int>{last_add[r][q]};
          const int send = p_.SendRecv(links_[r], source, moved, receive, moved,
                                       kStageModeComm, OnLink(r, ready));
          link_tail_[r] = send;
          std::vector<int> deps = tiles_[to][c][q];
          deps.push_back(send);
          adds[to][q] = p_.Add(
              to, receive, moved, p_buffers_[to], PBox(to, rows), sum,
              last_step ? YBox(rows) : AccBox(s, rows), kStageModeComm, deps);
        }
      }
      last_add = std::move(adds);
      acc_buffers_ = next_acc_;
    }
    final_adds_ = std::move(last_add);
  }

  // all_reduce: piece r - s of rank r's Y to rank r+1's Y, s = 0..tp-2.
  void EmitAllGatherRing() {
    std::vector<std::vector<int>> arrived = final_adds_;  // [rank][q]
    for (int s = 0; s + 1 < tp_; ++s) {
      std::vector<std::vector<int>> next(tp_, std::vector<int>(j_));
      for (int r = 0; r < tp_; ++r) {
        const int to = (r + 1) % tp_;
        const int c = static_cast<int>(Mod(r - s, tp_));
        for (int q = 0; q < j_; ++q) {
          const Box rows = YBox(Sub(c, q));
          const int send =
              p_.SendRecv(links_[r], y_buffers_[r], rows, y_buffers_[to], rows,
                          kStageModeComm, OnLink(r, {arrived[r][q]}));
          link_tail_[r] = send;
          next[to][q] = send;
        }
      }
      arrived = std::move(next);
    }
  }

  PlanBuilder& p_;
  const TpShape& shape_;
  const int tp_;
  const int j_;
  const Common& c_;
  const TpCostModel& model_;
  std::vector<Interval> pieces_;
  int partial_ = 0, acc_ = -1, y_ = 0;
  std::vector<int> links_, link_tail_, p_buffers_, y_buffers_;
  std::vector<int> acc_buffers_ = std::vector<int>(tp_, -1);
  std::vector<int> next_acc_ = std::vector<int>(tp_, -1);
  // tiles_[r][piece][q]: rank r's GEMM tile steps of sub-chunk q.
  std::vector<std::vector<std::vector<std::vector<int>>>> tiles_;
  std::vector<std::vector<int>> final_adds_;
};

}  // namespace

int TpCostModel::TileCount(int64_t rows) const {
  const int64_t by_size = min_tile_rows > 0 ? rows / min_tile_rows : rows;
  return static_cast<int>(
      std::clamp<int64_t>(by_size, 1, std::max(1, max_tiles_per_chunk)));
}

TpCostModel TpCostModel::ForDeviceFlops(double device_flops) {
  TpCostModel model;
  if (device_flops >= 1e13) {
    model.half_rate_rows = 128;
    model.min_tile_rows = 1024;
  }
  return model;
}

absl::string_view TpModeName(TpMode mode) {
  switch (mode) {
    case TpMode::kSequential:
      return "sequential";
    case TpMode::kChunked:
      return "chunked";
    case TpMode::kFused:
      return "fused";
    case TpMode::kAuto:
      return "auto";
  }
  return "?";
}

std::string TpStrategyName(TpMode mode, int chunks) {
  if (mode == TpMode::kSequential) return "sequential";
  return absl::StrCat(TpModeName(mode), "/", chunks);
}

std::vector<Interval> SplitRows(int64_t first, int64_t rows, int parts) {
  std::vector<Interval> out;
  if (parts < 1) return out;
  const int64_t base = rows / parts, extra = rows % parts;
  int64_t begin = first;
  for (int i = 0; i < parts; ++i) {
    const int64_t end = begin + base + (i < extra ? 1 : 0);
    out.push_back({begin, end});
    begin = end;
  }
  return out;
}

absl::Status CheckTpChunks(const TpShape& shape, int tp, TpMode mode,
                           int chunks) {
  switch (mode) {
    case TpMode::kSequential:
      if (chunks != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tp_overlap.chunks is ", chunks,
            "; mode sequential runs the GEMM as one chunk: allowed 0 or 1"));
      }
      return absl::OkStatus();
    case TpMode::kChunked: {
      const int64_t most = shape.all_reduce ? shape.m : shape.m / tp;
      if (chunks < 1 || chunks > most) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tp_overlap.chunks is ", chunks,
            "; mode chunked allows 0 (auto) "
            "or 1..",
            most,
            shape.all_reduce
                ? " (at most one chunk per row of m)"
                : " (reduce_scatter chunks are whole multiples of tp rows: "
                  "at most m / tp)"));
      }
      return absl::OkStatus();
    }
    case TpMode::kFused: {
      if (tp < 2) {
        return absl::InvalidArgumentError(
            "tp_overlap.mode fused needs a ring of at least 2 ranks in "
            "tp_overlap.mesh; allowed modes for 1 rank: sequential, chunked");
      }
      const int64_t most = shape.m / tp;
      if (chunks % tp != 0 || chunks / tp < 1 || chunks / tp > most) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tp_overlap.chunks is ", chunks, "; mode fused allows 0 (auto) or ",
            tp, " x j chunks (j sub-chunks per ring piece of the ", tp,
            " ranks) with 1 <= j <= ", most, " (floor(m / tp))"));
      }
      return absl::OkStatus();
    }
    case TpMode::kAuto:
      return absl::InvalidArgumentError(
          absl::StrCat("tp_overlap.chunks is ", chunks,
                       "; mode auto picks the chunk count itself: allowed 0"));
  }
  return absl::InvalidArgumentError("tp_overlap.mode is unknown");
}

std::vector<int> TpCandidateChunks(const TpShape& shape, int tp, TpMode mode) {
  std::vector<int> tries;
  switch (mode) {
    case TpMode::kSequential:
      tries = {1};
      break;
    case TpMode::kChunked:
      tries = {2, 4, 8, 16};
      break;
    case TpMode::kFused:
      for (int j : {1, 2, 4, 8}) tries.push_back(tp * j);
      break;
    case TpMode::kAuto:
      break;
  }
  std::vector<int> out;
  for (int chunks : tries) {
    if (CheckTpChunks(shape, tp, mode, chunks).ok()) out.push_back(chunks);
  }
  return out;
}

absl::StatusOr<TpLowering> LowerTpOverlap(const TpShape& shape, TpMode mode,
                                          int chunks,
                                          const std::vector<int>& devices,
                                          const TpCostModel& model) {
  const int tp = static_cast<int>(devices.size());
  if (tp < 1 || shape.k % tp != 0 || (!shape.all_reduce && shape.m % tp != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp_overlap: ", tp, " ranks do not divide k ", shape.k,
                     shape.all_reduce ? "" : " and m", " (m = ", shape.m, ")"));
  }
  RETURN_IF_ERROR(CheckTpChunks(shape, tp, mode, chunks));
  PlanBuilder p(shape, devices, model);
  p.plan().set_strategy(TpStrategyName(mode, chunks));
  TpLowering out;
  const Common common = AddCommon(p, shape, devices);
  out.comm_alone_step = common.comm_alone;
  if (mode == TpMode::kFused) {
    FusedLowering(p, shape, chunks / tp, common, model)
        .Lower(devices, out.outputs);
  } else {
    LowerChunked(p, shape, chunks, common, out.outputs);
  }
  out.plan = std::move(p.plan());
  return out;
}

}  // namespace meshcast
