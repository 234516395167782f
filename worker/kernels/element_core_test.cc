// Host-only (no GPU): the element arithmetic the GPU kernels run
// (element_core.h) gives the CPU backend's bits, for every dtype, on random
// and special values (signed zeros, infinities, NaN, subnormals, the
// largest finite values, integer extremes); the GPU gather's and row dot's
// per-element loops give RunGather's and RunRowDot's bits; and the RANDOM
// initializer's shared core gives FillInitializer's bits.
#include "worker/kernels/element_core.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/kernels/compute.h"
#include "worker/kernels/element.h"
#include "worker/kernels/initializer.h"
#include "worker/kernels/initializer_core.h"
#include "worker/kernels/reduce.h"

namespace meshcast::worker {
namespace {

const DType kAllTypes[] = {DType::kInt8,    DType::kUInt8,   DType::kInt32,
                           DType::kInt64,   DType::kFloat16, DType::kBFloat16,
                           DType::kFloat32, DType::kFloat64};

uint64_t Bits(DType dtype, const std::vector<uint8_t>& bytes, int64_t i) {
  const int size = DTypeSize(dtype);
  uint64_t bits = 0;
  std::memcpy(&bits, bytes.data() + i * size, size);
  return bits;
}

void SetBits(DType dtype, std::vector<uint8_t>& bytes, int64_t i,
             uint64_t bits) {
  const int size = DTypeSize(dtype);
  std::memcpy(bytes.data() + i * size, &bits, size);
}

// `n` elements: random bits, then every value of `specials` stored in the
// dtype, so that each special meets random values and every other special.
std::vector<uint8_t> Elements(DType dtype, int64_t n, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<uint8_t> bytes(n * DTypeSize(dtype));
  for (int64_t i = 0; i < n; ++i) SetBits(dtype, bytes, i, random());
  const double specials[] = {0.0,
                             -0.0,
                             1.0,
                             -1.5,
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN(),
                             65504.0,
                             3.0e38,
                             1.0e300,
                             6.0e-8,
                             1.0e-40,
                             127.0,
                             -128.0,
                             255.0,
                             2147483647.0,
                             -9.2e18};
  int64_t i = 0;
  for (double value : specials) {
    for (int repeat = 0; repeat < 19 && i < n; ++repeat, i += 7) {
      StoreElement(dtype, bytes.data() + i * DTypeSize(dtype), value);
    }
  }
  return bytes;
}

TEST(ElementCoreTest, ReduceBitsMatchesReduceInto) {
  constexpr int64_t kCount = 1 << 14;
  for (DType dtype : kAllTypes) {
    for (v1::Reduction reduction : {v1::REDUCTION_SUM, v1::REDUCTION_MAX}) {
      const std::vector<uint8_t> in = Elements(dtype, kCount, 1);
      const std::vector<uint8_t> start = Elements(dtype, kCount, 2);
      std::vector<uint8_t> host = start;
      ASSERT_TRUE(ReduceInto(reduction, dtype, in, absl::MakeSpan(host)).ok());
      const PatternType type = KernelPatternType(dtype);
      int64_t differ = 0;
      for (int64_t i = 0; i < kCount; ++i) {
        const uint64_t core =
            ReduceBits(type, reduction == v1::REDUCTION_MAX,
                       Bits(dtype, start, i), Bits(dtype, in, i));
        if (core != Bits(dtype, host, i)) {
          if (differ++ < 3) {
            ADD_FAILURE() << DTypeName(dtype) << " "
                          << v1::Reduction_Name(reduction) << " element " << i
                          << ": core 0x" << std::hex << core << ", host 0x"
                          << Bits(dtype, host, i);
          }
        }
      }
      EXPECT_EQ(differ, 0) << DTypeName(dtype) << " "
                           << v1::Reduction_Name(reduction);
    }
  }
}

TEST(ElementCoreTest, AddAndScaleBitsMatchRunElementwise) {
  constexpr int64_t kCount = 1 << 13;
  const double alphas[] = {0.5,     -3.0,   2.0,      1.0e10,
                           0.1,     -0.0,   1.0e-300, 9.3e18,
                           -2.5e19, 1.0e30, 7.0};
  for (DType dtype : kAllTypes) {
    const PatternType type = KernelPatternType(dtype);
    const std::vector<uint8_t> a = Elements(dtype, kCount, 3);
    const std::vector<uint8_t> b = Elements(dtype, kCount, 4);
    std::vector<uint8_t> host(a.size());
    v1::ElementwiseAttrs add;
    add.set_kind(v1::ElementwiseAttrs::KIND_ADD);
    ASSERT_TRUE(RunElementwise(add, dtype, {a, b}, absl::MakeSpan(host)).ok());
    int64_t differ = 0;
    for (int64_t i = 0; i < kCount; ++i) {
      differ += AddBits(type, Bits(dtype, a, i), Bits(dtype, b, i)) !=
                Bits(dtype, host, i);
    }
    EXPECT_EQ(differ, 0) << DTypeName(dtype) << " ADD";
    for (double alpha : alphas) {
      v1::ElementwiseAttrs scale;
      scale.set_kind(v1::ElementwiseAttrs::KIND_SCALE);
      scale.set_alpha(alpha);
      ASSERT_TRUE(
          RunElementwise(scale, dtype, {a}, absl::MakeSpan(host)).ok());
      differ = 0;
      for (int64_t i = 0; i < kCount; ++i) {
        const uint64_t core = ScaleBits(type, alpha, Bits(dtype, a, i));
        if (core != Bits(dtype, host, i) && differ++ < 3) {
          ADD_FAILURE() << DTypeName(dtype) << " SCALE " << alpha
                        << " element " << i << ": core 0x" << std::hex << core
                        << ", host 0x" << Bits(dtype, host, i);
        }
      }
      EXPECT_EQ(differ, 0) << DTypeName(dtype) << " SCALE " << alpha;
    }
  }
}

// RELU and SIGMOID on special and random bits: the host kernel's bits are
// the core's (what the GPU runs), and they mean what compute.h says.
TEST(ElementCoreTest, ReluAndSigmoidBitsMatchRunElementwise) {
  constexpr int64_t kCount = 1 << 12;
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const PatternType type = KernelPatternType(dtype);
    const std::vector<uint8_t> a = Elements(dtype, kCount, 5);
    std::vector<uint8_t> relu(a.size()), sigmoid(a.size());
    v1::ElementwiseAttrs attrs;
    attrs.set_kind(v1::ElementwiseAttrs::KIND_RELU);
    ASSERT_TRUE(RunElementwise(attrs, dtype, {a}, absl::MakeSpan(relu)).ok());
    attrs.set_kind(v1::ElementwiseAttrs::KIND_SIGMOID);
    ASSERT_TRUE(
        RunElementwise(attrs, dtype, {a}, absl::MakeSpan(sigmoid)).ok());
    const int size = DTypeSize(dtype);
    for (int64_t i = 0; i < kCount; ++i) {
      const uint64_t x = Bits(dtype, a, i);
      ASSERT_EQ(ReluBits(type, x), Bits(dtype, relu, i)) << i;
      ASSERT_EQ(SigmoidBits(type, x), Bits(dtype, sigmoid, i)) << i;
      const double v = LoadElement(dtype, a.data() + i * size);
      const double r = LoadElement(dtype, relu.data() + i * size);
      const double s = LoadElement(dtype, sigmoid.data() + i * size);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(r) && std::isnan(s)) << i;
        continue;
      }
      EXPECT_EQ(r, v < 0 ? 0.0 : v) << v;
      EXPECT_FALSE(v < 0 && std::signbit(r)) << v;  // +0, not -0
      EXPECT_TRUE(s >= 0 && s <= 1) << v << " -> " << s;
      if (std::isinf(v)) {
        EXPECT_EQ(s, v > 0 ? 1.0 : 0.0) << v;
      }
    }
  }
}

// RELU_GRAD and SIGMOID_GRAD on special and random bits, every special
// meeting every other on either side: the host kernel's bits are the
// core's (what the GPU runs), and they mean what compute.h says.
TEST(ElementCoreTest, ReluGradAndSigmoidGradBitsMatchRunElementwise) {
  constexpr int64_t kCount = 1 << 12;
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const PatternType type = KernelPatternType(dtype);
    const std::vector<uint8_t> g = Elements(dtype, kCount, 11);
    const std::vector<uint8_t> y = Elements(dtype, kCount, 12);
    // y shifted by 3 elements, so that specials meet other specials.
    std::vector<uint8_t> y3(y.size());
    const int size = DTypeSize(dtype);
    const bool half = dtype == DType::kFloat16 || dtype == DType::kBFloat16;
    const double u = std::ldexp(1.0, dtype == DType::kFloat16    ? -11
                                     : dtype == DType::kBFloat16 ? -8
                                     : dtype == DType::kFloat32  ? -24
                                                                 : -53);
    const double u_acc = std::ldexp(1.0, half ? -24 : -53);
    // The smallest subnormal: an underflowing result errs by half of it.
    const double tiny = std::ldexp(1.0, dtype == DType::kFloat16    ? -24
                                        : dtype == DType::kBFloat16 ? -133
                                        : dtype == DType::kFloat32  ? -149
                                                                    : -1074);
    for (int64_t i = 0; i < kCount; ++i) {
      SetBits(dtype, y3, i, Bits(dtype, y, (i + 3) % kCount));
    }
    const std::vector<uint8_t>* second[] = {&y, &y3};
    for (const std::vector<uint8_t>* in1 : second) {
      std::vector<uint8_t> relu(g.size()), sigmoid(g.size());
      v1::ElementwiseAttrs attrs;
      attrs.set_kind(v1::ElementwiseAttrs::KIND_RELU_GRAD);
      ASSERT_TRUE(
          RunElementwise(attrs, dtype, {g, *in1}, absl::MakeSpan(relu)).ok());
      attrs.set_kind(v1::ElementwiseAttrs::KIND_SIGMOID_GRAD);
      ASSERT_TRUE(
          RunElementwise(attrs, dtype, {g, *in1}, absl::MakeSpan(sigmoid))
              .ok());
      for (int64_t i = 0; i < kCount; ++i) {
        const uint64_t gb = Bits(dtype, g, i), yb = Bits(dtype, *in1, i);
        ASSERT_EQ(ReluGradBits(type, gb, yb), Bits(dtype, relu, i)) << i;
        const uint64_t sig = SigmoidGradBits(type, gb, yb);
        // Any NaN matches any NaN (see PerElementRowDotMatchesRunRowDot).
        if (!(std::isnan(CoreFloatValue(type, sig)) &&
              std::isnan(CoreFloatValue(type, Bits(dtype, sigmoid, i))))) {
          ASSERT_EQ(sig, Bits(dtype, sigmoid, i)) << i;
        }
        const double yv = LoadElement(dtype, in1->data() + i * size);
        const uint64_t r = Bits(dtype, relu, i);
        EXPECT_EQ(r, yv > 0 ? gb : 0) << i;
        // A finite gradient and an s in [0, 1] (a SIGMOID output): within
        // three roundings of the accumulator and one of the dtype of the
        // float64 g s (1 - s), which cannot overflow.
        const double gv = LoadElement(dtype, g.data() + i * size);
        if (std::isfinite(gv) && yv >= 0 && yv <= 1) {
          const double want = gv * yv * (1 - yv);
          EXPECT_NEAR(LoadElement(dtype, sigmoid.data() + i * size), want,
                      (u + 3 * u_acc) * std::abs(want) * 1.0001 + tiny)
              << gv << " * " << yv;
        }
      }
    }
  }
}

// The GPU's row dot computes each D element on its own, its row in column
// order with GatherMulAdd: that loop, run here on the host, gives
// RunRowDot's bits in every float dtype, on special values too.
TEST(ElementCoreTest, PerElementRowDotMatchesRunRowDot) {
  const int64_t row = 7, rows_a = 200, rows_b = 150, count = 500;
  v1::RowDotAttrs r;
  r.set_row(row);
  std::mt19937_64 random(13);
  for (int64_t i = 0; i < count; ++i) {
    r.add_index(static_cast<int64_t>(random() % (rows_a + 1)) - 1);
    r.add_index(static_cast<int64_t>(random() % (rows_b + 1)) - 1);
  }
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const PatternType type = KernelPatternType(dtype);
    const std::vector<uint8_t> a = Elements(dtype, rows_a * row, 14);
    const std::vector<uint8_t> b = Elements(dtype, rows_b * row, 15);
    std::vector<uint8_t> host(count * DTypeSize(dtype));
    ASSERT_TRUE(RunRowDot(r, dtype, a, b, absl::MakeSpan(host)).ok());
    int64_t differ = 0;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t ra = r.index(2 * i), rb = r.index(2 * i + 1);
      double acc = 0;
      if (ra >= 0 && rb >= 0) {
        for (int64_t c = 0; c < row; ++c) {
          acc = GatherMulAdd(
              type, acc, CoreFloatValue(type, Bits(dtype, a, ra * row + c)),
              CoreFloatValue(type, Bits(dtype, b, rb * row + c)));
        }
      }
      const uint64_t bits = CoreFloatStoreBits(type, acc);
      // NaN's payload depends on the operand order of commutative
      // operations, which the compiler picks (and a GPU makes every NaN its
      // canonical one): any NaN matches any NaN.
      const bool both_nan =
          std::isnan(CoreFloatValue(type, bits)) &&
          std::isnan(CoreFloatValue(type, Bits(dtype, host, i)));
      if (bits != Bits(dtype, host, i) && !both_nan) {
        ++differ;
        ADD_FAILURE() << i << ": " << CoreFloatValue(type, bits) << " vs "
                      << CoreFloatValue(type, Bits(dtype, host, i));
      }
    }
    EXPECT_EQ(differ, 0);
  }
}

// The GPU's gather computes each output element on its own (one thread
// per element, its k terms in j order); the host gathers row by row. The
// GPU's per-element loop, run here on the host, gives RunGather's bits in
// every dtype, weighted (floats) and unweighted, on special values too.
TEST(ElementCoreTest, PerElementGatherMatchesRunGather) {
  const int64_t row = 5, rows_x = 300, rows_y = 400, k = 3;
  v1::GatherAttrs g;
  g.set_row(row);
  g.set_k(k);
  std::mt19937_64 random(9);
  for (int64_t e = 0; e < rows_y * k; ++e) {
    g.add_index(static_cast<int64_t>(random() % (rows_x + 1)) - 1);
  }
  for (DType dtype : kAllTypes) {
    const PatternType type = KernelPatternType(dtype);
    const bool integer = IsIntegerDType(dtype);
    const std::vector<uint8_t> x = Elements(dtype, rows_x * row, 6);
    const std::vector<uint8_t> w = Elements(dtype, rows_y * k, 7);
    for (bool weighted : {false, true}) {
      if (weighted && integer) continue;
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), weighted ? " weighted" : ""));
      std::vector<uint8_t> host(rows_y * row * DTypeSize(dtype));
      ASSERT_TRUE(RunGather(g, dtype, x, weighted ? w : std::vector<uint8_t>{},
                            absl::MakeSpan(host))
                      .ok());
      int64_t differ = 0;
      for (int64_t e = 0; e < rows_y * row; ++e) {
        const int64_t i = e / row, c = e % row;
        uint64_t bits;
        if (integer) {
          uint64_t sum = 0;
          for (int64_t j = 0; j < k; ++j) {
            const int64_t source = g.index(i * k + j);
            if (source < 0) continue;
            sum += static_cast<uint64_t>(
                CoreIntegerValue(type, Bits(dtype, x, source * row + c)));
          }
          bits = CoreIntegerBits(type, static_cast<int64_t>(sum));
        } else {
          double acc = 0;
          for (int64_t j = 0; j < k; ++j) {
            const int64_t source = g.index(i * k + j);
            if (source < 0) continue;
            const double weight =
                weighted ? CoreFloatValue(type, Bits(dtype, w, i * k + j))
                         : 1.0;
            acc = GatherMulAdd(
                type, acc, weight,
                CoreFloatValue(type, Bits(dtype, x, source * row + c)));
          }
          bits = CoreFloatStoreBits(type, acc);
        }
        differ += bits != Bits(dtype, host, e);
      }
      EXPECT_EQ(differ, 0);
    }
  }
}

TEST(ElementCoreTest, RoundingMatchesTheHostsConversion) {
  std::mt19937_64 random(5);
  for (int i = 0; i < 200000; ++i) {
    // Doubles across the fp16 and bf16 ranges, subnormals included.
    const double value = std::ldexp(
        std::uniform_real_distribution<double>(-2, 2)(random),
        static_cast<int>(random() % 300) - 150);
    ASSERT_EQ(CoreRoundToFloatBits(value, 5, 10), RoundToFloatBits(value, 5, 10))
        << value;
    ASSERT_EQ(CoreRoundToFloatBits(value, 8, 7), RoundToFloatBits(value, 8, 7))
        << value;
    const uint64_t half = random() & 0xFFFF;
    const double h = CoreFloatBitsToDouble(half, 5, 10);
    const double expected = FloatBitsToDouble(half, 5, 10);
    ASSERT_TRUE(h == expected || (std::isnan(h) && std::isnan(expected)))
        << half;
    const double bf = CoreFloatBitsToDouble(half, 8, 7);
    const double bf_expected = FloatBitsToDouble(half, 8, 7);
    ASSERT_TRUE(bf == bf_expected ||
                (std::isnan(bf) && std::isnan(bf_expected)))
        << half;
  }
  for (double value : {0.0, 1.0e300, -1.0e300, 9.3e18, -9.3e18, 1.9e19,
                       -1.9e19, 3.0e19, 1.0e25, -1.0e25, 0.75, -0.75,
                       9223372036854775807.0, -9223372036854775808.0,
                       std::numeric_limits<double>::quiet_NaN(),
                       std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(CoreDoubleToWrappedInt64(value), DoubleToWrappedInt64(value))
        << value;
  }
}

// The host side of the shared initializer core: FillInitializer writes
// RandomBits for RANDOM and zeros for ZEROS, which is what the GPU fill
// kernel (pattern_kernels.cu) computes from the same header. The GPU half
// of this check is in device_kernels_test.
TEST(ElementCoreTest, RandomInitializerIsTheSharedCore) {
  for (DType dtype : kAllTypes) {
    const TensorSpec spec{{6, 10}, dtype};
    const Box box = {{1, 5}, {3, 9}};
    v1::Initializer init;
    init.set_kind(v1::Initializer::KIND_RANDOM);
    init.set_seed(1234);
    std::vector<uint8_t> bytes(NumElements(box) * DTypeSize(dtype));
    ASSERT_TRUE(
        FillInitializer(absl::MakeSpan(bytes), box, spec, 3, init).ok());
    int64_t e = 0;
    for (int64_t r = box[0].begin; r < box[0].end; ++r) {
      for (int64_t c = box[1].begin; c < box[1].end; ++c, ++e) {
        const uint64_t global = static_cast<uint64_t>(r * 10 + c);
        uint64_t expected =
            RandomBits(KernelPatternType(dtype), 1234, global, 3);
        if (DTypeSize(dtype) < 8) {
          expected &= (uint64_t{1} << (8 * DTypeSize(dtype))) - 1;
        }
        ASSERT_EQ(Bits(dtype, bytes, e), expected)
            << DTypeName(dtype) << " element " << e;
      }
    }
  }
}

}  // namespace
}  // namespace meshcast::worker
