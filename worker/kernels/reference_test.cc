#include "worker/kernels/reference.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/dtype_convert.h"
#include "worker/kernels/attention.h"
#include "worker/kernels/compute.h"
#include "worker/kernels/element.h"
#include "worker/kernels/initializer.h"
#include "worker/kernels/reduce.h"

namespace meshcast::worker {
namespace {

// Builds small plans by hand.
class PlanBuilder {
 public:
  int Tensor(std::vector<int64_t> shape, DType dtype,
             v1::Initializer::Kind kind = v1::Initializer::KIND_PATTERN,
             uint64_t seed = 0) {
    v1::TensorSpec* t = plan_.add_tensors();
    for (int64_t e : shape) t->add_shape(e);
    t->set_dtype(DTypeToProto(dtype));
    v1::Initializer* init = plan_.add_tensor_inits();
    init->set_kind(kind);
    init->set_seed(seed);
    specs_.push_back(TensorSpec{shape, dtype});
    return plan_.tensors_size() - 1;
  }
  int Buffer(int tensor, int device, const Box& box) {
    v1::Buffer* b = plan_.add_buffers();
    b->set_id(plan_.buffers_size() + 99);
    b->set_tensor(tensor);
    b->set_device(device);
    for (const Interval& i : box) {
      v1::Interval* p = b->add_box();
      p->set_begin(i.begin);
      p->set_end(i.end);
    }
    boxes_[b->id()] = box;
    return b->id();
  }
  v1::Step* Step(v1::Step::Op op, const std::vector<int>& inputs,
                 const std::vector<int>& outputs) {
    v1::Step* s = plan_.add_steps();
    s->set_id(plan_.steps_size());
    s->set_op(op);
    for (int b : inputs) s->add_inputs()->set_buffer(b);
    for (int b : outputs) s->add_outputs()->set_buffer(b);
    return s;
  }
  const v1::Plan& plan() const { return plan_; }
  const TensorSpec& spec(int t) const { return specs_[t]; }
  const v1::Initializer& init(int t) const { return plan_.tensor_inits(t); }
  double Initial(int t, int64_t index) const {
    return InitialValue(specs_[t], t, init(t), index);
  }

 private:
  v1::Plan plan_;
  std::vector<TensorSpec> specs_;
  std::map<int, Box> boxes_;
};

std::unique_ptr<Reference> MustCreate(const v1::Plan& plan) {
  auto ref = Reference::Create(plan);
  EXPECT_TRUE(ref.ok()) << ref.status();
  return ref.ok() ? std::move(*ref) : nullptr;
}

TEST(ToleranceTest, NumbersPerDType) {
  EXPECT_EQ(ToleranceFor(DType::kInt32, 100).rel, 0);
  EXPECT_EQ(ToleranceFor(DType::kInt8, 100).abs, 0);
  EXPECT_EQ(ToleranceFor(DType::kFloat32, 0).rel, 0);
  EXPECT_DOUBLE_EQ(ToleranceFor(DType::kFloat32, 256).rel,
                   256 * std::ldexp(1.0, -24) * 1.125);
  EXPECT_DOUBLE_EQ(ToleranceFor(DType::kBFloat16, 4).rel,
                   4 * std::ldexp(1.0, -8) * 1.125);
  EXPECT_DOUBLE_EQ(ToleranceFor(DType::kFloat16, 1).abs, std::ldexp(1.0, -24));
}

// All-reduce over 4 ranks: OUT[x] = sum_r IN[r, x], by hand.
TEST(ReferenceTest, AllReduceOfFourRanks) {
  PlanBuilder p;
  const int in = p.Tensor({4, 6}, DType::kFloat32, v1::Initializer::KIND_RANDOM, 7);
  const int out = p.Tensor({6}, DType::kFloat32, v1::Initializer::KIND_ZEROS);
  std::vector<int> ins, outs;
  for (int r = 0; r < 4; ++r) {
    ins.push_back(p.Buffer(in, r, {{r, r + 1}, {0, 6}}));
    outs.push_back(p.Buffer(out, r, {{0, 6}}));
  }
  p.Step(v1::Step::OP_ALL_REDUCE, ins, outs);
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);
  EXPECT_TRUE(ref->IsComputed(out));
  EXPECT_FALSE(ref->IsComputed(in));
  for (int64_t x = 0; x < 6; ++x) {
    const double want = p.Initial(in, x) + p.Initial(in, 6 + x) +
                        p.Initial(in, 12 + x) + p.Initial(in, 18 + x);
    EXPECT_EQ(*ref->Value(out, {x}), want) << x;
    EXPECT_EQ(ref->Expect(out, {x})->terms, 3);
  }
  // Inputs keep their initial values.
  EXPECT_EQ(*ref->Value(in, {2, 3}), p.Initial(in, 15));
  EXPECT_EQ(ref->Value(out, {6}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ref->Value(9, {0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Integer all-reduce max, and an int8 sum that wraps.
TEST(ReferenceTest, IntegerReductionsAreExactAndWrap) {
  for (v1::Reduction red : {v1::REDUCTION_SUM, v1::REDUCTION_MAX}) {
    PlanBuilder p;
    const int in = p.Tensor({4, 5}, DType::kInt8);
    const int out = p.Tensor({5}, DType::kInt8);
    std::vector<int> ins, outs;
    for (int r = 0; r < 4; ++r) {
      ins.push_back(p.Buffer(in, r, {{r, r + 1}, {0, 5}}));
      outs.push_back(p.Buffer(out, r, {{0, 5}}));
    }
    p.Step(v1::Step::OP_ALL_REDUCE, ins, outs)->set_reduction(red);
    auto ref = MustCreate(p.plan());
    ASSERT_NE(ref, nullptr);
    for (int64_t x = 0; x < 5; ++x) {
      int sum = 0, max = -1000;
      for (int r = 0; r < 4; ++r) {
        const int v = static_cast<int>(p.Initial(in, r * 5 + x));
        sum += v;
        max = std::max(max, v);
      }
      const int8_t want = red == v1::REDUCTION_SUM
                              ? static_cast<int8_t>(static_cast<uint8_t>(sum))
                              : static_cast<int8_t>(max);
      EXPECT_EQ(ref->Expect(out, {x})->integer, want) << x;
      EXPECT_EQ(*ref->Value(out, {x}), want) << x;
    }
  }
}

// Reduce-scatter: chunk r of OUT on rank r; the value does not depend on
// the chunking. int32 pattern values wrap on addition.
TEST(ReferenceTest, ReduceScatter) {
  PlanBuilder p;
  const int in = p.Tensor({4, 8}, DType::kInt32);
  const int out = p.Tensor({8}, DType::kInt32);
  std::vector<int> ins, outs;
  for (int r = 0; r < 4; ++r) {
    ins.push_back(p.Buffer(in, r, {{r, r + 1}, {0, 8}}));
    outs.push_back(p.Buffer(out, r, {{2 * r, 2 * r + 2}}));
  }
  p.Step(v1::Step::OP_REDUCE_SCATTER, ins, outs);
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);
  for (int64_t x = 0; x < 8; ++x) {
    uint32_t sum = 0;
    for (int r = 0; r < 4; ++r) {
      sum += static_cast<uint32_t>(
          InitialInteger(p.spec(in), in, p.init(in), r * 8 + x));
    }
    EXPECT_EQ(ref->Expect(out, {x})->integer, static_cast<int32_t>(sum));
  }
}

// All-to-all with uneven counts over 3 ranks; the expected permutation is
// written out by hand from the block layout.
TEST(ReferenceTest, AllToAllWithUnevenCounts) {
  PlanBuilder p;
  const int in = p.Tensor({11}, DType::kFloat64);
  const int out = p.Tensor({11}, DType::kFloat64, v1::Initializer::KIND_ZEROS);
  // counts[r][s]: r sends to s.
  const int64_t counts[9] = {1, 2, 0, 3, 0, 1, 2, 1, 1};
  // IN (sender-major): rank 0 [0, 3), rank 1 [3, 7), rank 2 [7, 11).
  // OUT (receiver-major): rank 0 gets 1 + 3 + 2, rank 1 2 + 0 + 1, rank 2
  // 0 + 1 + 1.
  const int i0 = p.Buffer(in, 0, {{0, 3}}), i1 = p.Buffer(in, 1, {{3, 7}}),
            i2 = p.Buffer(in, 2, {{7, 11}});
  const int o0 = p.Buffer(out, 0, {{0, 6}}), o1 = p.Buffer(out, 1, {{6, 9}}),
            o2 = p.Buffer(out, 2, {{9, 11}});
  v1::Step* s = p.Step(v1::Step::OP_ALL_TO_ALL, {i0, i1, i2}, {o0, o1, o2});
  for (int64_t c : counts) s->add_counts(c);
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);
  const int64_t source[11] = {0, 3, 4, 5, 7, 8, 1, 2, 9, 6, 10};
  for (int64_t x = 0; x < 11; ++x) {
    EXPECT_EQ(*ref->Value(out, {x}), p.Initial(in, source[x])) << x;
  }
}

// GEMM on each of 4 devices into partials, then a reduce-scatter of the
// partials: the DAG of the issue. The reference is checked against a hand
// loop, then the real kernels run on the same inputs and VerifyComputed
// accepts their output and catches a corrupted element.
TEST(ReferenceTest, GemmThenReduceScatterOnFourDevices) {
  const int64_t m = 8, n = 6, k = 16, devices = 4;
  PlanBuilder p;
  const int a = p.Tensor({devices, k, m}, DType::kFloat32,
                         v1::Initializer::KIND_RANDOM, 1);  // stored k x m
  const int b = p.Tensor({devices, k, n}, DType::kFloat32,
                         v1::Initializer::KIND_RANDOM, 2);
  const int partial = p.Tensor({devices, m, n}, DType::kFloat32,
                               v1::Initializer::KIND_ZEROS);
  const int out = p.Tensor({m, n}, DType::kFloat32, v1::Initializer::KIND_ZEROS);
  std::vector<int> partials, outs;
  for (int d = 0; d < devices; ++d) {
    const int ab = p.Buffer(a, d, {{d, d + 1}, {0, k}, {0, m}});
    const int bb = p.Buffer(b, d, {{d, d + 1}, {0, k}, {0, n}});
    const int pb = p.Buffer(partial, d, {{d, d + 1}, {0, m}, {0, n}});
    v1::Step* s = p.Step(v1::Step::OP_COMPUTE, {ab, bb}, {pb});
    s->set_device(d);
    v1::GemmAttrs* g = s->mutable_compute()->mutable_gemm();
    g->set_m(m);
    g->set_n(n);
    g->set_k(k);
    g->set_trans_a(true);
    g->set_alpha(0.5);
    partials.push_back(pb);
    outs.push_back(p.Buffer(out, d, {{2 * d, 2 * d + 2}, {0, n}}));
  }
  v1::Step* rs = p.Step(v1::Step::OP_REDUCE_SCATTER, partials, outs);
  for (int d = 1; d <= devices; ++d) rs->add_deps(d);
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);

  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t d = 0; d < devices; ++d) {
        for (int64_t q = 0; q < k; ++q) {
          want += 0.5 * p.Initial(a, (d * k + q) * m + i) *
                  p.Initial(b, (d * k + q) * n + j);
        }
      }
      EXPECT_NEAR(*ref->Value(out, {i, j}), want, 1e-12) << i << "," << j;
    }
  }

  // The real kernels: per-device sgemm, then the sum of the partials.
  const int64_t cbytes = m * n * 4;
  std::vector<uint8_t> sum(cbytes, 0);
  for (int d = 0; d < devices; ++d) {
    std::vector<uint8_t> ad(k * m * 4), bd(k * n * 4), cd(cbytes);
    ASSERT_TRUE(FillInitializer(absl::MakeSpan(ad),
                                {{d, d + 1}, {0, k}, {0, m}}, p.spec(a), a,
                                p.init(a))
                    .ok());
    ASSERT_TRUE(FillInitializer(absl::MakeSpan(bd),
                                {{d, d + 1}, {0, k}, {0, n}}, p.spec(b), b,
                                p.init(b))
                    .ok());
    ASSERT_TRUE(RunGemm(p.plan().steps(d).compute().gemm(), DType::kFloat32,
                        ad, bd, absl::MakeSpan(cd))
                    .ok());
    // The partial itself verifies against the reference.
    Cancellation cancel;
    auto pc = VerifyComputed(cd, {{d, d + 1}, {0, m}, {0, n}},
                             p.spec(partial), partial, *ref,
                             v1::VERIFY_MODE_FULL, cancel);
    ASSERT_TRUE(pc.ok()) << pc.status();
    EXPECT_EQ(pc->mismatches, 0) << pc->first_mismatch;
    ASSERT_TRUE(ReduceInto(v1::REDUCTION_SUM, DType::kFloat32, cd,
                           absl::MakeSpan(sum))
                    .ok());
  }
  Cancellation cancel;
  // Device 1's chunk: rows [2, 4).
  std::vector<uint8_t> chunk(sum.begin() + 2 * n * 4, sum.begin() + 4 * n * 4);
  const Box chunk_box = {{2, 4}, {0, n}};
  auto check = VerifyComputed(chunk, chunk_box, p.spec(out), out, *ref,
                              v1::VERIFY_MODE_FULL, cancel);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(check->elements, 2 * n);
  EXPECT_EQ(check->mismatches, 0) << check->first_mismatch;
  EXPECT_LT(check->max_abs_error, 1e-5);

  // Corrupt element [3, 4] by a relative 1e-3: caught, and described.
  float f;
  std::memcpy(&f, chunk.data() + (n + 4) * 4, 4);
  f = f * 1.001f + 1e-3f;
  std::memcpy(chunk.data() + (n + 4) * 4, &f, 4);
  check = VerifyComputed(chunk, chunk_box, p.spec(out), out, *ref,
                         v1::VERIFY_MODE_FULL, cancel);
  ASSERT_TRUE(check.ok());
  EXPECT_EQ(check->mismatches, 1);
  EXPECT_NE(check->first_mismatch.find("tensor 3 element [3,4]: expected "),
            std::string::npos)
      << check->first_mismatch;
  EXPECT_NE(check->first_mismatch.find("tolerance"), std::string::npos);

  // OFF checks nothing; a wrong size is an error; cancellation is prompt.
  check = VerifyComputed(chunk, chunk_box, p.spec(out), out, *ref,
                         v1::VERIFY_MODE_OFF, cancel);
  EXPECT_EQ(check->elements, 0);
  EXPECT_EQ(VerifyComputed(absl::MakeConstSpan(chunk).subspan(4), chunk_box,
                           p.spec(out), out, *ref, v1::VERIFY_MODE_FULL, cancel)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  Cancellation cancelled;
  cancelled.Cancel("stop");
  EXPECT_EQ(VerifyComputed(chunk, chunk_box, p.spec(out), out, *ref,
                           v1::VERIFY_MODE_FULL, cancelled)
                .status()
                .code(),
            absl::StatusCode::kCancelled);
}

// Elementwise chain: C = A + B, D = 0.5 * C; and int8 addition wraps.
TEST(ReferenceTest, Elementwise) {
  PlanBuilder p;
  const int a = p.Tensor({3, 4}, DType::kBFloat16, v1::Initializer::KIND_RANDOM, 3);
  const int b = p.Tensor({3, 4}, DType::kBFloat16, v1::Initializer::KIND_RANDOM, 4);
  const int c = p.Tensor({3, 4}, DType::kBFloat16, v1::Initializer::KIND_ZEROS);
  const int d = p.Tensor({12}, DType::kBFloat16, v1::Initializer::KIND_ZEROS);
  const int ab = p.Buffer(a, 0, {{0, 3}, {0, 4}});
  const int bb = p.Buffer(b, 0, {{0, 3}, {0, 4}});
  const int cb = p.Buffer(c, 0, {{0, 3}, {0, 4}});
  const int db = p.Buffer(d, 0, {{0, 12}});
  p.Step(v1::Step::OP_COMPUTE, {ab, bb}, {cb})
      ->mutable_compute()
      ->mutable_elementwise()
      ->set_kind(v1::ElementwiseAttrs::KIND_ADD);
  auto* scale = p.Step(v1::Step::OP_COMPUTE, {cb}, {db})
                    ->mutable_compute()
                    ->mutable_elementwise();
  scale->set_kind(v1::ElementwiseAttrs::KIND_SCALE);
  scale->set_alpha(0.5);
  p.Tensor({6}, DType::kInt8);
  p.Tensor({6}, DType::kInt8);
  const int e = 4, f = 5;
  const int eb = p.Buffer(e, 1, {{0, 6}});
  const int fb = p.Buffer(f, 1, {{0, 6}});
  p.Step(v1::Step::OP_COMPUTE, {eb, eb}, {fb})
      ->mutable_compute()
      ->mutable_elementwise()
      ->set_kind(v1::ElementwiseAttrs::KIND_ADD);
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);
  for (int64_t x = 0; x < 12; ++x) {
    const double sum = p.Initial(a, x) + p.Initial(b, x);
    EXPECT_EQ(*ref->Value(c, {x / 4, x % 4}), sum);
    EXPECT_EQ(*ref->Value(d, {x}), 0.5 * sum);
  }
  for (int64_t x = 0; x < 6; ++x) {
    const int v = static_cast<int>(p.Initial(e, x));
    EXPECT_EQ(*ref->Value(f, {x}),
              static_cast<int8_t>(static_cast<uint8_t>(2 * v)));
  }
}

// A second GEMM accumulating into the first one's output.
TEST(ReferenceTest, GemmAccumulate) {
  PlanBuilder p;
  const int a = p.Tensor({2, 3}, DType::kFloat64, v1::Initializer::KIND_RANDOM, 1);
  const int b = p.Tensor({3, 2}, DType::kFloat64, v1::Initializer::KIND_RANDOM, 2);
  const int c = p.Tensor({2, 2}, DType::kFloat64, v1::Initializer::KIND_RANDOM, 3);
  const int ab = p.Buffer(a, 0, {{0, 2}, {0, 3}});
  const int bb = p.Buffer(b, 0, {{0, 3}, {0, 2}});
  const int cb = p.Buffer(c, 0, {{0, 2}, {0, 2}});
  for (int s = 0; s < 2; ++s) {
    v1::Step* st = p.Step(v1::Step::OP_COMPUTE, {ab, bb}, {cb});
    if (s == 1) st->add_deps(1);
    v1::GemmAttrs* g = st->mutable_compute()->mutable_gemm();
    g->set_m(2);
    g->set_n(2);
    g->set_k(3);
    g->set_accumulate(true);
  }
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      double dot = 0;
      for (int64_t q = 0; q < 3; ++q) {
        dot += p.Initial(a, i * 3 + q) * p.Initial(b, q * 2 + j);
      }
      EXPECT_NEAR(*ref->Value(c, {i, j}), p.Initial(c, i * 2 + j) + 2 * dot,
                  1e-15);
    }
  }
}

// OP_SEND_RECV in the operand form is a copy between regions of two
// tensors (element e of one region to element e of the other, row-major):
// the reference follows it, through a scratch tensor and into an add,
// while the tensor form (a move within one tensor) defines nothing.
TEST(ReferenceTest, OperandSendRecvIsACopyBetweenRegions) {
  PlanBuilder p;
  const int x =
      p.Tensor({4, 6}, DType::kFloat32, v1::Initializer::KIND_RANDOM, 5);
  const int s = p.Tensor({3, 4}, DType::kFloat32, v1::Initializer::KIND_ZEROS);
  const int y =
      p.Tensor({12}, DType::kFloat32, v1::Initializer::KIND_RANDOM, 6);
  const int z = p.Tensor({12}, DType::kFloat32, v1::Initializer::KIND_ZEROS);
  const int xb = p.Buffer(x, 0, {{0, 4}, {0, 6}});
  const int sb = p.Buffer(s, 1, {{0, 3}, {0, 4}});
  const int yb = p.Buffer(y, 1, {{0, 12}});
  const int zb = p.Buffer(z, 1, {{0, 12}});
  // S = X[1:4, 2:6] (12 elements, not contiguous in X).
  v1::Step* copy = p.Step(v1::Step::OP_SEND_RECV, {xb}, {sb});
  copy->set_group(0);
  for (auto [begin, end] : {std::pair{1, 4}, std::pair{2, 6}}) {
    v1::Interval* i = copy->mutable_inputs(0)->add_slice();
    i->set_begin(begin);
    i->set_end(end);
  }
  EXPECT_TRUE(IsOperandCopy(*copy));
  v1::Step* add = p.Step(v1::Step::OP_COMPUTE, {sb, yb}, {zb});
  add->mutable_compute()->mutable_elementwise()->set_kind(
      v1::ElementwiseAttrs::KIND_ADD);
  add->add_deps(copy->id());
  // A tensor-form move of X (a slice): no definition.
  v1::Step* move = p.Step(v1::Step::OP_SEND_RECV, {}, {});
  move->set_tensor(x);
  move->add_slice()->set_end(4);
  move->add_slice()->set_end(6);
  EXPECT_FALSE(IsOperandCopy(*move));
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);
  EXPECT_TRUE(ref->IsComputed(s));
  EXPECT_TRUE(ref->IsComputed(z));
  EXPECT_FALSE(ref->IsComputed(x));
  for (int64_t e = 0; e < 12; ++e) {
    const int64_t row = 1 + e / 4, col = 2 + e % 4;
    const double copied = p.Initial(x, row * 6 + col);
    EXPECT_EQ(*ref->Value(s, {e / 4, e % 4}), copied) << e;
    const absl::StatusOr<Expected> want = ref->Expect(z, {e});
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(want->value, copied + p.Initial(y, e)) << e;
    EXPECT_EQ(want->terms, 1);  // the copy adds no rounding, the add one
  }
  // Different element counts or dtypes are refused.
  PlanBuilder bad;
  const int u = bad.Tensor({4}, DType::kFloat32);
  const int v = bad.Tensor({4}, DType::kFloat16);
  const int w = bad.Tensor({5}, DType::kFloat32);
  const int ub = bad.Buffer(u, 0, {{0, 4}});
  const int vb = bad.Buffer(v, 1, {{0, 4}});
  const int wb = bad.Buffer(w, 1, {{0, 5}});
  bad.Step(v1::Step::OP_SEND_RECV, {ub}, {vb});
  auto refused = Reference::Create(bad.plan());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  PlanBuilder bad2;
  bad2.Tensor({4}, DType::kFloat32);
  bad2.Tensor({5}, DType::kFloat32);
  const int ub2 = bad2.Buffer(0, 0, {{0, 4}});
  const int wb2 = bad2.Buffer(1, 1, {{0, 5}});
  bad2.Step(v1::Step::OP_SEND_RECV, {ub2}, {wb2});
  refused = Reference::Create(bad2.plan());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("differ"), std::string::npos)
      << refused.status();
  (void)wb;
}

v1::GatherAttrs* SetGather(v1::Step* step, int64_t row, int k,
                           const std::vector<int64_t>& index) {
  v1::GatherAttrs* g = step->mutable_compute()->mutable_gather();
  g->set_row(row);
  g->set_k(k);
  for (int64_t i : index) g->add_index(i);
  return g;
}

void SetSlice(v1::Operand* operand, const Box& box) {
  for (const Interval& i : box) {
    v1::Interval* p = operand->add_slice();
    p->set_begin(i.begin);
    p->set_end(i.end);
  }
}

// A weighted gather whose X is a slice of its buffer (X row r, column c is
// tensor element [1 + r, 1 + c]): the values are the float64 sums, the
// tolerance that of a length-k dot product (terms k + 1 = 3 on exact
// inputs, scale sum |w x|); an int32 copy gather (k = 1, no W) is exact,
// with zeros for -1 and no terms at all.
TEST(ReferenceTest, GatherValuesAndTolerance) {
  PlanBuilder p;
  const int x =
      p.Tensor({7, 5}, DType::kFloat32, v1::Initializer::KIND_RANDOM, 1);
  const int w = p.Tensor({6}, DType::kFloat32, v1::Initializer::KIND_RANDOM, 2);
  const int y = p.Tensor({3, 4}, DType::kFloat32, v1::Initializer::KIND_ZEROS);
  const int xb = p.Buffer(x, 0, {{0, 7}, {0, 5}});
  const int wb = p.Buffer(w, 0, {{0, 6}});
  const int yb = p.Buffer(y, 0, {{0, 3}, {0, 4}});
  const std::vector<int64_t> index = {5, 0, -1, 2, 3, -1};
  v1::Step* gather = p.Step(v1::Step::OP_COMPUTE, {xb, wb}, {yb});
  SetSlice(gather->mutable_inputs(0), {{1, 7}, {1, 5}});
  SetGather(gather, 4, 2, index);
  const int xi = p.Tensor({5, 3}, DType::kInt32);
  const int yi = p.Tensor({4, 3}, DType::kInt32, v1::Initializer::KIND_ZEROS);
  const std::vector<int64_t> copy_index = {4, -1, 0, 0};
  SetGather(p.Step(v1::Step::OP_COMPUTE, {p.Buffer(xi, 1, {{0, 5}, {0, 3}})},
                   {p.Buffer(yi, 1, {{0, 4}, {0, 3}})}),
            3, 0, copy_index);
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);
  EXPECT_TRUE(ref->IsComputed(y));
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t c = 0; c < 4; ++c) {
      double want = 0, scale = 0;
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t r = index[i * 2 + j];
        if (r < 0) continue;
        const double term =
            p.Initial(w, i * 2 + j) * p.Initial(x, (1 + r) * 5 + 1 + c);
        want += term;
        scale += std::abs(term);
      }
      const absl::StatusOr<Expected> e = ref->Expect(y, {i, c});
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_NEAR(e->value, want, 1e-15) << i << "," << c;
      EXPECT_NEAR(e->scale, scale, 1e-15);
      EXPECT_EQ(e->terms, 3);
    }
  }
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t c = 0; c < 3; ++c) {
      const absl::StatusOr<Expected> e = ref->Expect(yi, {i, c});
      ASSERT_TRUE(e.ok()) << e.status();
      const int64_t r = copy_index[i];
      EXPECT_EQ(e->integer,
                r < 0 ? 0 : static_cast<int64_t>(p.Initial(xi, r * 3 + c)));
      EXPECT_EQ(e->terms, 0);
    }
  }
}

// RELU is exact and keeps its input's bound; SIGMOID adds 4 terms over a
// scale of its value plus a quarter of its input's scale.
TEST(ReferenceTest, ReluAndSigmoid) {
  PlanBuilder p;
  const int a =
      p.Tensor({16}, DType::kBFloat16, v1::Initializer::KIND_RANDOM, 8);
  const int r = p.Tensor({16}, DType::kBFloat16, v1::Initializer::KIND_ZEROS);
  const int s = p.Tensor({16}, DType::kBFloat16, v1::Initializer::KIND_ZEROS);
  const int ab = p.Buffer(a, 0, {{0, 16}});
  const int rb = p.Buffer(r, 0, {{0, 16}});
  const int sb = p.Buffer(s, 0, {{0, 16}});
  p.Step(v1::Step::OP_COMPUTE, {ab}, {rb})
      ->mutable_compute()
      ->mutable_elementwise()
      ->set_kind(v1::ElementwiseAttrs::KIND_RELU);
  p.Step(v1::Step::OP_COMPUTE, {ab}, {sb})
      ->mutable_compute()
      ->mutable_elementwise()
      ->set_kind(v1::ElementwiseAttrs::KIND_SIGMOID);
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);
  int negatives = 0;
  for (int64_t x = 0; x < 16; ++x) {
    const double v = p.Initial(a, x);
    negatives += v < 0;
    const absl::StatusOr<Expected> relu = ref->Expect(r, {x});
    ASSERT_TRUE(relu.ok()) << relu.status();
    EXPECT_EQ(relu->value, std::max(v, 0.0));
    EXPECT_EQ(relu->terms, 0);
    const absl::StatusOr<Expected> sig = ref->Expect(s, {x});
    ASSERT_TRUE(sig.ok()) << sig.status();
    const double want = 1.0 / (1.0 + std::exp(-v));
    EXPECT_DOUBLE_EQ(sig->value, want);
    EXPECT_DOUBLE_EQ(sig->scale, want + 0.25 * std::abs(v));
    EXPECT_EQ(sig->terms, 4);
  }
  EXPECT_GT(negatives, 0);  // relu had something to do
}

// The MoE chain on the host kernels in every float dtype: dispatch (a k = 1
// gather of X's rows), relu, gate weights = sigmoid(logits), combine (a
// weighted k = 2 gather), each output verified in full against the
// reference; then a corrupted combine element is caught.
TEST(ReferenceTest, VerifiesAGatherReluSigmoidCombineChainOfTheHostKernels) {
  const std::vector<int64_t> dispatch = {3, -1, 0, 7, 7, 2};
  const std::vector<int64_t> combine = {0, 1, 2, -1, 3, 4, 5, 0};
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    PlanBuilder p;
    const int x = p.Tensor({8, 5}, dtype, v1::Initializer::KIND_RANDOM, 11);
    const int d = p.Tensor({6, 5}, dtype, v1::Initializer::KIND_ZEROS);
    const int h = p.Tensor({6, 5}, dtype, v1::Initializer::KIND_ZEROS);
    const int l = p.Tensor({4, 2}, dtype, v1::Initializer::KIND_RANDOM, 12);
    const int g = p.Tensor({4, 2}, dtype, v1::Initializer::KIND_ZEROS);
    const int y = p.Tensor({4, 5}, dtype, v1::Initializer::KIND_ZEROS);
    const int xb = p.Buffer(x, 0, {{0, 8}, {0, 5}});
    const int db = p.Buffer(d, 0, {{0, 6}, {0, 5}});
    const int hb = p.Buffer(h, 0, {{0, 6}, {0, 5}});
    const int lb = p.Buffer(l, 0, {{0, 4}, {0, 2}});
    const int gb = p.Buffer(g, 0, {{0, 4}, {0, 2}});
    const int yb = p.Buffer(y, 0, {{0, 4}, {0, 5}});
    SetGather(p.Step(v1::Step::OP_COMPUTE, {xb}, {db}), 5, 1, dispatch);
    v1::Step* relu = p.Step(v1::Step::OP_COMPUTE, {db}, {hb});
    relu->mutable_compute()->mutable_elementwise()->set_kind(
        v1::ElementwiseAttrs::KIND_RELU);
    relu->add_deps(1);
    p.Step(v1::Step::OP_COMPUTE, {lb}, {gb})
        ->mutable_compute()
        ->mutable_elementwise()
        ->set_kind(v1::ElementwiseAttrs::KIND_SIGMOID);
    v1::Step* comb = p.Step(v1::Step::OP_COMPUTE, {hb, gb}, {yb});
    SetGather(comb, 5, 2, combine);
    comb->add_deps(2);
    comb->add_deps(3);
    auto ref = MustCreate(p.plan());
    ASSERT_NE(ref, nullptr);

    const int size = DTypeSize(dtype);
    auto fill = [&](int t) {
      std::vector<uint8_t> bytes(p.spec(t).num_elements() * size);
      EXPECT_TRUE(FillInitializer(absl::MakeSpan(bytes), p.spec(t).full_box(),
                                  p.spec(t), t, p.init(t))
                      .ok());
      return bytes;
    };
    const std::vector<uint8_t> xs = fill(x), ls = fill(l);
    std::vector<uint8_t> ds(30 * size), hs(30 * size), gs(8 * size),
        ys(20 * size);
    ASSERT_TRUE(RunGather(p.plan().steps(0).compute().gather(), dtype, xs, {},
                          absl::MakeSpan(ds))
                    .ok());
    ASSERT_TRUE(RunElementwise(p.plan().steps(1).compute().elementwise(), dtype,
                               {ds}, absl::MakeSpan(hs))
                    .ok());
    ASSERT_TRUE(RunElementwise(p.plan().steps(2).compute().elementwise(), dtype,
                               {ls}, absl::MakeSpan(gs))
                    .ok());
    ASSERT_TRUE(RunGather(p.plan().steps(3).compute().gather(), dtype, hs, gs,
                          absl::MakeSpan(ys))
                    .ok());
    Cancellation cancel;
    for (auto [t, bytes] : {std::pair{d, &ds}, std::pair{h, &hs},
                            std::pair{g, &gs}, std::pair{y, &ys}}) {
      auto check = VerifyComputed(*bytes, p.spec(t).full_box(), p.spec(t), t,
                                  *ref, v1::VERIFY_MODE_FULL, cancel);
      ASSERT_TRUE(check.ok()) << check.status();
      EXPECT_EQ(check->elements, p.spec(t).num_elements());
      EXPECT_EQ(check->mismatches, 0)
          << "tensor " << t << ": " << check->first_mismatch;
    }
    // The dispatch is a copy: bit for bit, so its maximum error is 0.
    auto exact = VerifyComputed(ds, p.spec(d).full_box(), p.spec(d), d, *ref,
                                v1::VERIFY_MODE_FULL, cancel);
    EXPECT_EQ(exact->max_abs_error, 0);

    // Element [2, 3] moved by 0.25 (above any dtype's bound on sums of two
    // products of magnitude < 1), and for float32 / float64 by a relative
    // 1e-4 (far below fp16's rounding, far above float32's tolerance).
    const double old = LoadElement(dtype, ys.data() + (2 * 5 + 3) * size);
    const bool fine = dtype == DType::kFloat32 || dtype == DType::kFloat64;
    StoreElement(dtype, ys.data() + (2 * 5 + 3) * size,
                 fine ? old * (1 + 1e-4) + 1e-4 : old + 0.25);
    auto bad = VerifyComputed(ys, p.spec(y).full_box(), p.spec(y), y, *ref,
                              v1::VERIFY_MODE_FULL, cancel);
    ASSERT_TRUE(bad.ok()) << bad.status();
    EXPECT_EQ(bad->mismatches, 1);
    EXPECT_NE(bad->first_mismatch.find("element [2,3]"), std::string::npos)
        << bad->first_mismatch;
  }
}

// Gather and activation steps that do not fit their operands or dtypes.
TEST(ReferenceTest, MalformedGathersAndActivationsAreRejected) {
  struct Case {
    std::function<void(v1::Step*)> corrupt;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](v1::Step* s) { s->mutable_compute()->mutable_gather()->set_row(0); },
       absl::StatusCode::kInvalidArgument, "gather.row = 0"},
      {[](v1::Step* s) {
         s->mutable_compute()->mutable_gather()->set_index(1, 4);
       },
       absl::StatusCode::kInvalidArgument,
       "gather.index[1] = 4 is outside [-1, rows(X) = 4)"},
      {[](v1::Step* s) {
         s->mutable_compute()->mutable_gather()->add_index(0);
       },
       absl::StatusCode::kInvalidArgument, "gather.index has 5 entries"},
      {[](v1::Step* s) { s->add_inputs()->set_buffer(s->inputs(0).buffer()); },
       absl::StatusCode::kInvalidArgument, "inputs [X] or [X, W]"},
      {[](v1::Step* s) { s->mutable_inputs()->RemoveLast(); },
       absl::StatusCode::kOk, ""},
      {[](v1::Step* s) {
         s->mutable_inputs(1)->set_buffer(s->inputs(0).buffer());
       },
       absl::StatusCode::kInvalidArgument, "W has 8 elements"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    PlanBuilder p;
    const int x = p.Tensor({4, 2}, DType::kFloat32);
    const int w = p.Tensor({4}, DType::kFloat32);
    const int y = p.Tensor({2, 2}, DType::kFloat32);
    v1::Step* s =
        p.Step(v1::Step::OP_COMPUTE,
               {p.Buffer(x, 0, {{0, 4}, {0, 2}}), p.Buffer(w, 0, {{0, 4}})},
               {p.Buffer(y, 0, {{0, 2}, {0, 2}})});
    SetGather(s, 2, 2, {0, 1, 2, 3});
    c.corrupt(s);
    const absl::Status status = Reference::Create(p.plan()).status();
    EXPECT_EQ(status.code(), c.code) << status;
    EXPECT_NE(status.message().find(c.message), std::string::npos) << status;
  }
  // Weights on integers: unimplemented; RELU / SIGMOID on integers: not
  // defined.
  PlanBuilder p;
  const int x = p.Tensor({4}, DType::kInt32);
  const int xb = p.Buffer(x, 0, {{0, 4}});
  SetGather(p.Step(v1::Step::OP_COMPUTE, {xb, xb}, {xb}), 1, 1, {0, 1, 2, 3});
  EXPECT_EQ(Reference::Create(p.plan()).status().code(),
            absl::StatusCode::kUnimplemented);
  for (auto kind :
       {v1::ElementwiseAttrs::KIND_RELU, v1::ElementwiseAttrs::KIND_SIGMOID}) {
    PlanBuilder q;
    const int t = q.Tensor({4}, DType::kInt8);
    const int tb = q.Buffer(t, 0, {{0, 4}});
    q.Step(v1::Step::OP_COMPUTE, {tb}, {tb})
        ->mutable_compute()
        ->mutable_elementwise()
        ->set_kind(kind);
    const absl::Status status = Reference::Create(q.plan()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("allowed dtypes: float16"),
              std::string::npos)
        << status;
  }
}

v1::RowDotAttrs* SetRowDot(v1::Step* step, int64_t row,
                           const std::vector<int64_t>& index) {
  v1::RowDotAttrs* r = step->mutable_compute()->mutable_row_dot();
  r->set_row(row);
  for (int64_t i : index) r->add_index(i);
  return r;
}

void SetKind(v1::Step* step, v1::ElementwiseAttrs::Kind kind) {
  step->mutable_compute()->mutable_elementwise()->set_kind(kind);
}

// A row dot whose A is a slice of its buffer (A row r, column c is tensor
// element [1 + r, 1 + c]): the values are the float64 dot products, the
// tolerance that of a length-row dot product (terms row + 1 = 5 on exact
// inputs, scale sum |a b|); a -1 on either side is an exact 0.
TEST(ReferenceTest, RowDotValuesAndTolerance) {
  PlanBuilder p;
  const int a =
      p.Tensor({6, 5}, DType::kFloat32, v1::Initializer::KIND_RANDOM, 1);
  const int b =
      p.Tensor({3, 4}, DType::kFloat32, v1::Initializer::KIND_RANDOM, 2);
  const int d = p.Tensor({2, 2}, DType::kFloat32, v1::Initializer::KIND_ZEROS);
  const std::vector<int64_t> index = {0, 1, 4, 2, -1, 0, 3, -1};
  v1::Step* dot = p.Step(
      v1::Step::OP_COMPUTE,
      {p.Buffer(a, 0, {{0, 6}, {0, 5}}), p.Buffer(b, 0, {{0, 3}, {0, 4}})},
      {p.Buffer(d, 0, {{0, 2}, {0, 2}})});
  SetSlice(dot->mutable_inputs(0), {{1, 6}, {1, 5}});
  SetRowDot(dot, 4, index);
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);
  EXPECT_TRUE(ref->IsComputed(d));
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t ra = index[2 * i], rb = index[2 * i + 1];
    double want = 0, scale = 0;
    if (ra >= 0 && rb >= 0) {
      for (int64_t c = 0; c < 4; ++c) {
        const double term =
            p.Initial(a, (1 + ra) * 5 + 1 + c) * p.Initial(b, rb * 4 + c);
        want += term;
        scale += std::abs(term);
      }
    }
    const absl::StatusOr<Expected> e = ref->Expect(d, {i / 2, i % 2});
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_NEAR(e->value, want, 1e-15) << i;
    EXPECT_NEAR(e->scale, scale, 1e-15) << i;
    EXPECT_EQ(e->terms, ra >= 0 && rb >= 0 ? 5 : 0) << i;
  }
}

// RELU_GRAD of exact inputs is exact: in0 with in0's bound where in1 > 0,
// an exact 0 where in1 is RELU's output of a negative input (RELU's 0 is
// measured by what it clamped); where in1 is exactly 0 (ZEROS)
// the branch is ambiguous: in0 / 2, with a tolerance that accepts in0 and
// 0 but not -in0. SIGMOID_GRAD: g s (1 - s) with its scale and 3 terms on
// top of SIGMOID's 4.
TEST(ReferenceTest, ReluGradAndSigmoidGrad) {
  const DType dtype = DType::kBFloat16;
  PlanBuilder p;
  const int g = p.Tensor({16}, dtype, v1::Initializer::KIND_RANDOM, 8);
  const int x = p.Tensor({16}, dtype, v1::Initializer::KIND_RANDOM, 9);
  const int z = p.Tensor({16}, dtype, v1::Initializer::KIND_ZEROS);
  const int h = p.Tensor({16}, dtype, v1::Initializer::KIND_ZEROS);
  const int rg = p.Tensor({16}, dtype, v1::Initializer::KIND_ZEROS);
  const int rz = p.Tensor({16}, dtype, v1::Initializer::KIND_ZEROS);
  const int s = p.Tensor({16}, dtype, v1::Initializer::KIND_ZEROS);
  const int sg = p.Tensor({16}, dtype, v1::Initializer::KIND_ZEROS);
  std::vector<int> buf;
  for (int t = 0; t <= sg; ++t) buf.push_back(p.Buffer(t, 0, {{0, 16}}));
  SetKind(p.Step(v1::Step::OP_COMPUTE, {buf[x]}, {buf[h]}),
          v1::ElementwiseAttrs::KIND_RELU);
  SetKind(p.Step(v1::Step::OP_COMPUTE, {buf[g], buf[h]}, {buf[rg]}),
          v1::ElementwiseAttrs::KIND_RELU_GRAD);
  SetKind(p.Step(v1::Step::OP_COMPUTE, {buf[g], buf[z]}, {buf[rz]}),
          v1::ElementwiseAttrs::KIND_RELU_GRAD);
  SetKind(p.Step(v1::Step::OP_COMPUTE, {buf[x]}, {buf[s]}),
          v1::ElementwiseAttrs::KIND_SIGMOID);
  SetKind(p.Step(v1::Step::OP_COMPUTE, {buf[g], buf[s]}, {buf[sg]}),
          v1::ElementwiseAttrs::KIND_SIGMOID_GRAD);
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);
  int masked = 0;
  const int size = DTypeSize(dtype);
  std::vector<uint8_t> as_g(16 * size), as_zero(16 * size, 0),
      as_minus_g(16 * size);
  for (int64_t i = 0; i < 16; ++i) {
    const double gv = p.Initial(g, i), xv = p.Initial(x, i);
    ASSERT_NE(xv, 0);  // the seed gives no exact zero
    masked += xv < 0;
    // RELU remembers what it clamped; RELU_GRAD measures that against the
    // input's tolerance (0 here: X is exact), so its 0 is certain.
    EXPECT_EQ(ref->Expect(h, {i})->clamped_from, xv < 0 ? xv : 0.0) << i;
    const absl::StatusOr<Expected> r = ref->Expect(rg, {i});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->value, xv > 0 ? gv : 0.0) << i;
    EXPECT_EQ(r->scale, xv > 0 ? std::abs(gv) : 0.0) << i;
    EXPECT_EQ(r->terms, 0) << i;

    const absl::StatusOr<Expected> amb = ref->Expect(rz, {i});
    ASSERT_TRUE(amb.ok()) << amb.status();
    EXPECT_EQ(amb->value, gv / 2) << i;
    EXPECT_EQ(amb->terms, 1) << i;
    const Tolerance tol = ToleranceFor(dtype, amb->terms);
    const double bound = tol.abs + tol.rel * amb->scale;
    EXPECT_GE(bound, std::abs(gv) / 2) << i;  // both gv and 0 pass
    // ... and not by much: in0's own tolerance at one term, and a hair.
    EXPECT_LE(bound,
              std::abs(gv) / 2 * (1 + 1e-6) + tol.abs + tol.rel * std::abs(gv))
        << i;
    StoreElement(dtype, as_g.data() + i * size, gv);
    StoreElement(dtype, as_minus_g.data() + i * size, -gv);

    const absl::StatusOr<Expected> e = ref->Expect(sg, {i});
    ASSERT_TRUE(e.ok()) << e.status();
    const double sv = 1.0 / (1.0 + std::exp(-xv));
    const double want = gv * sv * (1 - sv);
    EXPECT_DOUBLE_EQ(e->value, want) << i;
    // s's scale: sv + |x| / 4 (SIGMOID); s (1 - s) <= 1/4, |1 - 2 s| <= 1.
    EXPECT_DOUBLE_EQ(e->scale, std::abs(want) + 0.25 * std::abs(gv) +
                                   std::abs(gv) * (sv + 0.25 * std::abs(xv)))
        << i;
    EXPECT_EQ(e->terms, 4 + 3) << i;
  }
  EXPECT_GT(masked, 0);
  EXPECT_LT(masked, 16);
  Cancellation cancel;
  for (auto [bytes, mismatches] : {std::pair{&as_g, 0}, std::pair{&as_zero, 0},
                                   std::pair{&as_minus_g, 16}}) {
    auto check = VerifyComputed(*bytes, p.spec(rz).full_box(), p.spec(rz), rz,
                                *ref, v1::VERIFY_MODE_FULL, cancel);
    ASSERT_TRUE(check.ok()) << check.status();
    EXPECT_EQ(check->mismatches, mismatches) << check->first_mismatch;
  }
}

// RELU_GRAD whose in1 is within its tolerance of 0 without being 0: in1 =
// x + (-(1 - 2^-20) x) is 2^-20 x in float64 but exactly 0 on the fp16
// device (the scale rounds to -x). The device masks every element, the
// float64 branch would pass those of positive x: the reference expects g /
// 2 with a bound that accepts the device's 0 (and g), and the GEMM that
// reads the gradient carries the widened bound on, so the host kernels'
// outputs all verify. The same holds with in1 = relu(y): RELU's 0 for a
// negative y within its tolerance of 0 is ambiguous too.
TEST(ReferenceTest, ReluGradWithinToleranceOfZeroAcceptsEitherBranch) {
  const DType dtype = DType::kFloat16;
  const int size = DTypeSize(dtype);
  PlanBuilder p;
  const int x = p.Tensor({4, 4}, dtype, v1::Initializer::KIND_RANDOM, 3);
  const int g = p.Tensor({4, 4}, dtype, v1::Initializer::KIND_RANDOM, 4);
  const int w = p.Tensor({4, 3}, dtype, v1::Initializer::KIND_RANDOM, 5);
  const int xs = p.Tensor({4, 4}, dtype, v1::Initializer::KIND_ZEROS);
  const int y = p.Tensor({4, 4}, dtype, v1::Initializer::KIND_ZEROS);
  const int rg = p.Tensor({4, 4}, dtype, v1::Initializer::KIND_ZEROS);
  const int out = p.Tensor({4, 3}, dtype, v1::Initializer::KIND_ZEROS);
  const int rh = p.Tensor({4, 4}, dtype, v1::Initializer::KIND_ZEROS);
  const int rg2 = p.Tensor({4, 4}, dtype, v1::Initializer::KIND_ZEROS);
  std::vector<int> buf;
  for (int t = 0; t <= rg2; ++t) {
    buf.push_back(p.Buffer(t, 0, p.spec(t).full_box()));
  }
  v1::Step* scale = p.Step(v1::Step::OP_COMPUTE, {buf[x]}, {buf[xs]});
  SetKind(scale, v1::ElementwiseAttrs::KIND_SCALE);
  scale->mutable_compute()->mutable_elementwise()->set_alpha(
      -(1 - std::ldexp(1.0, -20)));
  SetKind(p.Step(v1::Step::OP_COMPUTE, {buf[x], buf[xs]}, {buf[y]}),
          v1::ElementwiseAttrs::KIND_ADD);
  SetKind(p.Step(v1::Step::OP_COMPUTE, {buf[g], buf[y]}, {buf[rg]}),
          v1::ElementwiseAttrs::KIND_RELU_GRAD);
  v1::GemmAttrs* gemm =
      p.Step(v1::Step::OP_COMPUTE, {buf[rg], buf[w]}, {buf[out]})
          ->mutable_compute()
          ->mutable_gemm();
  gemm->set_m(4);
  gemm->set_n(3);
  gemm->set_k(4);
  // The same through RELU: relu(y) is 0 where y < 0 and y (about 2^-20 x)
  // is within its tolerance of 0 either way, so relu_grad(g, relu(y)) is
  // just as ambiguous.
  SetKind(p.Step(v1::Step::OP_COMPUTE, {buf[y]}, {buf[rh]}),
          v1::ElementwiseAttrs::KIND_RELU);
  SetKind(p.Step(v1::Step::OP_COMPUTE, {buf[g], buf[rh]}, {buf[rg2]}),
          v1::ElementwiseAttrs::KIND_RELU_GRAD);
  const v1::Plan& plan = p.plan();  // no deps: the steps run in plan order
  auto created = Reference::Create(plan);
  ASSERT_TRUE(created.ok()) << created.status();
  const Reference& ref = **created;

  auto fill = [&](int t) {
    std::vector<uint8_t> bytes(p.spec(t).num_elements() * size);
    EXPECT_TRUE(FillInitializer(absl::MakeSpan(bytes), p.spec(t).full_box(),
                                p.spec(t), t, p.init(t))
                    .ok());
    return bytes;
  };
  const std::vector<uint8_t> xv = fill(x), gv = fill(g), wv = fill(w);
  std::vector<uint8_t> xsv(16 * size), yv(16 * size), rgv(16 * size),
      outv(12 * size);
  ASSERT_TRUE(RunElementwise(plan.steps(0).compute().elementwise(), dtype, {xv},
                             absl::MakeSpan(xsv))
                  .ok());
  ASSERT_TRUE(RunElementwise(plan.steps(1).compute().elementwise(), dtype,
                             {xv, xsv}, absl::MakeSpan(yv))
                  .ok());
  ASSERT_TRUE(RunElementwise(plan.steps(2).compute().elementwise(), dtype,
                             {gv, yv}, absl::MakeSpan(rgv))
                  .ok());
  ASSERT_TRUE(RunGemm(plan.steps(3).compute().gemm(), dtype, rgv, wv,
                      absl::MakeSpan(outv))
                  .ok());
  std::vector<uint8_t> rhv(16 * size), rg2v(16 * size);
  ASSERT_TRUE(RunElementwise(plan.steps(4).compute().elementwise(), dtype, {yv},
                             absl::MakeSpan(rhv))
                  .ok());
  ASSERT_TRUE(RunElementwise(plan.steps(5).compute().elementwise(), dtype,
                             {gv, rhv}, absl::MakeSpan(rg2v))
                  .ok());
  int positive = 0;
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(LoadElement(dtype, yv.data() + i * size), 0.0) << i;
    EXPECT_EQ(LoadElement(dtype, rgv.data() + i * size), 0.0) << i;
    const double xi = p.Initial(x, i), gi = p.Initial(g, i);
    positive += xi > 0 && gi != 0;
    for (int t : {rg, rg2}) {
      const absl::StatusOr<Expected> e = ref.Expect(t, {i / 4, i % 4});
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_EQ(e->value, gi / 2) << t << " " << i;
    }
  }
  EXPECT_GT(positive, 0);  // elements the float64 branch would get wrong
  Cancellation cancel;
  for (auto [t, bytes] :
       {std::pair{y, &yv}, std::pair{rg, &rgv}, std::pair{out, &outv},
        std::pair{rh, &rhv}, std::pair{rg2, &rg2v}}) {
    auto check = VerifyComputed(*bytes, p.spec(t).full_box(), p.spec(t), t, ref,
                                v1::VERIFY_MODE_FULL, cancel);
    ASSERT_TRUE(check.ok()) << check.status();
    EXPECT_EQ(check->mismatches, 0)
        << "tensor " << t << ": " << check->first_mismatch;
  }
  // The other branch (the device's y just above 0): g itself passes too.
  auto other = VerifyComputed(gv, p.spec(rg).full_box(), p.spec(rg), rg, ref,
                              v1::VERIFY_MODE_FULL, cancel);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->mismatches, 0) << other->first_mismatch;
}

// The backward chain on the host kernels in every float dtype: H =
// relu(X), dX = relu_grad(G, H), S = sigmoid(X), dL = sigmoid_grad(G, S),
// dW = row_dot(dX, H) (rows of both, some -1 pairs), each output verified
// in full against the reference; then a corrupted row dot element is
// caught.
TEST(ReferenceTest, VerifiesAGradientChainOfTheHostKernels) {
  const std::vector<int64_t> pairs = {0, 0, 3, 1, -1, 2, 5, 5, 2, -1, 4, 0};
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    PlanBuilder p;
    const int x = p.Tensor({6, 5}, dtype, v1::Initializer::KIND_RANDOM, 21);
    const int g = p.Tensor({6, 5}, dtype, v1::Initializer::KIND_RANDOM, 22);
    const int h = p.Tensor({6, 5}, dtype, v1::Initializer::KIND_ZEROS);
    const int dx = p.Tensor({6, 5}, dtype, v1::Initializer::KIND_ZEROS);
    const int s = p.Tensor({6, 5}, dtype, v1::Initializer::KIND_ZEROS);
    const int dl = p.Tensor({6, 5}, dtype, v1::Initializer::KIND_ZEROS);
    const int dw = p.Tensor({6}, dtype, v1::Initializer::KIND_ZEROS);
    std::vector<int> buf;
    for (int t = 0; t <= dw; ++t) {
      buf.push_back(p.Buffer(t, 0, p.spec(t).full_box()));
    }
    SetKind(p.Step(v1::Step::OP_COMPUTE, {buf[x]}, {buf[h]}),
            v1::ElementwiseAttrs::KIND_RELU);
    v1::Step* relu_grad =
        p.Step(v1::Step::OP_COMPUTE, {buf[g], buf[h]}, {buf[dx]});
    SetKind(relu_grad, v1::ElementwiseAttrs::KIND_RELU_GRAD);
    relu_grad->add_deps(1);
    SetKind(p.Step(v1::Step::OP_COMPUTE, {buf[x]}, {buf[s]}),
            v1::ElementwiseAttrs::KIND_SIGMOID);
    v1::Step* sigmoid_grad =
        p.Step(v1::Step::OP_COMPUTE, {buf[g], buf[s]}, {buf[dl]});
    SetKind(sigmoid_grad, v1::ElementwiseAttrs::KIND_SIGMOID_GRAD);
    sigmoid_grad->add_deps(3);
    v1::Step* dot = p.Step(v1::Step::OP_COMPUTE, {buf[dx], buf[h]}, {buf[dw]});
    SetRowDot(dot, 5, pairs);
    dot->add_deps(2);
    auto ref = MustCreate(p.plan());
    ASSERT_NE(ref, nullptr);

    const int size = DTypeSize(dtype);
    auto fill = [&](int t) {
      std::vector<uint8_t> bytes(p.spec(t).num_elements() * size);
      EXPECT_TRUE(FillInitializer(absl::MakeSpan(bytes), p.spec(t).full_box(),
                                  p.spec(t), t, p.init(t))
                      .ok());
      return bytes;
    };
    const std::vector<uint8_t> xs = fill(x), gs = fill(g);
    std::vector<uint8_t> hs(30 * size), dxs(30 * size), ss(30 * size),
        dls(30 * size), dws(6 * size);
    const auto& steps = p.plan().steps();
    ASSERT_TRUE(RunElementwise(steps[0].compute().elementwise(), dtype, {xs},
                               absl::MakeSpan(hs))
                    .ok());
    ASSERT_TRUE(RunElementwise(steps[1].compute().elementwise(), dtype,
                               {gs, hs}, absl::MakeSpan(dxs))
                    .ok());
    ASSERT_TRUE(RunElementwise(steps[2].compute().elementwise(), dtype, {xs},
                               absl::MakeSpan(ss))
                    .ok());
    ASSERT_TRUE(RunElementwise(steps[3].compute().elementwise(), dtype,
                               {gs, ss}, absl::MakeSpan(dls))
                    .ok());
    ASSERT_TRUE(RunRowDot(steps[4].compute().row_dot(), dtype, dxs, hs,
                          absl::MakeSpan(dws))
                    .ok());
    Cancellation cancel;
    for (auto [t, bytes] :
         {std::pair{h, &hs}, std::pair{dx, &dxs}, std::pair{s, &ss},
          std::pair{dl, &dls}, std::pair{dw, &dws}}) {
      auto check = VerifyComputed(*bytes, p.spec(t).full_box(), p.spec(t), t,
                                  *ref, v1::VERIFY_MODE_FULL, cancel);
      ASSERT_TRUE(check.ok()) << check.status();
      EXPECT_EQ(check->elements, p.spec(t).num_elements());
      EXPECT_EQ(check->mismatches, 0)
          << "tensor " << t << ": " << check->first_mismatch;
    }
    // RELU_GRAD is a copy or a zero: bit for bit, its maximum error is 0.
    auto exact = VerifyComputed(dxs, p.spec(dx).full_box(), p.spec(dx), dx,
                                *ref, v1::VERIFY_MODE_FULL, cancel);
    EXPECT_EQ(exact->max_abs_error, 0);
    // Element 3 (rows 5 and 5) moved by 0.25, or for float32 / float64 by
    // a relative 1e-4: far above its bound.
    const double old = LoadElement(dtype, dws.data() + 3 * size);
    const bool fine = dtype == DType::kFloat32 || dtype == DType::kFloat64;
    StoreElement(dtype, dws.data() + 3 * size,
                 fine ? old * (1 + 1e-4) + 1e-4 : old + 0.25);
    auto bad = VerifyComputed(dws, p.spec(dw).full_box(), p.spec(dw), dw, *ref,
                              v1::VERIFY_MODE_FULL, cancel);
    ASSERT_TRUE(bad.ok()) << bad.status();
    EXPECT_EQ(bad->mismatches, 1);
    EXPECT_NE(bad->first_mismatch.find("element [3]"), std::string::npos)
        << bad->first_mismatch;
  }
}

// Row dot and gradient steps that do not fit their operands or dtypes.
TEST(ReferenceTest, MalformedRowDotsAndGradientsAreRejected) {
  struct Case {
    std::function<void(v1::Step*)> corrupt;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](v1::Step* s) { s->mutable_compute()->mutable_row_dot()->set_row(0); },
       "row_dot.row = 0 must be >= 1"},
      {[](v1::Step* s) { s->mutable_compute()->mutable_row_dot()->set_row(3); },
       "row_dot.row = 3: A has 8 elements and B 6"},
      {[](v1::Step* s) {
         s->mutable_compute()->mutable_row_dot()->set_index(3, 3);
       },
       "row_dot.index[3] = 3 is outside [-1, rows(B) = 3)"},
      {[](v1::Step* s) {
         s->mutable_compute()->mutable_row_dot()->set_index(2, 4);
       },
       "row_dot.index[2] = 4 is outside [-1, rows(A) = 4)"},
      {[](v1::Step* s) {
         s->mutable_compute()->mutable_row_dot()->add_index(0);
       },
       "row_dot.index has 5 entries; it needs 2 * elements(D) = 2 * 2 = 4"},
      {[](v1::Step* s) { s->add_inputs()->set_buffer(s->inputs(0).buffer()); },
       "row_dot takes inputs [A, B] and outputs [D]; got 3 inputs"},
      {[](v1::Step* s) { s->mutable_inputs()->RemoveLast(); },
       "row_dot takes inputs [A, B] and outputs [D]; got 1 inputs"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    PlanBuilder p;
    const int a = p.Tensor({4, 2}, DType::kFloat32);
    const int b = p.Tensor({3, 2}, DType::kFloat32);
    const int d = p.Tensor({2}, DType::kFloat32);
    v1::Step* s = p.Step(
        v1::Step::OP_COMPUTE,
        {p.Buffer(a, 0, {{0, 4}, {0, 2}}), p.Buffer(b, 0, {{0, 3}, {0, 2}})},
        {p.Buffer(d, 0, {{0, 2}})});
    SetRowDot(s, 2, {0, 1, 3, 2});
    ASSERT_TRUE(Reference::Create(p.plan()).ok());
    c.corrupt(s);
    const absl::Status status = Reference::Create(p.plan()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find(c.message), std::string::npos) << status;
  }
  // Integers: a row dot and the gradients are not defined; the gradients
  // take two inputs.
  PlanBuilder p;
  const int t = p.Tensor({4}, DType::kInt32);
  const int tb = p.Buffer(t, 0, {{0, 4}});
  SetRowDot(p.Step(v1::Step::OP_COMPUTE, {tb, tb}, {tb}), 2, {0, 1, 1, -1});
  absl::Status status = Reference::Create(p.plan()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("row_dot on int32 is not defined; allowed "
                                  "dtypes: float16"),
            std::string::npos)
      << status;
  for (auto kind : {v1::ElementwiseAttrs::KIND_RELU_GRAD,
                    v1::ElementwiseAttrs::KIND_SIGMOID_GRAD}) {
    PlanBuilder q;
    const int u = q.Tensor({4}, DType::kInt8);
    const int ub = q.Buffer(u, 0, {{0, 4}});
    v1::Step* step = q.Step(v1::Step::OP_COMPUTE, {ub, ub}, {ub});
    SetKind(step, kind);
    status = Reference::Create(q.plan()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("allowed dtypes: float16"),
              std::string::npos)
        << status;
    step->mutable_inputs()->RemoveLast();
    status = Reference::Create(q.plan()).status();
    EXPECT_NE(status.message().find("elementwise takes 2 inputs, got 1"),
              std::string::npos)
        << status;
  }
}

TEST(ReferenceTest, MalformedPlansAreRejected) {
  {
    PlanBuilder p;
    const int a = p.Tensor({4}, DType::kFloat32);
    const int ab = p.Buffer(a, 0, {{0, 4}});
    p.Step(v1::Step::OP_ALL_REDUCE, {ab}, {12345});
    auto ref = Reference::Create(p.plan());
    EXPECT_EQ(ref.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ref.status().message().find("12345"), std::string::npos);
  }
  {
    PlanBuilder p;
    const int a = p.Tensor({4, 4}, DType::kFloat32);
    const int ab = p.Buffer(a, 0, {{0, 4}, {0, 4}});
    v1::GemmAttrs* g = p.Step(v1::Step::OP_COMPUTE, {ab, ab}, {ab})
                           ->mutable_compute()
                           ->mutable_gemm();
    g->set_m(4);
    g->set_n(4);
    g->set_k(5);
    auto ref = Reference::Create(p.plan());
    EXPECT_EQ(ref.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ref.status().message().find("k=5"), std::string::npos)
        << ref.status();
  }
  {
    PlanBuilder p;
    const int a = p.Tensor({4}, DType::kFloat32);
    const int ab = p.Buffer(a, 0, {{0, 4}});
    v1::Step* s = p.Step(v1::Step::OP_ALL_TO_ALL, {ab}, {ab});
    for (int c = 0; c < 3; ++c) s->add_counts(1);
    EXPECT_EQ(Reference::Create(p.plan()).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    PlanBuilder p;
    const int a = p.Tensor({4}, DType::kFloat32);
    const int ab = p.Buffer(a, 0, {{0, 4}});
    p.Step(v1::Step::OP_LOCAL_COPY, {ab}, {ab})->add_deps(2);
    p.Step(v1::Step::OP_LOCAL_COPY, {ab}, {ab})->add_deps(1);
    EXPECT_EQ(Reference::Create(p.plan()).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// The size the brief asks for: 1M output elements of GEMM (k = 256) ->
// reduce-scatter over 4 devices, checked in full, in seconds; and SAMPLE
// checks 4096 of them, the same ones every time.
TEST(ReferenceTest, MillionElementsOfGemmThenReduceScatterVerifyQuickly) {
  const int64_t m = 1024, n = 1024, k = 256, devices = 4;
  PlanBuilder p;
  const int a = p.Tensor({devices, m, k}, DType::kFloat32,
                         v1::Initializer::KIND_RANDOM, 1);
  const int b = p.Tensor({devices, k, n}, DType::kFloat32,
                         v1::Initializer::KIND_RANDOM, 2);
  const int partial = p.Tensor({devices, m, n}, DType::kFloat32,
                               v1::Initializer::KIND_ZEROS);
  const int out = p.Tensor({m, n}, DType::kFloat32, v1::Initializer::KIND_ZEROS);
  std::vector<int> partials, outs;
  for (int d = 0; d < devices; ++d) {
    const int ab = p.Buffer(a, d, {{d, d + 1}, {0, m}, {0, k}});
    const int bb = p.Buffer(b, d, {{d, d + 1}, {0, k}, {0, n}});
    const int pb = p.Buffer(partial, d, {{d, d + 1}, {0, m}, {0, n}});
    v1::GemmAttrs* g = p.Step(v1::Step::OP_COMPUTE, {ab, bb}, {pb})
                           ->mutable_compute()
                           ->mutable_gemm();
    g->set_m(m);
    g->set_n(n);
    g->set_k(k);
    partials.push_back(pb);
    outs.push_back(p.Buffer(out, d, {{d * m / 4, (d + 1) * m / 4}, {0, n}}));
  }
  p.Step(v1::Step::OP_REDUCE_SCATTER, partials, outs);
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);

  std::vector<uint8_t> sum(m * n * 4, 0);
  for (int d = 0; d < devices; ++d) {
    std::vector<uint8_t> ad(m * k * 4), bd(k * n * 4), cd(m * n * 4);
    ASSERT_TRUE(FillInitializer(absl::MakeSpan(ad),
                                {{d, d + 1}, {0, m}, {0, k}}, p.spec(a), a,
                                p.init(a))
                    .ok());
    ASSERT_TRUE(FillInitializer(absl::MakeSpan(bd),
                                {{d, d + 1}, {0, k}, {0, n}}, p.spec(b), b,
                                p.init(b))
                    .ok());
    ASSERT_TRUE(RunGemm(p.plan().steps(d).compute().gemm(), DType::kFloat32,
                        ad, bd, absl::MakeSpan(cd))
                    .ok());
    ASSERT_TRUE(ReduceInto(v1::REDUCTION_SUM, DType::kFloat32, cd,
                           absl::MakeSpan(sum))
                    .ok());
  }
  Cancellation cancel;
  const auto start = std::chrono::steady_clock::now();
  auto full = VerifyComputed(sum, {{0, m}, {0, n}}, p.spec(out), out, *ref,
                             v1::VERIFY_MODE_FULL, cancel);
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->elements, m * n);
  EXPECT_EQ(full->mismatches, 0) << full->first_mismatch;
  std::printf("full check of %lld elements (k=%lld, 4 ranks): %.2f s, max "
              "error %.3g\n",
              static_cast<long long>(m * n), static_cast<long long>(k),
              seconds, full->max_abs_error);
  EXPECT_LT(seconds, 30.0);  // a few seconds on one core; loose for CI

  auto sample = VerifyComputed(sum, {{0, m}, {0, n}}, p.spec(out), out, *ref,
                               v1::VERIFY_MODE_SAMPLE, cancel);
  ASSERT_TRUE(sample.ok());
  EXPECT_EQ(sample->elements, 4096);
  EXPECT_EQ(sample->mismatches, 0);
  // A corrupted element is found by FULL, and SAMPLE gives the same answer
  // on every run.
  sum[4 * (m * n / 2) + 3] ^= 0x01;  // the exponent: x2 or /2
  full = VerifyComputed(sum, {{0, m}, {0, n}}, p.spec(out), out, *ref,
                        v1::VERIFY_MODE_FULL, cancel);
  EXPECT_EQ(full->mismatches, 1);
  auto s1 = VerifyComputed(sum, {{0, m}, {0, n}}, p.spec(out), out, *ref,
                           v1::VERIFY_MODE_SAMPLE, cancel);
  auto s2 = VerifyComputed(sum, {{0, m}, {0, n}}, p.spec(out), out, *ref,
                           v1::VERIFY_MODE_SAMPLE, cancel);
  EXPECT_EQ(s1->mismatches, s2->mismatches);
  EXPECT_EQ(s1->max_abs_error, s2->max_abs_error);
}

// The elements a SAMPLE check reads: a grid of at most 64 rows x 64
// columns where the box has room (so a GEMM's reference needs few rows of
// A and columns of B), distinct, inside the box, the same on every call.
TEST(ReferenceTest, SampleOffsetsAreAGridOfFewRowsAndColumns) {
  struct Case {
    Box box;
    int64_t want_rows, want_columns;
  };
  const Case cases[] = {
      {{{0, 1024}, {0, 1024}}, 64, 64},
      {{{3, 7}, {100, 612}, {0, 2048}}, 64, 64},  // rows flattened: 4 x 512
      {{{0, 100000}}, 1, 4096},                   // one row
      {{{0, 100}, {0, 50}}, 81, 50},              // narrow: every column
      {{{0, 2}, {0, 600}, {0, 7}}, 585, 7},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(BoxToString(c.box));
    const std::vector<int64_t> offsets = SampleOffsets(c.box, 5);
    const int64_t count = NumElements(c.box);
    const int64_t columns = c.box.back().end - c.box.back().begin;
    EXPECT_EQ(static_cast<int64_t>(offsets.size()),
              c.want_rows * c.want_columns);
    EXPECT_LE(static_cast<int64_t>(offsets.size()), kSamples);
    std::vector<int64_t> sorted = offsets;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
    EXPECT_GE(sorted.front(), 0);
    EXPECT_LT(sorted.back(), count);
    std::vector<int64_t> rows, cols;
    for (int64_t o : offsets) {
      rows.push_back(o / columns);
      cols.push_back(o % columns);
    }
    std::sort(rows.begin(), rows.end());
    std::sort(cols.begin(), cols.end());
    EXPECT_EQ(std::unique(rows.begin(), rows.end()) - rows.begin(),
              c.want_rows);
    EXPECT_EQ(std::unique(cols.begin(), cols.end()) - cols.begin(),
              c.want_columns);
    EXPECT_EQ(SampleOffsets(c.box, 5), offsets);
    EXPECT_NE(SampleOffsets(c.box, 6), offsets);  // salted by the tensor
  }
  // A box of at most kSamples elements: all of them, in order.
  const std::vector<int64_t> all = SampleOffsets({{0, 64}, {0, 64}}, 1);
  ASSERT_EQ(all.size(), 4096u);
  for (int64_t e = 0; e < 4096; ++e) EXPECT_EQ(all[e], e);
}

// A SAMPLE check of a GEMM with op(B) transposed and alpha: the reference
// evaluates the sampled rows of A and columns of B (on first use), agrees
// with the real kernel's output, catches a corrupted sampled element, and
// misses one it does not read (which FULL finds).
TEST(ReferenceTest, SampledGemmCheckReadsTheSampledRowsAndColumns) {
  const int64_t m = 300, n = 200, k = 48;
  PlanBuilder p;
  const int a =
      p.Tensor({m, k}, DType::kFloat32, v1::Initializer::KIND_RANDOM, 3);
  const int b = p.Tensor({n, k}, DType::kFloat32, v1::Initializer::KIND_RANDOM,
                         4);  // stored n x k
  const int c = p.Tensor({m, n}, DType::kFloat32, v1::Initializer::KIND_ZEROS);
  v1::GemmAttrs* g = p.Step(v1::Step::OP_COMPUTE,
                            {p.Buffer(a, 0, {{0, m}, {0, k}}),
                             p.Buffer(b, 0, {{0, n}, {0, k}})},
                            {p.Buffer(c, 0, {{0, m}, {0, n}})})
                         ->mutable_compute()
                         ->mutable_gemm();
  g->set_m(m);
  g->set_n(n);
  g->set_k(k);
  g->set_trans_b(true);
  g->set_alpha(-1.5);
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);
  std::vector<uint8_t> ad(m * k * 4), bd(n * k * 4), cd(m * n * 4);
  ASSERT_TRUE(FillInitializer(absl::MakeSpan(ad), {{0, m}, {0, k}}, p.spec(a),
                              a, p.init(a))
                  .ok());
  ASSERT_TRUE(FillInitializer(absl::MakeSpan(bd), {{0, n}, {0, k}}, p.spec(b),
                              b, p.init(b))
                  .ok());
  ASSERT_TRUE(RunGemm(*g, DType::kFloat32, ad, bd, absl::MakeSpan(cd)).ok());
  // A hand loop for one element the sample reads.
  const Box box = {{0, m}, {0, n}};
  const std::vector<int64_t> samples = SampleOffsets(box, c);
  const int64_t e = samples[17], i = e / n, j = e % n;
  double want = 0;
  for (int64_t q = 0; q < k; ++q) {
    want += -1.5 * p.Initial(a, i * k + q) * p.Initial(b, j * k + q);
  }
  EXPECT_NEAR(*ref->Value(c, {i, j}), want, 1e-12);

  Cancellation cancel;
  auto check = [&](v1::VerifyMode mode) {
    auto result = VerifyComputed(cd, box, p.spec(c), c, *ref, mode, cancel);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : ComputedCheck{};
  };
  ComputedCheck sampled = check(v1::VERIFY_MODE_SAMPLE);
  EXPECT_EQ(sampled.elements, static_cast<int64_t>(samples.size()));
  EXPECT_EQ(sampled.mismatches, 0) << sampled.first_mismatch;
  EXPECT_EQ(check(v1::VERIFY_MODE_FULL).mismatches, 0);

  cd[4 * e + 3] ^= 0x01;  // the exponent of a sampled element
  EXPECT_EQ(check(v1::VERIFY_MODE_SAMPLE).mismatches, 1);
  cd[4 * e + 3] ^= 0x01;
  int64_t unread = 0;
  while (std::binary_search(samples.begin(), samples.end(), unread)) ++unread;
  cd[4 * unread + 3] ^= 0x01;
  EXPECT_EQ(check(v1::VERIFY_MODE_SAMPLE).mismatches, 0);
  EXPECT_EQ(check(v1::VERIFY_MODE_FULL).mismatches, 1);
}

// A full check of a GEMM with op(A) transposed, large enough that the
// reference builds the whole operands (past kSamples elements): it agrees
// with the real kernel and finds one corrupted element.
TEST(ReferenceTest, FullCheckOfATransposedAGemmBuildsItWhole) {
  const int64_t m = 120, n = 90, k = 40;
  PlanBuilder p;
  const int a = p.Tensor({k, m}, DType::kFloat32, v1::Initializer::KIND_RANDOM,
                         7);  // stored k x m
  const int b =
      p.Tensor({k, n}, DType::kFloat32, v1::Initializer::KIND_RANDOM, 8);
  const int c = p.Tensor({m, n}, DType::kFloat32, v1::Initializer::KIND_ZEROS);
  v1::GemmAttrs* g = p.Step(v1::Step::OP_COMPUTE,
                            {p.Buffer(a, 0, {{0, k}, {0, m}}),
                             p.Buffer(b, 0, {{0, k}, {0, n}})},
                            {p.Buffer(c, 0, {{0, m}, {0, n}})})
                         ->mutable_compute()
                         ->mutable_gemm();
  g->set_m(m);
  g->set_n(n);
  g->set_k(k);
  g->set_trans_a(true);
  auto ref = MustCreate(p.plan());
  ASSERT_NE(ref, nullptr);
  std::vector<uint8_t> ad(k * m * 4), bd(k * n * 4), cd(m * n * 4);
  ASSERT_TRUE(FillInitializer(absl::MakeSpan(ad), {{0, k}, {0, m}}, p.spec(a),
                              a, p.init(a))
                  .ok());
  ASSERT_TRUE(FillInitializer(absl::MakeSpan(bd), {{0, k}, {0, n}}, p.spec(b),
                              b, p.init(b))
                  .ok());
  ASSERT_TRUE(RunGemm(*g, DType::kFloat32, ad, bd, absl::MakeSpan(cd)).ok());
  const Box box = {{0, m}, {0, n}};
  Cancellation cancel;
  auto full =
      VerifyComputed(cd, box, p.spec(c), c, *ref, v1::VERIFY_MODE_FULL, cancel);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->elements, m * n);
  EXPECT_EQ(full->mismatches, 0) << full->first_mismatch;
  // One element against a hand loop over the stored (k x m) A.
  const int64_t i = 77, j = 31;
  double want = 0;
  for (int64_t q = 0; q < k; ++q) {
    want += p.Initial(a, q * m + i) * p.Initial(b, q * n + j);
  }
  EXPECT_NEAR(*ref->Value(c, {i, j}), want, 1e-12);
  cd[4 * (i * n + j) + 3] ^= 0x01;
  full =
      VerifyComputed(cd, box, p.spec(c), c, *ref, v1::VERIFY_MODE_FULL, cancel);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->mismatches, 1);
}

// Causal attention over a zigzag layout as a chain of two attention
// blocks and a finish: 4 heads on 2 kv heads, 16 query rows at positions
// 0-7 and 24-31 (device 0 of a sequence of 32 in 4 chunks), the first
// block against the other device's keys (positions 8-23, which queries 0-7
// all mask), the second against the own keys (the same positions as the
// queries). The state is a slice of a bigger tensor (batch 1 of 2); the
// second block reads it out of place into S2 or updates it in place.
struct AttentionChain {
  PlanBuilder p;
  int q = 0, k1 = 0, v1 = 0, k2 = 0, v2 = 0, s1 = 0, s2 = 0, o = 0;
  v1::AttentionBlockAttrs other, own;
  Box state_box;
};

constexpr int64_t kChainHeads = 4, kChainRows = 16, kChainDim = 8;

AttentionChain BuildAttentionChain(DType dtype, bool in_place) {
  AttentionChain c;
  PlanBuilder& p = c.p;
  const int64_t h = kChainHeads, n = kChainRows, d = kChainDim;
  c.q = p.Tensor({1, h, n, d}, dtype, v1::Initializer::KIND_RANDOM, 1);
  c.k1 = p.Tensor({1, 2, n, d}, dtype, v1::Initializer::KIND_RANDOM, 2);
  c.v1 = p.Tensor({1, 2, n, d}, dtype, v1::Initializer::KIND_RANDOM, 3);
  c.k2 = p.Tensor({1, 2, n, d}, dtype, v1::Initializer::KIND_RANDOM, 4);
  c.v2 = p.Tensor({1, 2, n, d}, dtype, v1::Initializer::KIND_RANDOM, 5);
  c.s1 = p.Tensor({2, h, n, d + 2}, dtype, v1::Initializer::KIND_ZEROS);
  c.s2 = in_place ? c.s1
                  : p.Tensor({1, h, n, d + 2}, dtype, v1::Initializer::KIND_ZEROS);
  c.o = p.Tensor({1, h, n, d}, dtype, v1::Initializer::KIND_ZEROS);
  c.own.set_batch(1);
  c.own.set_heads(h);
  c.own.set_kv_heads(2);
  c.own.set_q_rows(n);
  c.own.set_kv_rows(n);
  c.own.set_head_dim(d);
  c.own.set_scale(1.5);
  c.own.set_causal(true);
  for (int64_t x = 0; x < n; ++x) {
    const int64_t position = x < 8 ? x : 16 + x;  // 0-7, 24-31
    c.own.add_q_position(position);
    c.own.add_kv_position(position);
  }
  c.other = c.own;
  c.other.clear_kv_position();
  for (int64_t x = 8; x < 24; ++x) c.other.add_kv_position(x);
  auto full = [&](int t) { return p.Buffer(t, 0, p.spec(t).full_box()); };
  const int qb = full(c.q);
  c.state_box = {{1, 2}, {0, h}, {0, n}, {0, d + 2}};
  const int s1b = p.Buffer(c.s1, 0, c.state_box);
  *p.Step(v1::Step::OP_COMPUTE, {qb, full(c.k2), full(c.v2)}, {s1b})
       ->mutable_compute()
       ->mutable_attention_block() = c.other;
  const int s2b = in_place ? s1b : full(c.s2);
  *p.Step(v1::Step::OP_COMPUTE, {qb, full(c.k1), full(c.v1), s1b}, {s2b})
       ->mutable_compute()
       ->mutable_attention_block() = c.own;
  p.Step(v1::Step::OP_COMPUTE, {s2b}, {full(c.o)})
      ->mutable_compute()
      ->mutable_attention_finish()
      ->set_head_dim(d);
  return c;
}

// The chain's reference: O within 1e-9 of causal softmax attention over
// all 32 positions computed directly in float64 (in place or not); the
// first block's state has the empty state (m = -inf, exact) on queries
// 0-7 and the bookkeeping of reference.h elsewhere; and the host kernels'
// outputs, in every float dtype, verify against it, with a bound that a
// real error would not pass.
TEST(ReferenceTest, AttentionChainMatchesDirectAttention) {
  const int64_t h = kChainHeads, n = kChainRows, d = kChainDim;
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), in_place ? " in place" : ""));
      AttentionChain c = BuildAttentionChain(dtype, in_place);
      const PlanBuilder& p = c.p;
      auto ref = MustCreate(p.plan());
      ASSERT_NE(ref, nullptr);
      EXPECT_TRUE(ref->IsComputed(c.o));
      // Direct: every key of both blocks with position <= the query's.
      for (int64_t head = 0; head < h; ++head) {
        const int64_t kvh = head / 2;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t qpos = c.own.q_position(i);
          std::vector<double> s;
          std::vector<std::pair<int, int64_t>> from;  // (V tensor, row)
          for (auto [kt, vt, attrs] :
               {std::tuple{c.k1, c.v1, &c.own},
                std::tuple{c.k2, c.v2, &c.other}}) {
            for (int64_t j = 0; j < n; ++j) {
              if (attrs->kv_position(j) > qpos) continue;
              double dot = 0;
              for (int64_t x = 0; x < d; ++x) {
                dot += p.Initial(c.q, (head * n + i) * d + x) *
                       p.Initial(kt, (kvh * n + j) * d + x);
              }
              s.push_back(1.5 * dot);
              from.push_back({vt, (kvh * n + j) * d});
            }
          }
          ASSERT_FALSE(s.empty());
          const double m = *std::max_element(s.begin(), s.end());
          double l = 0;
          for (double& x : s) l += (x = std::exp(x - m));
          for (int64_t x = 0; x < d; ++x) {
            double want = 0;
            for (size_t j = 0; j < s.size(); ++j) {
              want += s[j] / l * p.Initial(from[j].first, from[j].second + x);
            }
            const absl::StatusOr<Expected> e = ref->Expect(c.o, {0, head, i, x});
            ASSERT_TRUE(e.ok()) << e.status();
            EXPECT_NEAR(e->value, want, 1e-9) << head << " " << i << " " << x;
          }
        }
      }
      if (!in_place) {
        // The first block: queries 0-7 keep the empty state, exactly.
        for (int64_t x = 0; x < d + 2; ++x) {
          const Expected e = *ref->Expect(c.s1, {1, 2, 3, x});
          EXPECT_EQ(e.value, x == d ? -std::numeric_limits<double>::infinity()
                                    : 0.0)
              << x;
          EXPECT_EQ(e.scale, 0) << x;
          EXPECT_EQ(e.terms, 0) << x;
        }
        // Elsewhere: m with T + 1 = head_dim + 3 terms (exact inputs), o and
        // l with the amplification A = ceil(23 E) plus kv_rows + 8.
        const Expected m = *ref->Expect(c.s1, {1, 2, 12, d});
        EXPECT_EQ(m.terms, d + 3);
        EXPECT_GE(m.scale, std::abs(m.value));
        const int64_t amp =
            static_cast<int64_t>(std::ceil((2.0 * (d + 3) + 1) * m.scale));
        EXPECT_EQ(ref->Expect(c.s1, {1, 2, 12, 0})->terms, amp + n + 8);
        EXPECT_EQ(ref->Expect(c.s1, {1, 2, 12, d + 1})->terms, amp + n + 8);
        // The second block continues from it: its o carries 4 more
        // roundings beyond the first block's amplification.
        const Expected m2 = *ref->Expect(c.s2, {0, 2, 12, d});
        EXPECT_EQ(m2.terms, d + 3);
        EXPECT_GE(m2.scale, m.scale);
        const int64_t amp2 =
            static_cast<int64_t>(std::ceil((2.0 * (d + 3) + 1) * m2.scale));
        EXPECT_EQ(ref->Expect(c.s2, {0, 2, 12, 0})->terms, amp2 + n + 8 + 4);
      }

      // The host kernels, verified against the reference.
      auto fill = [&](int t) {
        std::vector<uint8_t> bytes(p.spec(t).num_elements() * DTypeSize(dtype));
        EXPECT_TRUE(FillInitializer(absl::MakeSpan(bytes),
                                    p.spec(t).full_box(), p.spec(t), t,
                                    p.init(t))
                        .ok());
        return bytes;
      };
      const std::vector<uint8_t> q = fill(c.q), k1 = fill(c.k1),
                                 v1 = fill(c.v1), k2 = fill(c.k2),
                                 v2 = fill(c.v2);
      const int size = DTypeSize(dtype);
      std::vector<uint8_t> s1(h * n * (d + 2) * size), s2(s1.size()),
          out(h * n * d * size);
      ASSERT_TRUE(
          RunAttentionBlock(c.other, dtype, q, k2, v2, {}, absl::MakeSpan(s1))
              .ok());
      Cancellation cancel;
      auto verify = [&](const std::vector<uint8_t>& bytes, int t,
                        const Box& box) {
        auto check = VerifyComputed(bytes, box, p.spec(t), t, *ref,
                                    v1::VERIFY_MODE_FULL, cancel);
        EXPECT_TRUE(check.ok()) << check.status();
        return check.ok() ? *check : ComputedCheck{};
      };
      if (!in_place) {
        const ComputedCheck first = verify(s1, c.s1, c.state_box);
        EXPECT_EQ(first.elements, h * n * (d + 2));
        EXPECT_EQ(first.mismatches, 0) << first.first_mismatch;
      }
      ASSERT_TRUE(
          RunAttentionBlock(c.own, dtype, q, k1, v1, s1, absl::MakeSpan(s2))
              .ok());
      v1::AttentionFinishAttrs finish;
      finish.set_head_dim(d);
      ASSERT_TRUE(RunAttentionFinish(finish, dtype, s2, absl::MakeSpan(out)).ok());
      const ComputedCheck second =
          verify(s2, c.s2, in_place ? c.state_box : p.spec(c.s2).full_box());
      EXPECT_EQ(second.mismatches, 0) << second.first_mismatch;
      const ComputedCheck final_check =
          verify(out, c.o, p.spec(c.o).full_box());
      EXPECT_EQ(final_check.elements, h * n * d);
      EXPECT_EQ(final_check.mismatches, 0) << final_check.first_mismatch;
      if (dtype == DType::kFloat32) {
        // The bound is tight enough to matter: under 1e-4 everywhere, and
        // an O off by 1e-3 fails on every element.
        for (int64_t e = 0; e < h * n * d; ++e) {
          const Expected want =
              *ref->Expect(c.o, {0, e / (n * d), e / d % n, e % d});
          const Tolerance tol = ToleranceFor(dtype, want.terms);
          EXPECT_LT(tol.abs + tol.rel * want.scale, 1e-4) << e;
        }
        std::vector<uint8_t> wrong = out;
        for (int64_t e = 0; e < h * n * d; ++e) {
          float x;
          std::memcpy(&x, wrong.data() + 4 * e, 4);
          x += 1e-3f;
          std::memcpy(wrong.data() + 4 * e, &x, 4);
        }
        EXPECT_EQ(verify(wrong, c.o, p.spec(c.o).full_box()).mismatches,
                  h * n * d);
      }
    }
  }
}

// Attention steps that do not fit their operands, or that name the wrong
// operands or an integer dtype, are refused by Create with the step and
// the field.
TEST(ReferenceTest, MalformedAttentionStepsAreRejected) {
  struct Case {
    std::function<void(v1::Plan*)> corrupt;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](v1::Plan* plan) {
         plan->mutable_steps(1)
             ->mutable_compute()
             ->mutable_attention_block()
             ->mutable_q_position()
             ->RemoveLast();
       },
       "step 2: attention_block.q_position has 15 entries; want q_rows = 16"},
      {[](v1::Plan* plan) {
         plan->mutable_steps(0)
             ->mutable_compute()
             ->mutable_attention_block()
             ->set_kv_heads(3);
       },
       "step 1: attention_block.heads = 4 is not a multiple of kv_heads = 3"},
      {[](v1::Plan* plan) {
         plan->mutable_steps(0)
             ->mutable_compute()
             ->mutable_attention_block()
             ->set_head_dim(4);
       },
       "step 1: attention_block: Q has 512 elements; want batch * heads * "
       "q_rows * head_dim = 1 * 4 * 16 * 4 = 256"},
      {[](v1::Plan* plan) { plan->mutable_steps(0)->mutable_inputs()->RemoveLast(); },
       "step 1: attention_block takes inputs [Q, K, V] or [Q, K, V, S] and "
       "outputs [S']; got 2 inputs"},
      {[](v1::Plan* plan) {
         plan->mutable_steps(2)
             ->mutable_compute()
             ->mutable_attention_finish()
             ->set_head_dim(7);
       },
       "step 3: attention_finish.head_dim = 7: S has 640 elements, not whole "
       "rows of head_dim + 2 = 9"},
      {[](v1::Plan* plan) {
         *plan->mutable_steps(2)->add_inputs() = plan->steps(2).inputs(0);
       },
       "step 3: attention_finish takes inputs [S] and outputs [O]; got 2"},
      {[](v1::Plan* plan) { plan->mutable_steps(2)->clear_compute(); },
       "step 3: OP_COMPUTE without an op; allowed: gemm, elementwise, gather, "
       "row_dot, attention_block, attention_finish"},
      {[](v1::Plan* plan) {
         for (int t = 0; t < plan->tensors_size(); ++t) {
           plan->mutable_tensors(t)->set_dtype(DTypeToProto(DType::kInt32));
         }
       },
       "step 1: attention_block on int32 is not defined; allowed dtypes: "
       "float16, bfloat16, float32, float64"},
      {[](v1::Plan* plan) {
         plan->mutable_steps()->DeleteSubrange(0, 2);
         for (int t = 0; t < plan->tensors_size(); ++t) {
           plan->mutable_tensors(t)->set_dtype(DTypeToProto(DType::kInt32));
         }
       },
       "step 3: attention_finish on int32 is not defined"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    AttentionChain chain = BuildAttentionChain(DType::kFloat32, false);
    v1::Plan plan = chain.p.plan();
    c.corrupt(&plan);
    const absl::Status status = Reference::Create(plan).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find(c.message), std::string::npos) << status;
  }
}

}  // namespace
}  // namespace meshcast::worker
