#include "planner/tensor.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kInt8), 1);
  EXPECT_EQ(DTypeSize(DType::kUInt8), 1);
  EXPECT_EQ(DTypeSize(DType::kInt32), 4);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8);
  EXPECT_EQ(DTypeSize(DType::kFloat16), 2);
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2);
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4);
  EXPECT_EQ(DTypeSize(DType::kFloat64), 8);
  for (DType dtype :
       {DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64,
        DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    auto parsed = ParseDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << DTypeName(dtype);
    EXPECT_EQ(*parsed, dtype);
  }
}

TEST(DTypeTest, AliasesAndCase) {
  EXPECT_EQ(*ParseDType("bf16"), DType::kBFloat16);
  EXPECT_EQ(*ParseDType("fp16"), DType::kFloat16);
  EXPECT_EQ(*ParseDType("half"), DType::kFloat16);
  EXPECT_EQ(*ParseDType("fp32"), DType::kFloat32);
  EXPECT_EQ(*ParseDType("f32"), DType::kFloat32);
  EXPECT_EQ(*ParseDType("float"), DType::kFloat32);
  EXPECT_EQ(*ParseDType("fp64"), DType::kFloat64);
  EXPECT_EQ(*ParseDType("double"), DType::kFloat64);
  EXPECT_EQ(*ParseDType("INT32"), DType::kInt32);
}

TEST(DTypeTest, UnknownDTypeListsAllowedNames) {
  auto parsed = ParseDType("complex64");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("'complex64'"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("int32"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("bfloat16"));
}

TEST(BoxTest, CountsIntersectsAndPrints) {
  const Box a = {{0, 4}, {2, 6}};
  const Box b = {{2, 8}, {0, 3}};
  EXPECT_EQ(NumElements(a), 16);
  EXPECT_FALSE(IsEmpty(a));
  const Box both = Intersect(a, b);
  EXPECT_EQ(both, (Box{{2, 4}, {2, 3}}));
  EXPECT_EQ(NumElements(both), 2);
  const Box apart = Intersect(a, Box{{4, 6}, {0, 9}});
  EXPECT_TRUE(IsEmpty(apart));
  EXPECT_EQ(NumElements(apart), 0);
  EXPECT_EQ(BoxToString(a), "[0:4,2:6]");
  EXPECT_EQ((Interval{5, 3}).size(), 0);
}

TEST(BoxTest, Contains) {
  const Box outer = {{0, 4}, {0, 4}};
  EXPECT_TRUE(Contains(outer, Box{{1, 3}, {0, 4}}));
  EXPECT_TRUE(Contains(outer, outer));
  EXPECT_FALSE(Contains(outer, Box{{1, 5}, {0, 4}}));
  EXPECT_TRUE(Contains(outer, Box{{7, 7}, {0, 1}}));  // empty
  EXPECT_FALSE(Contains(outer, Box{{0, 1}}));         // rank mismatch
}

// SubtractBox against element-by-element membership on random small boxes.
TEST(BoxTest, SubtractBoxMatchesElementwiseDifference) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> coord(0, 6);
  for (int trial = 0; trial < 500; ++trial) {
    const int rank = 1 + trial % 3;
    Box a(rank), b(rank);
    for (int d = 0; d < rank; ++d) {
      int x = coord(rng), y = coord(rng);
      a[d] = {std::min(x, y), std::max(x, y)};
      x = coord(rng);
      y = coord(rng);
      b[d] = {std::min(x, y), std::max(x, y)};
    }
    const std::vector<Box> pieces = SubtractBox(a, b);
    EXPECT_LE(pieces.size(), static_cast<size_t>(2 * rank));
    // Walk every point of the 7^rank grid.
    int points = 1;
    for (int d = 0; d < rank; ++d) points *= 7;
    for (int p = 0; p < points; ++p) {
      std::vector<int64_t> x(rank);
      int rest = p;
      for (int d = 0; d < rank; ++d) {
        x[d] = rest % 7;
        rest /= 7;
      }
      const auto inside = [&](const Box& box) {
        for (int d = 0; d < rank; ++d) {
          if (x[d] < box[d].begin || x[d] >= box[d].end) return false;
        }
        return true;
      };
      int covering = 0;
      for (const Box& piece : pieces) covering += inside(piece) ? 1 : 0;
      const int expected = inside(a) && !inside(b) ? 1 : 0;
      ASSERT_EQ(covering, expected)
          << BoxToString(a) << " - " << BoxToString(b) << " at point " << p;
    }
    for (const Box& piece : pieces) EXPECT_FALSE(IsEmpty(piece));
  }
}

TEST(TensorSpecTest, ElementsBytesAndFullBox) {
  TensorSpec tensor{{1024, 1024, 512}, DType::kInt32};
  EXPECT_EQ(tensor.num_elements(), int64_t{1} << 29);
  EXPECT_EQ(tensor.num_bytes(), int64_t{2} << 30);
  EXPECT_EQ(tensor.full_box(), (Box{{0, 1024}, {0, 1024}, {0, 512}}));
}

TEST(ParseShapeTest, Accepts) {
  auto shape = ParseShape("1024x1024x512");
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(*shape, (std::vector<int64_t>{1024, 1024, 512}));
  EXPECT_EQ(*ParseShape("7"), (std::vector<int64_t>{7}));
  EXPECT_EQ(*ParseShape("65536x65536"), (std::vector<int64_t>{65536, 65536}));
}

TEST(ParseShapeTest, RejectsWithTheExpectedForm) {
  for (const char* bad : {"", "x", "4x", "4x0", "4x-2", "4,4", "4xx4",
                          "99999999999x99999999999"}) {
    auto shape = ParseShape(bad);
    ASSERT_FALSE(shape.ok()) << bad;
    EXPECT_THAT(shape.status().message(), HasSubstr("1024x1024x512")) << bad;
  }
}

}  // namespace
}  // namespace meshcast
