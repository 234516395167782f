#include "worker/kernels/reduce.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kernels/element.h"
#include "worker/kernels/initializer.h"

namespace meshcast::worker {
namespace {

constexpr DType kAllDTypes[] = {DType::kInt8,    DType::kUInt8,
                                DType::kInt32,   DType::kInt64,
                                DType::kFloat16, DType::kBFloat16,
                                DType::kFloat32, DType::kFloat64};

std::vector<uint8_t> Filled(DType dtype, int64_t n, int tensor,
                            v1::Initializer::Kind kind) {
  TensorSpec spec{{n}, dtype};
  std::vector<uint8_t> buf(n * DTypeSize(dtype));
  v1::Initializer init;
  init.set_kind(kind);
  init.set_seed(5);
  EXPECT_TRUE(
      FillInitializer(absl::MakeSpan(buf), spec.full_box(), spec, tensor, init)
          .ok());
  return buf;
}

// Against an independent loop: the exact sum (or max) in int64 / double,
// stored with StoreElement. The sum of two elements of any float dtype is
// exact in double, so one rounding of it is the correctly rounded result,
// which the kernel must reproduce bit for bit (fp16/bf16 through float
// included); integers must wrap identically.
TEST(ReduceTest, MatchesIndependentLoopBitForBit) {
  for (DType dtype : kAllDTypes) {
    for (auto kind : {v1::Initializer::KIND_PATTERN,
                      v1::Initializer::KIND_RANDOM}) {
      for (v1::Reduction reduction : {v1::REDUCTION_SUM, v1::REDUCTION_MAX}) {
        const int64_t n = 1003;
        const int size = DTypeSize(dtype);
        const std::vector<uint8_t> in = Filled(dtype, n, 1, kind);
        std::vector<uint8_t> inout = Filled(dtype, n, 2, kind);
        std::vector<uint8_t> want(inout.size());
        for (int64_t i = 0; i < n; ++i) {
          const uint8_t* a = inout.data() + i * size;
          const uint8_t* b = in.data() + i * size;
          if (IsIntegerDType(dtype)) {
            const int64_t x = LoadInteger(dtype, a), y = LoadInteger(dtype, b);
            StoreInteger(dtype, want.data() + i * size,
                         reduction == v1::REDUCTION_MAX
                             ? std::max(x, y)
                             : static_cast<int64_t>(static_cast<uint64_t>(x) +
                                                    static_cast<uint64_t>(y)));
          } else {
            const double x = LoadElement(dtype, a), y = LoadElement(dtype, b);
            StoreElement(dtype, want.data() + i * size,
                         reduction == v1::REDUCTION_MAX ? std::max(x, y)
                                                        : x + y);
          }
        }
        ASSERT_TRUE(ReduceInto(reduction, dtype, in, absl::MakeSpan(inout)).ok());
        EXPECT_EQ(inout, want) << DTypeName(dtype) << " reduction "
                               << reduction << " init " << kind;
      }
    }
  }
}

TEST(ReduceTest, Errors) {
  std::vector<uint8_t> a(12), b(16), c(10);
  EXPECT_EQ(ReduceInto(v1::REDUCTION_SUM, DType::kFloat32, a,
                       absl::MakeSpan(b))
                .code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> d(10);
  EXPECT_EQ(ReduceInto(v1::REDUCTION_SUM, DType::kFloat32, c,
                       absl::MakeSpan(d))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReduceInto(static_cast<v1::Reduction>(7), DType::kFloat32, a,
                       absl::MakeSpan(a))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// float32 is the hot path: 64 MiB should reduce at memory speed (a loose
// bound so that a shared CI machine passes; a scalar per-element
// LoadElement loop would take several times longer).
TEST(ReduceTest, Float32IsFast) {
  const int64_t n = int64_t{16} << 20;
  std::vector<float> in(n, 1.5f), inout(n, 2.0f);
  auto span_in = absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(in.data()),
                                     n * 4);
  auto span_out =
      absl::MakeSpan(reinterpret_cast<uint8_t*>(inout.data()), n * 4);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(ReduceInto(v1::REDUCTION_SUM, DType::kFloat32, span_in, span_out)
                  .ok());
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  EXPECT_EQ(inout[0], 3.5f);
  EXPECT_EQ(inout[n - 1], 3.5f);
  EXPECT_LT(seconds, 1.0);
  std::printf("float32 sum of 64 MiB: %.3f s (%.2f GB/s)\n", seconds,
              3.0 * n * 4 / seconds / 1e9);
}

}  // namespace
}  // namespace meshcast::worker
