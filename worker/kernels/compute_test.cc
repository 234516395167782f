#include "worker/kernels/compute.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kernels/element.h"
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

}  // namespace
}  // namespace meshcast::worker
