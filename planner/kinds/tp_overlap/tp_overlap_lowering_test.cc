#include "planner/kinds/tp_overlap/tp_overlap_lowering.h"

#include <cmath>
#include <functional>
#include <queue>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/ir/plan_hazards.h"
#include "planner/ir/spec_convert.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// A test-only interpreter of the plan IR on float64 host arrays: every
// buffer is an array over its box; steps run in a topological order of
// their deps (plan.proto semantics), so a missing dependency or a read of a
// region nobody wrote (NaN) shows up in the output.

// Deterministic input values: a function of (tensor, global flat index).
double InputValue(int tensor, int64_t flat) {
  return std::sin(0.7 * static_cast<double>(flat) + 1.3 * tensor + 0.1);
}

void ForEachCoord(const Box& box,
                  const std::function<void(const std::vector<int64_t>&)>& fn) {
  if (IsEmpty(box)) return;
  std::vector<int64_t> coord;
  for (const Interval& i : box) coord.push_back(i.begin);
  while (true) {
    fn(coord);
    int d = static_cast<int>(box.size()) - 1;
    while (d >= 0 && ++coord[d] == box[d].end) {
      coord[d] = box[d].begin;
      --d;
    }
    if (d < 0) return;
  }
}

int64_t FlatIndex(const Box& box, const std::vector<int64_t>& coord) {
  int64_t flat = 0;
  for (size_t d = 0; d < box.size(); ++d) {
    flat = flat * box[d].size() + (coord[d] - box[d].begin);
  }
  return flat;
}

Box FullBox(const v1::TensorSpec& tensor) {
  Box box;
  for (int64_t extent : tensor.shape()) box.push_back({0, extent});
  return box;
}

class Interpreter {
 public:
  explicit Interpreter(const v1::Plan& plan) : plan_(plan) {
    for (const v1::Buffer& b : plan.buffers()) {
      Box box = BoxFromProto(b.box());
      std::vector<double> data(NumElements(box),
                               std::numeric_limits<double>::quiet_NaN());
      if (b.role() == v1::Buffer::ROLE_SOURCE) {
        const Box full = FullBox(plan.tensors(b.tensor()));
        int64_t i = 0;
        ForEachCoord(box, [&](const std::vector<int64_t>& c) {
          data[i++] = InputValue(b.tensor(), FlatIndex(full, c));
        });
      }
      buffers_[b.id()] = {&b, std::move(box), std::move(data)};
    }
    for (const v1::CommGroup& g : plan.groups()) groups_[g.id()] = &g;
  }

  // Runs every step; ready steps by lowest (or highest) position first.
  void Run(bool latest_first) {
    const int n = plan_.steps_size();
    std::vector<int> missing(n);
    std::vector<std::vector<int>> users(n);
    for (int i = 0; i < n; ++i) {
      for (int dep : plan_.steps(i).deps()) {
        ASSERT_GE(dep, 0);
        ASSERT_LT(dep, i) << "step " << i << " depends forward on " << dep;
        users[dep].push_back(i);
        ++missing[i];
      }
    }
    std::set<int> ready;
    for (int i = 0; i < n; ++i) {
      if (missing[i] == 0) ready.insert(i);
    }
    int done = 0;
    while (!ready.empty()) {
      const int i = latest_first ? *ready.rbegin() : *ready.begin();
      ready.erase(i);
      Execute(plan_.steps(i));
      ++done;
      for (int u : users[i]) {
        if (--missing[u] == 0) ready.insert(u);
      }
    }
    EXPECT_EQ(done, n);
  }

  struct HostBuffer {
    const v1::Buffer* meta = nullptr;
    Box box;
    std::vector<double> data;
  };
  const absl::flat_hash_map<int, HostBuffer>& buffers() const {
    return buffers_;
  }

 private:
  // Offsets into the buffer of the operand's elements, row-major over its
  // slice (or the whole buffer).
  std::vector<int64_t> Offsets(const v1::Operand& operand, Box* box_out) {
    const HostBuffer& b = buffers_.at(operand.buffer());
    const Box box =
        operand.slice().empty() ? b.box : BoxFromProto(operand.slice());
    EXPECT_TRUE(Contains(b.box, box))
        << BoxToString(box) << " not in " << BoxToString(b.box);
    std::vector<int64_t> out;
    ForEachCoord(box, [&](const std::vector<int64_t>& c) {
      out.push_back(FlatIndex(b.box, c));
    });
    if (box_out != nullptr) *box_out = box;
    return out;
  }
  std::vector<double> Read(const v1::Operand& operand) {
    std::vector<double> values;
    const std::vector<double>& data = buffers_.at(operand.buffer()).data;
    for (int64_t o : Offsets(operand, nullptr)) values.push_back(data[o]);
    return values;
  }
  void Write(const v1::Operand& operand, const std::vector<double>& values) {
    std::vector<double>& data = buffers_.at(operand.buffer()).data;
    const std::vector<int64_t> offsets = Offsets(operand, nullptr);
    ASSERT_EQ(offsets.size(), values.size());
    for (size_t i = 0; i < offsets.size(); ++i) data[offsets[i]] = values[i];
  }

  void Execute(const v1::Step& step) {
    switch (step.op()) {
      case v1::Step::OP_COMPUTE:
        return Compute(step);
      case v1::Step::OP_SEND_RECV: {
        const v1::CommGroup& g = *groups_.at(step.group());
        ASSERT_EQ(g.devices_size(), 2);
        EXPECT_EQ(buffers_.at(step.inputs(0).buffer()).meta->device(),
                  g.devices(0));
        EXPECT_EQ(buffers_.at(step.outputs(0).buffer()).meta->device(),
                  g.devices(1));
        return Write(step.outputs(0), Read(step.inputs(0)));
      }
      case v1::Step::OP_REDUCE_SCATTER:
      case v1::Step::OP_ALL_REDUCE:
        return Reduce(step);
      default:
        ADD_FAILURE() << "unexpected op " << v1::Step::Op_Name(step.op());
    }
  }

  void Compute(const v1::Step& step) {
    if (step.compute().has_gemm()) {
      const v1::GemmAttrs& g = step.compute().gemm();
      ASSERT_FALSE(g.trans_a() || g.trans_b());
      const std::vector<double> a = Read(step.inputs(0));
      const std::vector<double> b = Read(step.inputs(1));
      ASSERT_EQ(static_cast<int64_t>(a.size()), g.m() * g.k());
      ASSERT_EQ(static_cast<int64_t>(b.size()), g.k() * g.n());
      std::vector<double> c = g.accumulate()
                                  ? Read(step.outputs(0))
                                  : std::vector<double>(g.m() * g.n(), 0.0);
      const double alpha = g.alpha() == 0 ? 1 : g.alpha();
      for (int64_t i = 0; i < g.m(); ++i) {
        for (int64_t j = 0; j < g.n(); ++j) {
          double sum = 0;
          for (int64_t p = 0; p < g.k(); ++p) {
            sum += a[i * g.k() + p] * b[p * g.n() + j];
          }
          c[i * g.n() + j] += alpha * sum;
        }
      }
      return Write(step.outputs(0), c);
    }
    const v1::ElementwiseAttrs& e = step.compute().elementwise();
    std::vector<double> out = Read(step.inputs(0));
    if (e.kind() == v1::ElementwiseAttrs::KIND_ADD) {
      const std::vector<double> in1 = Read(step.inputs(1));
      ASSERT_EQ(in1.size(), out.size());
      for (size_t i = 0; i < out.size(); ++i) out[i] += in1[i];
    } else {
      for (double& x : out) x *= e.alpha();
    }
    Write(step.outputs(0), out);
  }

  // OUT[x] = sum_r IN[r, x]; all-reduce: outputs[r] = OUT; reduce-scatter:
  // outputs[r] = chunk r of OUT along dim 0 (ceil(L / n) rows).
  void Reduce(const v1::Step& step) {
    const int n = groups_.at(step.group())->devices_size();
    ASSERT_EQ(step.inputs_size(), n);
    ASSERT_EQ(step.outputs_size(), n);
    const int in_tensor = buffers_.at(step.inputs(0).buffer()).meta->tensor();
    const int out_tensor = buffers_.at(step.outputs(0).buffer()).meta->tensor();
    const Box out_full = FullBox(plan_.tensors(out_tensor));
    std::vector<double> out(NumElements(out_full), 0.0);
    for (int r = 0; r < n; ++r) {
      Box box;
      Offsets(step.inputs(r), &box);
      Box row = out_full;
      row.insert(row.begin(), Interval{r, r + 1});
      ASSERT_EQ(BoxToString(box), BoxToString(row)) << "inputs[" << r << "]";
      EXPECT_EQ(buffers_.at(step.inputs(r).buffer()).meta->tensor(), in_tensor);
      const std::vector<double> in = Read(step.inputs(r));
      for (size_t i = 0; i < out.size(); ++i) out[i] += in[i];
    }
    const int64_t rows = out_full[0].end;
    const int64_t chunk = (rows + n - 1) / n;
    for (int r = 0; r < n; ++r) {
      Box box;
      Offsets(step.outputs(r), &box);
      if (step.op() == v1::Step::OP_REDUCE_SCATTER) {
        EXPECT_EQ(box[0].begin, std::min(rows, r * chunk));
        EXPECT_EQ(box[0].end, std::min(rows, (r + 1) * chunk));
      } else {
        EXPECT_EQ(BoxToString(box), BoxToString(out_full));
      }
      std::vector<double> values;
      ForEachCoord(box, [&](const std::vector<int64_t>& c) {
        values.push_back(out[FlatIndex(out_full, c)]);
      });
      Write(step.outputs(r), values);
    }
  }

  const v1::Plan& plan_;
  absl::flat_hash_map<int, HostBuffer> buffers_;
  absl::flat_hash_map<int, const v1::CommGroup*> groups_;
};

// ---------------------------------------------------------------------------

struct Case {
  TpMode mode;
  int chunks;
  int tp;
  bool all_reduce;
  int64_t m = 24, n = 5, k = 8;
};

std::string Name(const Case& c) {
  return absl::StrCat(TpStrategyName(c.mode, c.chunks), " tp=", c.tp,
                      c.all_reduce ? " all_reduce" : " reduce_scatter",
                      " m=", c.m);
}

std::vector<int> Devices(int tp) {
  std::vector<int> devices;
  for (int r = 0; r < tp; ++r) devices.push_back(10 + r);  // not 0..tp-1
  return devices;
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (int tp : {2, 4}) {
    for (bool ar : {false, true}) {
      cases.push_back({TpMode::kSequential, 1, tp, ar});
      for (int chunks : {2, 3, 6})
        cases.push_back({TpMode::kChunked, chunks, tp, ar});
      for (int j : {1, 2, 3}) cases.push_back({TpMode::kFused, tp * j, tp, ar});
    }
    // all_reduce with m not divisible by tp: uneven pieces.
    Case odd{TpMode::kFused, 2 * tp, tp, true};
    odd.m = 4 * tp + 3;
    cases.push_back(odd);
    Case odd_chunked{TpMode::kChunked, 5, tp, true};
    odd_chunked.m = 4 * tp + 3;
    cases.push_back(odd_chunked);
  }
  return cases;
}

absl::StatusOr<TpLowering> Lower(const Case& c, const TpCostModel& model = {}) {
  TpShape shape{c.m, c.n, c.k, DType::kFloat32, c.all_reduce};
  return LowerTpOverlap(shape, c.mode, c.chunks, Devices(c.tp), model);
}

// The lowering is right independently of any worker: every DESTINATION
// element equals the directly computed sum_r A_r B_r (1e-9 relative), in
// two different topological orders, and each rank holds exactly its rows.
TEST(TpOverlapLoweringTest, InterpretedOutputEqualsTheDirectProduct) {
  TpCostModel small_tiles;
  small_tiles.min_tile_rows = 1;  // several tiles per sub-chunk
  for (const Case& c : AllCases()) {
    SCOPED_TRACE(Name(c));
    absl::StatusOr<TpLowering> lowering = Lower(c, small_tiles);
    ASSERT_TRUE(lowering.ok()) << lowering.status();
    const v1::Plan& plan = lowering->plan;
    // A and B are tensors 0 and 1; the direct product over all of k.
    std::vector<double> want(c.m * c.n, 0.0), scale(c.m * c.n, 0.0);
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        for (int64_t p = 0; p < c.k; ++p) {
          const double term =
              InputValue(0, i * c.k + p) * InputValue(1, p * c.n + j);
          want[i * c.n + j] += term;
          scale[i * c.n + j] += std::abs(term);
        }
      }
    }
    absl::flat_hash_map<int, int64_t> first_row;
    for (const TpOutput& out : lowering->outputs) {
      first_row[out.tensor] = out.first_row;
    }
    for (bool latest_first : {false, true}) {
      Interpreter interpreter(plan);
      interpreter.Run(latest_first);
      // rows_of[device]: the output rows its DESTINATION buffers hold.
      absl::flat_hash_map<int, std::multiset<int64_t>> rows_of;
      int64_t checked = 0;
      for (const auto& [id, b] : interpreter.buffers()) {
        if (b.meta->role() != v1::Buffer::ROLE_DESTINATION) continue;
        ASSERT_TRUE(first_row.contains(b.meta->tensor()));
        const int64_t offset = first_row[b.meta->tensor()];
        int64_t i = 0;
        ForEachCoord(b.box, [&](const std::vector<int64_t>& coord) {
          const int64_t row = offset + coord[0];
          const double got = b.data[i++];
          const double w = want[row * c.n + coord[1]];
          EXPECT_NEAR(got, w, 1e-9 * (1 + scale[row * c.n + coord[1]]))
              << "buffer " << id << " row " << row << " col " << coord[1];
          if (coord[1] == 0) rows_of[b.meta->device()].insert(row);
          ++checked;
        });
      }
      EXPECT_EQ(checked, c.all_reduce ? c.tp * c.m * c.n : c.m * c.n);
      std::multiset<int64_t> all;
      for (int r = 0; r < c.tp; ++r) {
        const std::multiset<int64_t>& rows = rows_of[Devices(c.tp)[r]];
        EXPECT_EQ(static_cast<int64_t>(rows.size()),
                  c.all_reduce ? c.m : c.m / c.tp);
        all.insert(rows.begin(), rows.end());
      }
      for (int64_t row = 0; row < c.m; ++row) {
        EXPECT_EQ(static_cast<int64_t>(all.count(row)), c.all_reduce ? c.tp : 1)
            << "row " << row;
      }
    }
  }
}

// Every mode's plan is a well-formed DAG: ids are positions, deps point
// back, every buffer and group exists, compute runs where its operands
// live, a send/recv has a group of two from its input's device to its
// output's with equal element counts and dtypes, and bytes match.
TEST(TpOverlapLoweringTest, EveryModeIsAWellFormedDag) {
  for (const Case& c : AllCases()) {
    SCOPED_TRACE(Name(c));
    absl::StatusOr<TpLowering> lowering = Lower(c);
    ASSERT_TRUE(lowering.ok()) << lowering.status();
    const v1::Plan& plan = lowering->plan;
    EXPECT_TRUE(CheckPlanHazards(plan).ok()) << CheckPlanHazards(plan);
    EXPECT_EQ(plan.kind(), "tp_overlap");
    EXPECT_EQ(plan.strategy(), TpStrategyName(c.mode, c.chunks));
    ASSERT_EQ(plan.tensor_inits_size(), plan.tensors_size());
    for (int i = 0; i < plan.buffers_size(); ++i) {
      ASSERT_EQ(plan.buffers(i).id(), i);
      ASSERT_LT(plan.buffers(i).tensor(), plan.tensors_size());
      EXPECT_TRUE(Contains(FullBox(plan.tensors(plan.buffers(i).tensor())),
                           BoxFromProto(plan.buffers(i).box())));
    }
    for (int i = 0; i < plan.groups_size(); ++i) {
      ASSERT_EQ(plan.groups(i).id(), i);
    }
    const auto elements = [&](const v1::Operand& o) {
      return NumElements(o.slice().empty()
                             ? BoxFromProto(plan.buffers(o.buffer()).box())
                             : BoxFromProto(o.slice()));
    };
    for (int i = 0; i < plan.steps_size(); ++i) {
      const v1::Step& step = plan.steps(i);
      ASSERT_EQ(step.id(), i);
      for (int dep : step.deps()) EXPECT_LT(dep, i);
      for (const auto* operands : {&step.inputs(), &step.outputs()}) {
        for (const v1::Operand& o : *operands) {
          ASSERT_GE(o.buffer(), 0);
          ASSERT_LT(o.buffer(), plan.buffers_size());
        }
      }
      if (step.op() == v1::Step::OP_COMPUTE) {
        for (const auto* operands : {&step.inputs(), &step.outputs()}) {
          for (const v1::Operand& o : *operands) {
            EXPECT_EQ(plan.buffers(o.buffer()).device(), step.device());
          }
        }
        continue;
      }
      ASSERT_LT(step.group(), plan.groups_size());
      if (step.op() == v1::Step::OP_SEND_RECV) {
        const v1::CommGroup& g = plan.groups(step.group());
        ASSERT_EQ(g.devices_size(), 2);
        ASSERT_EQ(step.inputs_size(), 1);
        ASSERT_EQ(step.outputs_size(), 1);
        const v1::Buffer& from = plan.buffers(step.inputs(0).buffer());
        const v1::Buffer& to = plan.buffers(step.outputs(0).buffer());
        EXPECT_EQ(from.device(), g.devices(0));
        EXPECT_EQ(to.device(), g.devices(1));
        EXPECT_EQ(elements(step.inputs(0)), elements(step.outputs(0)));
        EXPECT_EQ(plan.tensors(from.tensor()).dtype(),
                  plan.tensors(to.tensor()).dtype());
        EXPECT_EQ(step.bytes(), elements(step.inputs(0)) * 4);
        EXPECT_EQ(step.stage(), kStageModeComm);
      }
    }
  }
}

// Stage 0: one full GEMM per rank; stage 1: one collective after all of
// them; every later step reaches the stage-1 collective through its deps.
TEST(TpOverlapLoweringTest, MeasurementStagesComeFirst) {
  for (const Case& c : AllCases()) {
    SCOPED_TRACE(Name(c));
    absl::StatusOr<TpLowering> lowering = Lower(c);
    ASSERT_TRUE(lowering.ok()) << lowering.status();
    const v1::Plan& plan = lowering->plan;
    for (int r = 0; r < c.tp; ++r) {
      const v1::Step& gemm = plan.steps(r);
      EXPECT_EQ(gemm.stage(), kStageGemmAlone);
      EXPECT_EQ(gemm.compute().gemm().m(), c.m);
      EXPECT_EQ(gemm.device(), Devices(c.tp)[r]);
    }
    const v1::Step& comm = plan.steps(lowering->comm_alone_step);
    EXPECT_EQ(lowering->comm_alone_step, c.tp);
    EXPECT_EQ(comm.stage(), kStageCommAlone);
    EXPECT_EQ(comm.deps_size(), c.tp);
    std::vector<bool> after(plan.steps_size(), false);
    after[c.tp] = true;
    for (int i = c.tp + 1; i < plan.steps_size(); ++i) {
      const v1::Step& step = plan.steps(i);
      EXPECT_GE(step.stage(), kStageModeComm);
      for (int dep : step.deps()) after[i] = after[i] || after[dep];
      EXPECT_TRUE(after[i]) << "step " << i << " does not wait for stage 1";
      for (const v1::Operand& o : step.outputs()) {
        EXPECT_NE(plan.buffers(o.buffer()).role(), v1::Buffer::ROLE_SOURCE);
      }
    }
    // Nothing before the mode writes a DESTINATION.
    for (int i = 0; i <= c.tp; ++i) {
      for (const v1::Operand& o : plan.steps(i).outputs()) {
        EXPECT_EQ(plan.buffers(o.buffer()).role(), v1::Buffer::ROLE_SCRATCH);
      }
    }
  }
}

// The output row a mode GEMM step starts at (its A slice, else row 0).
int64_t FirstRowOf(const v1::Plan& plan, const v1::Step& gemm) {
  return gemm.inputs(0).slice().empty() ? 0 : gemm.inputs(0).slice(0).begin();
}

// Fused: rank r produces first the piece it sends at ring step 0, (r - 1)
// mod tp, and each step-0 send waits for exactly the tiles of its
// sub-chunk (the tracker), no other GEMM.
TEST(TpOverlapLoweringTest, FusedStaggersAndTriggersOnItsOwnTiles) {
  TpCostModel model;
  model.min_tile_rows = 1;
  for (int tp : {2, 4}) {
    for (bool ar : {false, true}) {
      const Case c{TpMode::kFused, 2 * tp, tp, ar};
      SCOPED_TRACE(Name(c));
      absl::StatusOr<TpLowering> lowering = Lower(c, model);
      ASSERT_TRUE(lowering.ok()) << lowering.status();
      const v1::Plan& plan = lowering->plan;
      const std::vector<int> devices = Devices(tp);
      const int64_t piece = c.m / tp;
      for (int r = 0; r < tp; ++r) {
        int first_gemm = -1, first_send = -1;
        for (int i = 0; i < plan.steps_size(); ++i) {
          const v1::Step& s = plan.steps(i);
          if (s.stage() < kStageModeComm) continue;
          if (first_gemm < 0 && s.op() == v1::Step::OP_COMPUTE &&
              s.compute().has_gemm() && s.device() == devices[r]) {
            first_gemm = i;
          }
          if (first_send < 0 && s.op() == v1::Step::OP_SEND_RECV &&
              plan.groups(s.group()).devices(0) == devices[r]) {
            first_send = i;
          }
        }
        ASSERT_GE(first_gemm, 0);
        ASSERT_GE(first_send, 0);
        const int64_t sent_row =
            plan.steps(first_send).inputs(0).slice(1).begin();
        const int64_t made_row = FirstRowOf(plan, plan.steps(first_gemm));
        EXPECT_EQ(made_row / piece, (r - 1 + tp) % tp) << "rank " << r;
        EXPECT_EQ(sent_row / piece, (r - 1 + tp) % tp) << "rank " << r;
        EXPECT_EQ(made_row, sent_row);
      }
      // Step-0 sends (input from a P buffer, i.e. the sender's own partial)
      // depend on exactly the GEMM tiles that write the rows they send.
      int sends = 0;
      for (const v1::Step& s : plan.steps()) {
        if (s.op() != v1::Step::OP_SEND_RECV) continue;
        const v1::Buffer& from = plan.buffers(s.inputs(0).buffer());
        if (from.role() == v1::Buffer::ROLE_DESTINATION) continue;  // gather
        const Box sent = BoxFromProto(s.inputs(0).slice());
        std::set<int> gemm_deps;
        for (int dep : s.deps()) {
          const v1::Step& d = plan.steps(dep);
          if (d.op() == v1::Step::OP_COMPUTE && d.compute().has_gemm()) {
            gemm_deps.insert(dep);
          }
        }
        if (plan.tensors(from.tensor()).shape(0) != tp) {
          EXPECT_TRUE(gemm_deps.empty());  // a running sum: after its add
          continue;
        }
        std::set<int> writers;  // mode GEMMs writing the sent rows there
        for (int i = 0; i < plan.steps_size(); ++i) {
          const v1::Step& d = plan.steps(i);
          if (d.stage() != kStageModeGemm || d.device() != from.device()) {
            continue;
          }
          const Box wrote = BoxFromProto(d.outputs(0).slice());
          if (!IsEmpty(Intersect(wrote, sent))) writers.insert(i);
        }
        EXPECT_FALSE(writers.empty());
        EXPECT_EQ(gemm_deps, writers);
        ++sends;
      }
      EXPECT_EQ(sends, tp * 2);  // tp ranks x j = 2 sub-chunks at step 0
    }
  }
}

TEST(TpOverlapLoweringTest, ChunkedReduceScatterPiecesAreWhole) {
  // 24 rows, tp 4, 3 chunks: 8 rows each, rank r holds rows 8i + 2r, +1.
  const Case c{TpMode::kChunked, 3, 4, false};
  absl::StatusOr<TpLowering> lowering = Lower(c);
  ASSERT_TRUE(lowering.ok()) << lowering.status();
  ASSERT_EQ(lowering->outputs.size(), 3u);
  EXPECT_EQ(lowering->outputs[1].first_row, 8);
  const v1::Plan& plan = lowering->plan;
  int collectives = 0;
  for (const v1::Step& s : plan.steps()) {
    if (s.op() != v1::Step::OP_REDUCE_SCATTER || s.stage() < kStageModeComm) {
      continue;
    }
    ++collectives;
    EXPECT_EQ(s.bytes(), 8 * 5 * 4);
    const v1::Buffer& y3 = plan.buffers(s.outputs(3).buffer());
    EXPECT_EQ(y3.role(), v1::Buffer::ROLE_DESTINATION);
    EXPECT_EQ(y3.box(0).begin(), 6);
    EXPECT_EQ(y3.box(0).end(), 8);
  }
  EXPECT_EQ(collectives, 3);
}

TEST(TpOverlapLoweringTest, ChunkCountsOutsideTheModeAreRejected) {
  const TpShape shape{24, 5, 8, DType::kFloat32, false};
  EXPECT_THAT(CheckTpChunks(shape, 4, TpMode::kFused, 6).message(),
              HasSubstr("tp_overlap.chunks is 6; mode fused allows 0 (auto) "
                        "or 4 x j"));
  EXPECT_THAT(CheckTpChunks(shape, 4, TpMode::kChunked, 7).message(),
              HasSubstr("1..6"));
  EXPECT_THAT(CheckTpChunks(shape, 4, TpMode::kSequential, 2).message(),
              HasSubstr("allowed 0 or 1"));
  EXPECT_THAT(CheckTpChunks(shape, 1, TpMode::kFused, 1).message(),
              HasSubstr("at least 2 ranks"));
  EXPECT_TRUE(CheckTpChunks(shape, 4, TpMode::kFused, 24).ok());
  EXPECT_FALSE(CheckTpChunks(shape, 4, TpMode::kFused, 28).ok());
  EXPECT_EQ(TpCandidateChunks(shape, 4, TpMode::kChunked),
            (std::vector<int>{2, 4}));
  EXPECT_EQ(TpCandidateChunks(shape, 4, TpMode::kFused),
            (std::vector<int>{4, 8, 16}));
  EXPECT_FALSE(LowerTpOverlap(shape, TpMode::kAuto, 1, Devices(4), {}).ok());
}

TEST(TpOverlapLoweringTest, SplitRowsIsNearEqualAndContiguous) {
  const std::vector<Interval> parts = SplitRows(10, 7, 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], (Interval{10, 13}));
  EXPECT_EQ(parts[1], (Interval{13, 15}));
  EXPECT_EQ(parts[2], (Interval{15, 17}));
  EXPECT_EQ(TpCostModel{}.TileCount(10), 1);
  EXPECT_EQ(TpCostModel{}.TileCount(200), 1);
  EXPECT_EQ(TpCostModel{}.TileCount(256), 2);
  EXPECT_EQ(TpCostModel{}.TileCount(100000), 2);
  EXPECT_EQ(TpCostModel::ForDeviceFlops(1e15).half_rate_rows, 128);
}

}  // namespace
}  // namespace meshcast
