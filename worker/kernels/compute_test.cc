#include "worker/kernels/compute.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/kernels/element.h"
#include "worker/kernels/element_core.h"
#include "worker/kernels/initializer.h"

namespace meshcast::worker {
namespace {

std::vector<uint8_t> Random(DType dtype, int64_t n, int tensor) {
  TensorSpec spec{{n}, dtype};
  std::vector<uint8_t> buf(n * DTypeSize(dtype));
  v1::Initializer init;
  init.set_kind(v1::Initializer::KIND_RANDOM);
  init.set_seed(77);
  EXPECT_TRUE(
      FillInitializer(absl::MakeSpan(buf), spec.full_box(), spec, tensor, init)
          .ok());
  return buf;
}

double UnitRoundoff(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return std::ldexp(1.0, -11);
    case DType::kBFloat16:
      return std::ldexp(1.0, -8);
    case DType::kFloat32:
      return std::ldexp(1.0, -24);
    default:
      return std::ldexp(1.0, -53);
  }
}

// Every dtype, transpose combination, alpha and accumulate against a naive
// float64 triple loop. Tolerance: |error| <= (k * u_acc + 2 * u) * (sum_p
// |a b| + |c_old|) per element, u_acc the accumulation's unit roundoff
// (float for fp16/bf16) and u the dtype's (the final rounding, alpha).
TEST(ComputeTest, GemmMatchesNaiveLoop) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                      DType::kBFloat16}) {
    for (int variant = 0; variant < 16; ++variant) {
      v1::GemmAttrs g;
      g.set_m(13);
      g.set_n(7);
      g.set_k(33);
      g.set_trans_a(variant & 1);
      g.set_trans_b(variant & 2);
      g.set_alpha((variant & 4) ? -2.5 : 0.0);
      g.set_accumulate(variant & 8);
      const int64_t m = g.m(), n = g.n(), k = g.k();
      const int size = DTypeSize(dtype);
      const std::vector<uint8_t> a = Random(dtype, m * k, 1);
      const std::vector<uint8_t> b = Random(dtype, k * n, 2);
      std::vector<uint8_t> c = Random(dtype, m * n, 3);
      const std::vector<uint8_t> c_old = c;
      ASSERT_TRUE(RunGemm(g, dtype, a, b, absl::MakeSpan(c)).ok());
      const double alpha = g.alpha() == 0 ? 1 : g.alpha();
      const double u = UnitRoundoff(dtype);
      const double u_acc =
          dtype == DType::kFloat64 ? u : std::ldexp(1.0, -24);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0, mag = 0;
          for (int64_t p = 0; p < k; ++p) {
            const int64_t ai = g.trans_a() ? p * m + i : i * k + p;
            const int64_t bi = g.trans_b() ? j * k + p : p * n + j;
            const double x = LoadElement(dtype, a.data() + ai * size);
            const double y = LoadElement(dtype, b.data() + bi * size);
            sum += x * y;
            mag += std::abs(x * y);
          }
          double want = alpha * sum;
          mag *= std::abs(alpha);
          if (g.accumulate()) {
            const double old = LoadElement(dtype, c_old.data() + (i * n + j) * size);
            want += old;
            mag += std::abs(old);
          }
          const double got = LoadElement(dtype, c.data() + (i * n + j) * size);
          ASSERT_NEAR(got, want, (k * u_acc + 2 * u) * mag + 1e-30)
              << DTypeName(dtype) << " variant " << variant << " [" << i
              << "," << j << "]";
        }
      }
    }
  }
}

// The CPU engine runs one GEMM per device at once. Several threads started
// together, each with its own operands, must each get exactly the product
// the same call gives alone (a BLAS whose buffer allocator is not
// thread-safe hands two calls one packing buffer and mixes their inputs).
TEST(ComputeTest, ConcurrentGemmsGiveTheirOwnProducts) {
  constexpr int kThreads = 8, kRounds = 40;
  v1::GemmAttrs g;
  g.set_m(2048);
  g.set_n(4);
  g.set_k(256);
  std::vector<std::vector<uint8_t>> a, b, alone;
  for (int t = 0; t < kThreads; ++t) {
    a.push_back(Random(DType::kFloat32, g.m() * g.k(), 10 + t));
    b.push_back(Random(DType::kFloat32, g.k() * g.n(), 50 + t));
    alone.emplace_back(g.m() * g.n() * 4);
    ASSERT_TRUE(RunGemm(g, DType::kFloat32, a[t], b[t],
                        absl::MakeSpan(alone[t]))
                    .ok());
  }
  int wrong = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::vector<uint8_t>> c(kThreads,
                                        std::vector<uint8_t>(alone[0].size()));
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) {
        }
        (void)RunGemm(g, DType::kFloat32, a[t], b[t], absl::MakeSpan(c[t]));
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (int t = 0; t < kThreads; ++t) wrong += c[t] != alone[t];
  }
  EXPECT_EQ(wrong, 0) << "of " << kThreads * kRounds << " concurrent GEMMs";
}

TEST(ComputeTest, GemmSizeErrorsNameTheOperand) {
  v1::GemmAttrs g;
  g.set_m(4);
  g.set_n(3);
  g.set_k(2);
  std::vector<uint8_t> a(4 * 2 * 4), b(2 * 3 * 4 + 4), c(4 * 3 * 4);
  absl::Status s = RunGemm(g, DType::kFloat32, a, b, absl::MakeSpan(c));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("m=4 n=3 k=2"), std::string::npos) << s;
  EXPECT_NE(s.message().find("operand B"), std::string::npos) << s;
  g.set_m(-1);
  EXPECT_EQ(RunGemm(g, DType::kFloat32, a, b, absl::MakeSpan(c)).code(),
            absl::StatusCode::kInvalidArgument);
  g.set_m(4);
  std::vector<uint8_t> ai(8), bi(6), ci(12);
  EXPECT_EQ(RunGemm(g, DType::kInt8, ai, bi, absl::MakeSpan(ci)).code(),
            absl::StatusCode::kUnimplemented);
}

TEST(ComputeTest, GemmWithZeroKWritesZerosOrKeepsC) {
  v1::GemmAttrs g;
  g.set_m(2);
  g.set_n(2);
  g.set_k(0);
  std::vector<float> c = {1, 2, 3, 4};
  auto cs = absl::MakeSpan(reinterpret_cast<uint8_t*>(c.data()), 16);
  ASSERT_TRUE(RunGemm(g, DType::kFloat32, {}, {}, cs).ok());
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

// Elementwise ops against a loop over Load/StoreElement: exact (one rounding
// of a result that is exact in double, or integer wrap-around).
TEST(ComputeTest, ElementwiseMatchesLoop) {
  for (DType dtype : {DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64,
                      DType::kFloat16, DType::kBFloat16, DType::kFloat32,
                      DType::kFloat64}) {
    const int64_t n = 517;
    const int size = DTypeSize(dtype);
    const std::vector<uint8_t> x = Random(dtype, n, 1), y = Random(dtype, n, 2);
    std::vector<uint8_t> out(x.size()), want(x.size());
    v1::ElementwiseAttrs add;
    add.set_kind(v1::ElementwiseAttrs::KIND_ADD);
    ASSERT_TRUE(RunElementwise(add, dtype, {x, y}, absl::MakeSpan(out)).ok());
    for (int64_t i = 0; i < n; ++i) {
      if (IsIntegerDType(dtype)) {
        StoreInteger(dtype, want.data() + i * size,
                     LoadInteger(dtype, x.data() + i * size) +
                         LoadInteger(dtype, y.data() + i * size));
      } else {
        StoreElement(dtype, want.data() + i * size,
                     LoadElement(dtype, x.data() + i * size) +
                         LoadElement(dtype, y.data() + i * size));
      }
    }
    EXPECT_EQ(out, want) << "add " << DTypeName(dtype);

    v1::ElementwiseAttrs scale;
    scale.set_kind(v1::ElementwiseAttrs::KIND_SCALE);
    scale.set_alpha(IsIntegerDType(dtype) ? 3.0 : 0.375);
    ASSERT_TRUE(RunElementwise(scale, dtype, {x}, absl::MakeSpan(out)).ok());
    for (int64_t i = 0; i < n; ++i) {
      if (IsIntegerDType(dtype)) {
        StoreInteger(dtype, want.data() + i * size,
                     3 * LoadInteger(dtype, x.data() + i * size));
      } else {
        StoreElement(dtype, want.data() + i * size,
                     0.375 * LoadElement(dtype, x.data() + i * size));
      }
    }
    EXPECT_EQ(out, want) << "scale " << DTypeName(dtype);
  }
}

TEST(ComputeTest, ElementwiseErrors) {
  std::vector<uint8_t> x(16), y(12), out(16);
  v1::ElementwiseAttrs add;
  add.set_kind(v1::ElementwiseAttrs::KIND_ADD);
  EXPECT_EQ(RunElementwise(add, DType::kFloat32, {x}, absl::MakeSpan(out)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RunElementwise(add, DType::kFloat32, {x, y}, absl::MakeSpan(out)).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunElementwise(v1::ElementwiseAttrs(), DType::kFloat32, {x},
                           absl::MakeSpan(out))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScaleInteger(7, 2.0), 14);
  EXPECT_EQ(ScaleInteger(7, 0.5), 3);
  EXPECT_EQ(ScaleInteger(-7, 0.5), -3);
}

const DType kFloatTypes[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32,
                             DType::kFloat64};
const DType kAllTypes[] = {DType::kInt8,    DType::kUInt8,   DType::kInt32,
                           DType::kInt64,   DType::kFloat16, DType::kBFloat16,
                           DType::kFloat32, DType::kFloat64};

// `values` stored in `dtype`, one element each.
std::vector<uint8_t> Stored(DType dtype, const std::vector<double>& values) {
  const int size = DTypeSize(dtype);
  std::vector<uint8_t> bytes(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    StoreElement(dtype, bytes.data() + i * size, values[i]);
  }
  return bytes;
}

std::vector<double> Loaded(DType dtype, const std::vector<uint8_t>& bytes) {
  const int size = DTypeSize(dtype);
  std::vector<double> values(bytes.size() / size);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = LoadElement(dtype, bytes.data() + i * size);
  }
  return values;
}

v1::GatherAttrs Gather(int64_t row, int k, const std::vector<int64_t>& index) {
  v1::GatherAttrs g;
  g.set_row(row);
  g.set_k(k);
  for (int64_t i : index) g.add_index(i);
  return g;
}

// k = 1 without W: rows copied bit for bit in every dtype, -1 rows zeroed,
// rows picked twice or not at all; k = 0 reads as 1.
TEST(ComputeTest, GatherPermutesAndZeroesRowsExactly) {
  for (DType dtype : kAllTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const int size = DTypeSize(dtype);
    const int64_t row = 3;
    const std::vector<uint8_t> x = Random(dtype, 5 * row, 4);
    const std::vector<int64_t> index = {4, -1, 0, 2, 4};
    std::vector<uint8_t> y(index.size() * row * size, 0xAB);
    for (int k : {1, 0}) {
      ASSERT_TRUE(
          RunGather(Gather(row, k, index), dtype, x, {}, absl::MakeSpan(y))
              .ok());
      for (size_t i = 0; i < index.size(); ++i) {
        const std::vector<uint8_t> got(y.begin() + i * row * size,
                                       y.begin() + (i + 1) * row * size);
        std::vector<uint8_t> want(row * size, 0);
        if (index[i] >= 0) {
          want.assign(x.begin() + index[i] * row * size,
                      x.begin() + (index[i] + 1) * row * size);
        }
        EXPECT_EQ(got, want) << "row " << i << " k=" << k;
      }
    }
  }
}

// Y row i = sum_j w(i, j) X row index[i * 2 + j] by hand, exact in every
// float dtype (so the kernel must match to the bit): row 0 = 0.5 X0 - X2,
// row 1 = 2 X1 + 0.25 X1, row 2 = (nothing) - X0, row 3 all -1: zeros.
TEST(ComputeTest, GatherWeightedSumOfTwoMatchesHandComputedValues) {
  const std::vector<double> x = {1, 2, 3, 4, 5, 6};
  const std::vector<double> w = {0.5, -1, 2, 0.25, 7, -1, 3, 3};
  const std::vector<int64_t> index = {0, 2, 1, 1, -1, 0, -1, -1};
  const std::vector<double> want = {-4.5, -5, 6.75, 9, -1, -2, 0, 0};
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    std::vector<uint8_t> y(want.size() * DTypeSize(dtype));
    ASSERT_TRUE(RunGather(Gather(2, 2, index), dtype, Stored(dtype, x),
                          Stored(dtype, w), absl::MakeSpan(y))
                    .ok());
    EXPECT_EQ(Loaded(dtype, y), want);
  }
}

// Random operands, k = 3 with some -1 indices, against a float64 loop.
// Tolerance: (k * u_acc + u) * sum_j |w x| per element: k roundings of
// the accumulator (float for fp16/bf16, double for float32/float64) and one
// of the store to the dtype.
TEST(ComputeTest, GatherWeightedMatchesFloat64Loop) {
  const int64_t row = 37, rows_x = 11, rows_y = 9, k = 3;
  std::vector<int64_t> index;
  for (int64_t e = 0; e < rows_y * k; ++e) {
    index.push_back(e % 7 == 3 ? -1 : (e * 5 + 2) % rows_x);
  }
  const v1::GatherAttrs g = Gather(row, k, index);
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const int size = DTypeSize(dtype);
    const std::vector<uint8_t> x = Random(dtype, rows_x * row, 1);
    const std::vector<uint8_t> w = Random(dtype, rows_y * k, 2);
    std::vector<uint8_t> y(rows_y * row * size);
    ASSERT_TRUE(RunGather(g, dtype, x, w, absl::MakeSpan(y)).ok());
    const double u = UnitRoundoff(dtype);
    const double u_acc = dtype == DType::kFloat16 || dtype == DType::kBFloat16
                             ? std::ldexp(1.0, -24)
                             : std::ldexp(1.0, -53);
    for (int64_t i = 0; i < rows_y; ++i) {
      for (int64_t c = 0; c < row; ++c) {
        double sum = 0, mag = 0;
        for (int64_t j = 0; j < k; ++j) {
          const int64_t r = index[i * k + j];
          if (r < 0) continue;
          const double p = LoadElement(dtype, w.data() + (i * k + j) * size) *
                           LoadElement(dtype, x.data() + (r * row + c) * size);
          sum += p;
          mag += std::abs(p);
        }
        ASSERT_NEAR(LoadElement(dtype, y.data() + (i * row + c) * size), sum,
                    (k * u_acc + u) * mag + 1e-300)
            << "[" << i << "," << c << "]";
      }
    }
  }
}

// fp16 sums are rounded once, from float: 1 + 2^-11 + 2^-11 is 1 + 2^-10
// (an fp16), where rounding to fp16 after each addition would give 1 (each
// 1 + 2^-11 is a tie that rounds to even).
TEST(ComputeTest, GatherRoundsAHalfPrecisionSumOnce) {
  const double tiny = std::ldexp(1.0, -11);
  const std::vector<uint8_t> x = Stored(DType::kFloat16, {1.0, tiny, tiny});
  std::vector<uint8_t> y(2);
  ASSERT_TRUE(RunGather(Gather(1, 3, {0, 1, 2}), DType::kFloat16, x, {},
                        absl::MakeSpan(y))
                  .ok());
  EXPECT_EQ(LoadElement(DType::kFloat16, y.data()), 1.0 + 2 * tiny);
  // The same with weights: 0.5 * 2 + 0.5 * 2^-10 + 0.5 * 2^-10.
  const std::vector<uint8_t> x2 =
      Stored(DType::kFloat16, {2.0, 2 * tiny, 2 * tiny});
  ASSERT_TRUE(RunGather(Gather(1, 3, {0, 1, 2}), DType::kFloat16, x2,
                        Stored(DType::kFloat16, {0.5, 0.5, 0.5}),
                        absl::MakeSpan(y))
                  .ok());
  EXPECT_EQ(LoadElement(DType::kFloat16, y.data()), 1.0 + 2 * tiny);
}

// Integers: unweighted sums wrap to the width (int8 100 + 100 = -56, uint8
// 200 + 100 = 44); weights are refused.
TEST(ComputeTest, GatherOfIntegersWrapsAndRefusesWeights) {
  std::vector<uint8_t> y(2);
  ASSERT_TRUE(RunGather(Gather(1, 2, {0, 0, 1, -1}), DType::kInt8,
                        Stored(DType::kInt8, {100, -3}), {}, absl::MakeSpan(y))
                  .ok());
  EXPECT_EQ(Loaded(DType::kInt8, y), (std::vector<double>{-56, -3}));
  ASSERT_TRUE(RunGather(Gather(1, 2, {0, 1, 1, 1}), DType::kUInt8,
                        Stored(DType::kUInt8, {200, 100}), {},
                        absl::MakeSpan(y))
                  .ok());
  EXPECT_EQ(Loaded(DType::kUInt8, y), (std::vector<double>{44, 200}));
  std::vector<uint8_t> y32(8);
  const absl::Status weighted =
      RunGather(Gather(1, 1, {0, 0}), DType::kInt32, Stored(DType::kInt32, {7}),
                Stored(DType::kInt32, {1, 2}), absl::MakeSpan(y32));
  EXPECT_EQ(weighted.code(), absl::StatusCode::kUnimplemented) << weighted;
  EXPECT_NE(weighted.message().find("float32"), std::string::npos) << weighted;
}

// Y may be X itself: the rows are read as they were before the step.
TEST(ComputeTest, GatherInPlaceReadsTheOldRows) {
  std::vector<uint8_t> xy = Stored(DType::kFloat32, {1, 2, 3, 4, 5, 6});
  const absl::Span<const uint8_t> x(xy.data(), xy.size());
  ASSERT_TRUE(RunGather(Gather(2, 1, {2, 0, 1}), DType::kFloat32, x, {},
                        absl::MakeSpan(xy))
                  .ok());
  EXPECT_EQ(Loaded(DType::kFloat32, xy),
            (std::vector<double>{5, 6, 1, 2, 3, 4}));
  xy = Stored(DType::kFloat32, {1, 2, 3, 4, 5, 6});
  ASSERT_TRUE(RunGather(Gather(2, 2, {2, 0, 1, 1, 0, -1}), DType::kFloat32,
                        absl::Span<const uint8_t>(xy.data(), xy.size()), {},
                        absl::MakeSpan(xy))
                  .ok());
  EXPECT_EQ(Loaded(DType::kFloat32, xy),
            (std::vector<double>{6, 8, 6, 8, 1, 2}));
}

// Attributes that do not fit the operands: INVALID_ARGUMENT naming the
// field and what is allowed.
TEST(ComputeTest, GatherErrorsNameTheField) {
  const std::vector<uint8_t> x = Stored(DType::kFloat32, {1, 2, 3, 4, 5, 6});
  std::vector<uint8_t> y(4 * 4);
  struct Case {
    v1::GatherAttrs attrs;
    std::vector<uint8_t> w;
    size_t y_bytes;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Gather(0, 1, {0, 1}), {}, 16, "gather.row = 0 must be >= 1"},
      {Gather(2, -1, {0, 1}), {}, 16, "gather.k = -1 must be >= 0"},
      {Gather(4, 1, {0}), {}, 16, "X has 6 elements and Y 4"},
      {Gather(2, 1, {0}),
       {},
       16,
       "gather.index has 1 entries; it needs rows(Y) * k = 2 * 1 = 2"},
      {Gather(2, 1, {0, 3}),
       {},
       16,
       "gather.index[1] = 3 is outside [-1, rows(X) = 3)"},
      {Gather(2, 1, {-2, 0}), {}, 16, "gather.index[0] = -2"},
      {Gather(2, 2, {0, 1, 2, 0}), Stored(DType::kFloat32, {1, 2, 3}), 16,
       "W has 3 elements; it needs rows(Y) * k = 2 * 2 = 4"},
      {Gather(2, 1, {0, 1}), {}, 15, "multiple of 4"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    const absl::Status s = RunGather(c.attrs, DType::kFloat32, x, c.w,
                                     absl::MakeSpan(y.data(), c.y_bytes));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s;
  }
}

// RELU and SIGMOID in every float dtype: hand-picked values (exact
// expectations where the result is exact: relu everywhere, sigmoid(0) =
// 0.5, saturation to 1) and random values within one rounding of the
// float64 function (sigmoid is computed in double, rounded once).
TEST(ComputeTest, ReluAndSigmoidValues) {
  const std::vector<double> x = {-1.5, -0.0, 0.0, 2.25, -100, 100, 0.75};
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const std::vector<uint8_t> in = Stored(dtype, x);
    std::vector<uint8_t> out(in.size());
    v1::ElementwiseAttrs relu;
    relu.set_kind(v1::ElementwiseAttrs::KIND_RELU);
    ASSERT_TRUE(RunElementwise(relu, dtype, {in}, absl::MakeSpan(out)).ok());
    EXPECT_EQ(Loaded(dtype, out),
              (std::vector<double>{0, 0, 0, 2.25, 0, 100, 0.75}));
    EXPECT_FALSE(std::signbit(LoadElement(dtype, out.data())));  // +0

    v1::ElementwiseAttrs sigmoid;
    sigmoid.set_kind(v1::ElementwiseAttrs::KIND_SIGMOID);
    ASSERT_TRUE(RunElementwise(sigmoid, dtype, {in}, absl::MakeSpan(out)).ok());
    const std::vector<double> got = Loaded(dtype, out);
    EXPECT_EQ(got[1], 0.5);
    EXPECT_EQ(got[2], 0.5);
    EXPECT_EQ(got[5], 1.0);
    EXPECT_GE(got[4], 0.0);
    EXPECT_LT(got[4], 1e-40);
    const double u = UnitRoundoff(dtype);
    for (size_t i = 0; i < x.size(); ++i) {
      const double want =
          1.0 / (1.0 + std::exp(-LoadElement(
                           dtype, in.data() + i * DTypeSize(dtype))));
      // 1e-30: sigmoid(-100) underflows to zero in fp16 and bf16.
      EXPECT_NEAR(got[i], want, u * want * 1.0001 + 1e-30) << x[i];
    }
    const std::vector<uint8_t> random = Random(dtype, 301, 6);
    std::vector<uint8_t> r(random.size());
    ASSERT_TRUE(
        RunElementwise(sigmoid, dtype, {random}, absl::MakeSpan(r)).ok());
    for (int64_t i = 0; i < 301; ++i) {
      const double v = LoadElement(dtype, random.data() + i * DTypeSize(dtype));
      const double want = 1.0 / (1.0 + std::exp(-v));
      ASSERT_NEAR(LoadElement(dtype, r.data() + i * DTypeSize(dtype)), want,
                  u * want * 1.0001)
          << v;
    }
  }
}

TEST(ComputeTest, ReluAndSigmoidRefuseIntegers) {
  for (auto kind :
       {v1::ElementwiseAttrs::KIND_RELU, v1::ElementwiseAttrs::KIND_SIGMOID}) {
    v1::ElementwiseAttrs attrs;
    attrs.set_kind(kind);
    std::vector<uint8_t> in(8), out(8);
    const absl::Status s =
        RunElementwise(attrs, DType::kInt32, {in}, absl::MakeSpan(out));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("allowed dtypes: float16, bfloat16, float32, "
                               "float64"),
              std::string::npos)
        << s;
    EXPECT_EQ(
        RunElementwise(attrs, DType::kFloat32, {in, in}, absl::MakeSpan(out))
            .code(),
        absl::StatusCode::kInvalidArgument);
  }
}

// The smallest subnormal of a float dtype: the error of one rounding of a
// result that underflows is at most half of it.
double SmallestSubnormal(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return std::ldexp(1.0, -24);
    case DType::kBFloat16:
      return std::ldexp(1.0, -133);
    case DType::kFloat32:
      return std::ldexp(1.0, -149);
    default:
      return std::ldexp(1.0, -1074);
  }
}

// The unit roundoff of the arithmetic SIGMOID_GRAD and the row dot use
// before their final rounding: float for fp16/bf16, double otherwise.
double AccumulatorRoundoff(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kBFloat16
             ? std::ldexp(1.0, -24)
             : std::ldexp(1.0, -53);
}

v1::ElementwiseAttrs Kind(v1::ElementwiseAttrs::Kind kind) {
  v1::ElementwiseAttrs attrs;
  attrs.set_kind(kind);
  return attrs;
}

// RELU_GRAD in every float dtype: in0 where in1 > 0, +0 where in1 is
// negative, +-0 or NaN, bit for bit (in0's NaN and -0 included); on random
// values too.
// The float32 loops of RELU and RELU_GRAD give element_core.h's bits (the
// GPU's) for every value: signed zeros, NaNs, infinities, denormals.
TEST(ComputeTest, Float32ReluLoopsGiveTheCoreBits) {
  std::vector<uint32_t> bits = {0x00000000, 0x80000000, 0x7fc00000, 0xffc00000,
                                0x7f800000, 0xff800000, 0x00000001, 0x80000001,
                                0x3f800000, 0xbf800000};
  uint32_t x = 12345;
  for (int i = 0; i < 1000; ++i) bits.push_back(x = x * 1664525u + 1013904223u);
  const size_t n = bits.size();
  std::vector<uint8_t> a(n * 4), b(n * 4), out(n * 4);
  std::memcpy(a.data(), bits.data(), n * 4);
  std::reverse(bits.begin(), bits.end());
  std::memcpy(b.data(), bits.data(), n * 4);
  ASSERT_TRUE(RunElementwise(Kind(v1::ElementwiseAttrs::KIND_RELU),
                             DType::kFloat32, {a}, absl::MakeSpan(out))
                  .ok());
  for (size_t i = 0; i < n; ++i) {
    uint32_t in = 0, got = 0;
    std::memcpy(&in, a.data() + 4 * i, 4);
    std::memcpy(&got, out.data() + 4 * i, 4);
    ASSERT_EQ(got, ReluBits(PatternType::kFloat32, in)) << std::hex << in;
  }
  ASSERT_TRUE(RunElementwise(Kind(v1::ElementwiseAttrs::KIND_RELU_GRAD),
                             DType::kFloat32, {a, b}, absl::MakeSpan(out))
                  .ok());
  for (size_t i = 0; i < n; ++i) {
    uint32_t g = 0, y = 0, got = 0;
    std::memcpy(&g, a.data() + 4 * i, 4);
    std::memcpy(&y, b.data() + 4 * i, 4);
    std::memcpy(&got, out.data() + 4 * i, 4);
    ASSERT_EQ(got, ReluGradBits(PatternType::kFloat32, g, y))
        << std::hex << g << " " << y;
  }
}

TEST(ComputeTest, ReluGradValues) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> g = {1.5, -2.25, 3, -0.5, 7, 0.75, -0.0, nan, 4};
  const std::vector<double> y = {1, 2, 0, -0.0, -1, nan, 5, 0.25, 1e-30};
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const int size = DTypeSize(dtype);
    const std::vector<uint8_t> in0 = Stored(dtype, g), in1 = Stored(dtype, y);
    std::vector<uint8_t> out(in0.size(), 0xAB);
    ASSERT_TRUE(RunElementwise(Kind(v1::ElementwiseAttrs::KIND_RELU_GRAD),
                               dtype, {in0, in1}, absl::MakeSpan(out))
                    .ok());
    const std::vector<double> got = Loaded(dtype, out);
    // 1e-30 is positive in float32 / float64 / bf16 and flushes to +0 in
    // fp16, which masks.
    const double last = dtype == DType::kFloat16 ? 0.0 : 4.0;
    const std::vector<double> want = {1.5, -2.25, 0, 0, 0, 0, -0.0, 0, last};
    for (size_t i = 0; i < want.size(); ++i) {
      if (i == 7) {
        EXPECT_TRUE(std::isnan(got[i]));  // in0's NaN, in1 > 0
        continue;
      }
      EXPECT_EQ(got[i], want[i]) << i;
      EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << i;
    }
    // Random: exactly in0's bits or +0.
    const std::vector<uint8_t> a = Random(dtype, 301, 7),
                               b = Random(dtype, 301, 8);
    std::vector<uint8_t> r(a.size());
    ASSERT_TRUE(RunElementwise(Kind(v1::ElementwiseAttrs::KIND_RELU_GRAD),
                               dtype, {a, b}, absl::MakeSpan(r))
                    .ok());
    for (int64_t i = 0; i < 301; ++i) {
      const bool pass = LoadElement(dtype, b.data() + i * size) > 0;
      std::vector<uint8_t> want_bits(size, 0);
      if (pass) {
        want_bits.assign(a.begin() + i * size, a.begin() + (i + 1) * size);
      }
      ASSERT_EQ(std::vector<uint8_t>(r.begin() + i * size,
                                     r.begin() + (i + 1) * size),
                want_bits)
          << i;
    }
  }
}

// SIGMOID_GRAD in every float dtype: hand-picked values whose results are
// exact in every dtype (so the kernel must match them exactly), then
// random gradients times random SIGMOID outputs against the float64
// product. Tolerance: (u + 3 u_acc) |want| + the smallest subnormal: three
// roundings in the accumulator arithmetic (float for fp16/bf16, double
// otherwise; float64: u_acc = u) and the final one to the dtype.
TEST(ComputeTest, SigmoidGradValues) {
  const std::vector<double> g = {2, -4, 1, 0.5, -3, 0};
  const std::vector<double> s = {0.5, 0.25, 0, 1, 0.75, 0.5};
  const std::vector<double> want = {0.5, -0.75, 0, 0, -0.5625, 0};
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const int size = DTypeSize(dtype);
    std::vector<uint8_t> out(g.size() * size);
    ASSERT_TRUE(RunElementwise(Kind(v1::ElementwiseAttrs::KIND_SIGMOID_GRAD),
                               dtype, {Stored(dtype, g), Stored(dtype, s)},
                               absl::MakeSpan(out))
                    .ok());
    EXPECT_EQ(Loaded(dtype, out), want);

    const int64_t n = 301;
    const std::vector<uint8_t> grad = Random(dtype, n, 9);
    const std::vector<uint8_t> logits = Random(dtype, n, 10);
    std::vector<uint8_t> sig(logits.size()), r(logits.size());
    ASSERT_TRUE(RunElementwise(Kind(v1::ElementwiseAttrs::KIND_SIGMOID), dtype,
                               {logits}, absl::MakeSpan(sig))
                    .ok());
    ASSERT_TRUE(RunElementwise(Kind(v1::ElementwiseAttrs::KIND_SIGMOID_GRAD),
                               dtype, {grad, sig}, absl::MakeSpan(r))
                    .ok());
    const double u = UnitRoundoff(dtype);
    const double u_acc = AccumulatorRoundoff(dtype);
    for (int64_t i = 0; i < n; ++i) {
      const double gv = LoadElement(dtype, grad.data() + i * size);
      const double sv = LoadElement(dtype, sig.data() + i * size);
      const double expect = gv * sv * (1 - sv);
      ASSERT_NEAR(LoadElement(dtype, r.data() + i * size), expect,
                  (u + 3 * u_acc) * std::abs(expect) * 1.0001 +
                      SmallestSubnormal(dtype))
          << gv << " * " << sv;
    }
  }
}

TEST(ComputeTest, GradientsRefuseIntegersAndTakeTwoInputs) {
  for (auto kind : {v1::ElementwiseAttrs::KIND_RELU_GRAD,
                    v1::ElementwiseAttrs::KIND_SIGMOID_GRAD}) {
    SCOPED_TRACE(ElementwiseName(kind));
    EXPECT_TRUE(ElementwiseNeedsFloat(kind));
    EXPECT_EQ(ElementwiseInputs(kind), 2);
    std::vector<uint8_t> in(8), out(8);
    absl::Status s = RunElementwise(Kind(kind), DType::kInt32, {in, in},
                                    absl::MakeSpan(out));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(absl::StrCat(
                  "elementwise ", ElementwiseName(kind),
                  " on int32 is not defined; allowed dtypes: float16, "
                  "bfloat16, float32, float64")),
              std::string::npos)
        << s;
    s = RunElementwise(Kind(kind), DType::kFloat32, {in}, absl::MakeSpan(out));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("takes 2 inputs, got 1"), std::string::npos)
        << s;
  }
  EXPECT_STREQ(ElementwiseName(v1::ElementwiseAttrs::KIND_RELU_GRAD),
               "relu_grad");
  EXPECT_STREQ(ElementwiseName(v1::ElementwiseAttrs::KIND_SIGMOID_GRAD),
               "sigmoid_grad");
  EXPECT_NE(std::string(kElementwiseKinds).find("KIND_SIGMOID_GRAD"),
            std::string::npos);
}

v1::RowDotAttrs RowDot(int64_t row, const std::vector<int64_t>& index) {
  v1::RowDotAttrs r;
  r.set_row(row);
  for (int64_t i : index) r.add_index(i);
  return r;
}

// D element i = A row index[2 i] . B row index[2 i + 1] by hand, exact in
// every float dtype (so the kernel must match to the bit): A = [1 2; 3 4;
// -0.5 0.25], B = [0.5 -1; 2 8]; a -1 on either side gives +0.
TEST(ComputeTest, RowDotMatchesHandComputedValues) {
  const std::vector<double> a = {1, 2, 3, 4, -0.5, 0.25};
  const std::vector<double> b = {0.5, -1, 2, 8};
  const std::vector<int64_t> index = {0, 1, 2, 0, -1, 1, 1, -1, 1, 1, -1, -1};
  const std::vector<double> want = {18, -0.5, 0, 0, 38, 0};
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    std::vector<uint8_t> d(want.size() * DTypeSize(dtype), 0xAB);
    ASSERT_TRUE(RunRowDot(RowDot(2, index), dtype, Stored(dtype, a),
                          Stored(dtype, b), absl::MakeSpan(d))
                    .ok());
    const std::vector<double> got = Loaded(dtype, d);
    EXPECT_EQ(got, want);
    for (double v : got) {
      if (v == 0) EXPECT_FALSE(std::signbit(v));  // zeros are +0
    }
  }
}

// Random operands, row 37, some -1 indices, against a float64 loop.
// Tolerance: (row * u_acc + u) * sum_c |a b| per element: row roundings of
// the accumulator (float for fp16/bf16, double for float32/float64) and
// one of the store to the dtype.
TEST(ComputeTest, RowDotMatchesFloat64Loop) {
  const int64_t row = 37, rows_a = 11, rows_b = 6, count = 23;
  std::vector<int64_t> index;
  for (int64_t i = 0; i < count; ++i) {
    index.push_back(i % 9 == 4 ? -1 : (i * 5 + 2) % rows_a);
    index.push_back(i % 7 == 3 ? -1 : (i * 3 + 1) % rows_b);
  }
  const v1::RowDotAttrs r = RowDot(row, index);
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const int size = DTypeSize(dtype);
    const std::vector<uint8_t> a = Random(dtype, rows_a * row, 1);
    const std::vector<uint8_t> b = Random(dtype, rows_b * row, 2);
    std::vector<uint8_t> d(count * size);
    ASSERT_TRUE(RunRowDot(r, dtype, a, b, absl::MakeSpan(d)).ok());
    const double u = UnitRoundoff(dtype);
    const double u_acc = AccumulatorRoundoff(dtype);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t ra = index[2 * i], rb = index[2 * i + 1];
      double sum = 0, mag = 0;
      if (ra >= 0 && rb >= 0) {
        for (int64_t c = 0; c < row; ++c) {
          const double p =
              LoadElement(dtype, a.data() + (ra * row + c) * size) *
              LoadElement(dtype, b.data() + (rb * row + c) * size);
          sum += p;
          mag += std::abs(p);
        }
      }
      const double got = LoadElement(dtype, d.data() + i * size);
      if (ra < 0 || rb < 0) {
        EXPECT_EQ(got, 0.0) << i;
        continue;
      }
      ASSERT_NEAR(got, sum, (row * u_acc + u) * mag + 1e-300) << i;
    }
  }
}

// fp16 sums are rounded once, from float: 1 + 2^-11 + 2^-11 is 1 + 2^-10,
// where rounding to fp16 after each addition would give 1.
TEST(ComputeTest, RowDotRoundsAHalfPrecisionSumOnce) {
  const double tiny = std::ldexp(1.0, -11);
  std::vector<uint8_t> d(2);
  ASSERT_TRUE(RunRowDot(RowDot(3, {0, 0}), DType::kFloat16,
                        Stored(DType::kFloat16, {1.0, tiny, tiny}),
                        Stored(DType::kFloat16, {1, 1, 1}), absl::MakeSpan(d))
                  .ok());
  EXPECT_EQ(LoadElement(DType::kFloat16, d.data()), 1.0 + 2 * tiny);
}

// D may overlap A (or B): the rows are read as they were before the step.
TEST(ComputeTest, RowDotInPlaceReadsTheOldRows) {
  std::vector<uint8_t> ab = Stored(DType::kFloat32, {1, 2, 3, 4});
  const absl::Span<const uint8_t> a(ab.data(), ab.size());
  // D = the first two elements of A: [A0.A1, A1.A1] = [11, 25].
  ASSERT_TRUE(RunRowDot(RowDot(2, {0, 1, 1, 1}), DType::kFloat32, a, a,
                        absl::MakeSpan(ab.data(), 8))
                  .ok());
  EXPECT_EQ(Loaded(DType::kFloat32, ab), (std::vector<double>{11, 25, 3, 4}));
}

// Attributes that do not fit the operands, and integer dtypes:
// INVALID_ARGUMENT naming the field and what is allowed.
TEST(ComputeTest, RowDotErrorsNameTheField) {
  const std::vector<uint8_t> a = Stored(DType::kFloat32, {1, 2, 3, 4, 5, 6});
  const std::vector<uint8_t> b = Stored(DType::kFloat32, {1, 2, 3, 4});
  std::vector<uint8_t> d(2 * 4);
  struct Case {
    v1::RowDotAttrs attrs;
    size_t d_bytes;
    std::string message;
  };
  const std::vector<Case> cases = {
      {RowDot(0, {0, 0, 0, 0}), 8, "row_dot.row = 0 must be >= 1"},
      {RowDot(-3, {0, 0, 0, 0}), 8, "row_dot.row = -3 must be >= 1"},
      {RowDot(4, {0, 0, 0, 0}), 8,
       "row_dot.row = 4: A has 6 elements and B 4; both must be whole rows"},
      {RowDot(3, {0, 0, 0, 0}), 8, "B 4; both must be whole rows"},
      {RowDot(2, {0, 0}), 8,
       "row_dot.index has 2 entries; it needs 2 * elements(D) = 2 * 2 = 4"},
      {RowDot(2, {0, 0, 3, 0}), 8,
       "row_dot.index[2] = 3 is outside [-1, rows(A) = 3)"},
      {RowDot(2, {0, 0, 1, 2}), 8,
       "row_dot.index[3] = 2 is outside [-1, rows(B) = 2)"},
      {RowDot(2, {-2, 0, 0, 0}), 8, "row_dot.index[0] = -2"},
      {RowDot(2, {0, 0, 0, 0}), 7, "multiple of 4"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    const absl::Status s = RunRowDot(c.attrs, DType::kFloat32, a, b,
                                     absl::MakeSpan(d.data(), c.d_bytes));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s;
  }
  EXPECT_TRUE(CheckRowDot(RowDot(2, {2, 1, -1, -1}), 6, 4, 2).ok());
  for (DType dtype :
       {DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64}) {
    SCOPED_TRACE(DTypeName(dtype));
    std::vector<uint8_t> ia(4 * DTypeSize(dtype)), id(DTypeSize(dtype));
    const absl::Status s =
        RunRowDot(RowDot(2, {0, 1}), dtype, ia, ia, absl::MakeSpan(id));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(absl::StrCat(
                  "row_dot on ", DTypeName(dtype),
                  " is not defined; allowed dtypes: float16, bfloat16, "
                  "float32, float64")),
              std::string::npos)
        << s;
  }
}

}  // namespace
}  // namespace meshcast::worker
