#include "worker/pattern.h"

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace meshcast::worker {
namespace {

const DType kAllTypes[] = {DType::kInt8,    DType::kUInt8,   DType::kInt32,
                           DType::kInt64,   DType::kFloat16, DType::kBFloat16,
                           DType::kFloat32, DType::kFloat64};

// Compile-time checks that the core is constexpr and encodes floats exactly.
static_assert(IntegerToFloatBits(1, 5, 10) == 0x3C00);   // fp16 1.0
static_assert(IntegerToFloatBits(-2, 5, 10) == 0xC000);  // fp16 -2.0
static_assert(IntegerToFloatBits(1024, 5, 10) == 0x6400);
static_assert(IntegerToFloatBits(3, 8, 7) == 0x4040);     // bf16 3.0
static_assert(IntegerToFloatBits(-128, 8, 7) == 0xC300);  // bf16 -128
static_assert(IntegerToFloatBits(1, 11, 52) == 0x3FF0000000000000ull);
static_assert(PatternBits(PatternType::kInt64, 5, 0) == PatternHash(5, 0));

// Decodes an IEEE half (no subnormals needed: values are integers).
double DecodeHalf(uint16_t bits) {
  if ((bits & 0x7FFF) == 0) return 0;
  const int exponent = ((bits >> 10) & 0x1F) - 15;
  const double mantissa = 1.0 + (bits & 0x3FF) / 1024.0;
  return ((bits & 0x8000) ? -1 : 1) * std::ldexp(mantissa, exponent);
}

TEST(PatternTest, FloatEncodingsAreExactIntegers) {
  for (int64_t i = 0; i < 2000; ++i) {
    const double half =
        DecodeHalf(static_cast<uint16_t>(PatternBits(DType::kFloat16, i, 3)));
    EXPECT_EQ(half, PatternNumber(DType::kFloat16, i, 3));
    EXPECT_EQ(half, std::floor(half));
    EXPECT_LE(std::fabs(half), 1024);

    // bf16 is the top half of the float32 with the same value.
    const double bf16 = PatternNumber(DType::kBFloat16, i, 3);
    const float as_float = static_cast<float>(bf16);
    uint32_t float_bits;
    std::memcpy(&float_bits, &as_float, sizeof(float_bits));
    EXPECT_EQ(float_bits >> 16, PatternBits(DType::kBFloat16, i, 3));
    EXPECT_EQ(float_bits & 0xFFFF, 0u);

    const double f32 = PatternNumber(DType::kFloat32, i, 3);
    EXPECT_EQ(f32, std::floor(f32));
    const double f64 = PatternNumber(DType::kFloat64, i, 3);
    EXPECT_EQ(f64, std::floor(f64));
    EXPECT_LE(std::fabs(f64), std::ldexp(1.0, 52));
  }
}

TEST(PatternTest, ValuesDependOnIndexAndTensor) {
  for (DType dtype : kAllTypes) {
    std::set<std::string> distinct;
    int same_as_other_tensor = 0;
    for (int64_t i = 0; i < 256; ++i) {
      distinct.insert(PatternValue(dtype, i, 0));
      if (PatternValue(dtype, i, 0) == PatternValue(dtype, i, 1)) {
        ++same_as_other_tensor;
      }
      EXPECT_EQ(PatternValue(dtype, i, 0).size(),
                static_cast<size_t>(DTypeSize(dtype)));
    }
    EXPECT_GT(distinct.size(), 100u) << DTypeName(dtype);
    EXPECT_LT(same_as_other_tensor, 16) << DTypeName(dtype);
  }
}

TEST(PatternTest, FillThenVerifyHasNoMismatchesInEveryType) {
  for (DType dtype : kAllTypes) {
    const TensorSpec spec{{5, 7, 3}, dtype};
    const Box box = {{1, 4}, {2, 7}, {0, 3}};
    std::vector<uint8_t> tile(NumElements(box) * DTypeSize(dtype));
    ASSERT_TRUE(FillBox(absl::MakeSpan(tile), box, spec, 2).ok());
    auto result = VerifyBox(tile, box, spec, 2);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->elements, 45);
    EXPECT_EQ(result->mismatches, 0) << DTypeName(dtype);

    // Element (2, 3, 1) of the tensor sits at offset (1*5 + 1)*3 + 1 in the
    // tile and holds the value of global index (2*7 + 3)*3 + 1.
    const int64_t tile_offset = (1 * 5 + 1) * 3 + 1;
    const int64_t global = (2 * 7 + 3) * 3 + 1;
    EXPECT_EQ(std::string(reinterpret_cast<char*>(tile.data()) +
                              tile_offset * DTypeSize(dtype),
                          DTypeSize(dtype)),
              PatternValue(dtype, global, 2));
  }
}

TEST(PatternTest, VerifyCountsEveryCorruptedElement) {
  const TensorSpec spec{{10, 10}, DType::kInt32};
  const Box box = {{0, 10}, {3, 8}};
  std::vector<uint8_t> tile(50 * 4);
  ASSERT_TRUE(FillBox(absl::MakeSpan(tile), box, spec, 0).ok());
  tile[4 * 7] ^= 1;  // element (1, 5): global index 15
  tile[4 * 20 + 3] ^= 0x80;
  auto result = VerifyBox(tile, box, spec, 0);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->mismatches, 2);
  EXPECT_EQ(result->first_mismatch_index, 15);
  EXPECT_FALSE(result->first_mismatch.empty());

  // The wrong tensor index is detected everywhere (up to chance equality).
  auto other = VerifyBox(tile, box, spec, 1);
  ASSERT_TRUE(other.ok());
  EXPECT_GT(other->mismatches, 45);
}

TEST(PatternTest, RejectsBadBoxesAndSizes) {
  const TensorSpec spec{{4, 4}, DType::kFloat32};
  std::vector<uint8_t> tile(16 * 4);
  EXPECT_EQ(FillBox(absl::MakeSpan(tile), {{0, 4}, {0, 5}}, spec, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FillBox(absl::MakeSpan(tile), {{0, 4}}, spec, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FillBox(absl::MakeSpan(tile), {{0, 2}, {0, 4}}, spec, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(VerifyBox(tile, {{0, 3}, {0, 4}}, spec, 0).ok());
}

TEST(PatternTest, EmptyBoxIsFine) {
  const TensorSpec spec{{4, 4}, DType::kInt8};
  auto result = VerifyBox({}, {{2, 2}, {0, 4}}, spec, 0);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->elements, 0);
  EXPECT_EQ(result->mismatches, 0);
}

}  // namespace
}  // namespace meshcast::worker
