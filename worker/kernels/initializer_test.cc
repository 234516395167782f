#include "worker/kernels/initializer.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kernels/element.h"
#include "worker/pattern.h"

namespace meshcast::worker {
namespace {

constexpr DType kAllDTypes[] = {DType::kInt8,    DType::kUInt8,
                                DType::kInt32,   DType::kInt64,
                                DType::kFloat16, DType::kBFloat16,
                                DType::kFloat32, DType::kFloat64};

v1::Initializer Init(v1::Initializer::Kind kind, uint64_t seed = 0) {
  v1::Initializer init;
  init.set_kind(kind);
  init.set_seed(seed);
  return init;
}

// PATTERN and UNSPECIFIED fill exactly what the resharding path's FillBox
// fills, on a box that is not the whole tensor.
TEST(InitializerTest, PatternMatchesFillBoxBitForBit) {
  for (DType dtype : kAllDTypes) {
    TensorSpec spec{{4, 9, 5}, dtype};
    const Box box = {{1, 3}, {2, 7}, {0, 5}};
    const size_t bytes = NumElements(box) * DTypeSize(dtype);
    std::vector<uint8_t> want(bytes), got(bytes, 0xAB), got2(bytes, 0xCD);
    ASSERT_TRUE(FillBox(absl::MakeSpan(want), box, spec, 3).ok());
    ASSERT_TRUE(FillInitializer(absl::MakeSpan(got), box, spec, 3,
                                Init(v1::Initializer::KIND_PATTERN))
                    .ok());
    ASSERT_TRUE(FillInitializer(absl::MakeSpan(got2), box, spec, 3,
                                v1::Initializer())
                    .ok());
    EXPECT_EQ(got, want) << DTypeName(dtype);
    EXPECT_EQ(got2, want) << DTypeName(dtype);
    // InitialValue agrees with PatternNumber element by element.
    const int64_t index = (1 * 9 + 4) * 5 + 2;
    EXPECT_EQ(InitialValue(spec, 3, v1::Initializer(), index),
              PatternNumber(dtype, index, 3))
        << DTypeName(dtype);
  }
}

TEST(InitializerTest, RandomIsUniformExactAndDeterministic) {
  for (DType dtype : kAllDTypes) {
    TensorSpec spec{{64, 64}, dtype};
    const Box box = spec.full_box();
    const int size = DTypeSize(dtype);
    std::vector<uint8_t> buf(NumElements(box) * size);
    const v1::Initializer init = Init(v1::Initializer::KIND_RANDOM, 1234);
    ASSERT_TRUE(FillInitializer(absl::MakeSpan(buf), box, spec, 1, init).ok());
    double sum = 0;
    int distinct_from_other_seed = 0;
    for (int64_t i = 0; i < NumElements(box); ++i) {
      const uint8_t* at = buf.data() + i * size;
      const double x = LoadElement(dtype, at);
      // The buffer holds what InitialValue says.
      ASSERT_EQ(x, InitialValue(spec, 1, init, i));
      if (IsIntegerDType(dtype)) {
        const int64_t v = dtype == DType::kUInt8
                              ? static_cast<int8_t>(LoadInteger(dtype, at))
                              : LoadInteger(dtype, at);
        ASSERT_GE(v, -8);
        ASSERT_LT(v, 8);
        sum += static_cast<double>(v);
      } else {
        ASSERT_GE(x, -1.0);
        ASSERT_LT(x, 1.0);
        // Exact in the dtype: storing it again gives the same bits.
        uint8_t again[8];
        StoreElement(dtype, again, x);
        ASSERT_EQ(std::memcmp(again, at, size), 0);
        sum += x;
      }
      if (InitialValue(spec, 1, Init(v1::Initializer::KIND_RANDOM, 1235), i) !=
          x) {
        ++distinct_from_other_seed;
      }
    }
    const double mean = sum / NumElements(box);
    const double expected_mean = IsIntegerDType(dtype) ? -0.5 : 0.0;
    const double spread = IsIntegerDType(dtype) ? 4.6 : 0.58;
    // 4096 samples: the mean is within 5 standard errors.
    EXPECT_NEAR(mean, expected_mean, 5 * spread / 64) << DTypeName(dtype);
    EXPECT_GT(distinct_from_other_seed, NumElements(box) / 2)
        << DTypeName(dtype);
  }
}

TEST(InitializerTest, RandomDependsOnTensorAndIndexOnly) {
  TensorSpec spec{{8, 8}, DType::kFloat32};
  const v1::Initializer init = Init(v1::Initializer::KIND_RANDOM, 9);
  std::vector<uint8_t> part(2 * 3 * 4);
  ASSERT_TRUE(FillInitializer(absl::MakeSpan(part), {{5, 7}, {1, 4}}, spec, 2,
                              init)
                  .ok());
  float f;
  std::memcpy(&f, part.data() + 4 * 4, 4);  // [6, 2]
  EXPECT_EQ(static_cast<double>(f), InitialValue(spec, 2, init, 6 * 8 + 2));
  EXPECT_NE(InitialValue(spec, 2, init, 50), InitialValue(spec, 3, init, 50));
}

TEST(InitializerTest, Zeros) {
  TensorSpec spec{{3, 3}, DType::kFloat64};
  std::vector<uint8_t> buf(72, 0xFF);
  ASSERT_TRUE(FillInitializer(absl::MakeSpan(buf), spec.full_box(), spec, 0,
                              Init(v1::Initializer::KIND_ZEROS))
                  .ok());
  for (uint8_t b : buf) ASSERT_EQ(b, 0);
  EXPECT_EQ(InitialValue(spec, 0, Init(v1::Initializer::KIND_ZEROS), 4), 0.0);
}

TEST(InitializerTest, Errors) {
  TensorSpec spec{{3, 3}, DType::kFloat32};
  std::vector<uint8_t> buf(36);
  absl::Status s = FillInitializer(absl::MakeSpan(buf), {{0, 3}, {0, 2}}, spec,
                                   0, v1::Initializer());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("needs 24"), std::string::npos) << s;
  s = FillInitializer(absl::MakeSpan(buf), {{1, 4}, {0, 3}}, spec, 0,
                      v1::Initializer());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  v1::Initializer bad;
  bad.set_kind(static_cast<v1::Initializer::Kind>(42));
  s = FillInitializer(absl::MakeSpan(buf), spec.full_box(), spec, 0, bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("KIND_RANDOM"), std::string::npos) << s;
}

}  // namespace
}  // namespace meshcast::worker
