#include "worker/kernels/element.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace meshcast::worker {
namespace {

uint16_t Bits16(DType dtype, double value) {
  uint8_t out[2];
  StoreElement(dtype, out, value);
  uint16_t bits;
  std::memcpy(&bits, out, 2);
  return bits;
}

double Load16(DType dtype, uint16_t bits) {
  uint8_t in[2];
  std::memcpy(in, &bits, 2);
  return LoadElement(dtype, in);
}

// Every finite fp16 / bf16 value survives load -> store, NaNs stay NaN.
TEST(ElementTest, HalfTypesRoundTripEveryBitPattern) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (uint32_t b = 0; b < 65536; ++b) {
      const double x = Load16(dtype, static_cast<uint16_t>(b));
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(Load16(dtype, Bits16(dtype, x))));
        continue;
      }
      ASSERT_EQ(Bits16(dtype, x), b) << DTypeName(dtype) << " bits " << b;
    }
  }
}

TEST(ElementTest, Float16KnownValues) {
  const DType h = DType::kFloat16;
  EXPECT_EQ(Bits16(h, 1.0), 0x3C00);
  EXPECT_EQ(Bits16(h, -2.0), 0xC000);
  EXPECT_EQ(Bits16(h, 65504.0), 0x7BFF);
  EXPECT_EQ(Bits16(h, 65519.0), 0x7BFF);  // below the halfway point
  EXPECT_EQ(Bits16(h, 65520.0), 0x7C00);  // halfway to 2^16: ties to inf
  EXPECT_EQ(Bits16(h, std::ldexp(1.0, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(Bits16(h, std::ldexp(1.0, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(Bits16(h, std::ldexp(3.0, -25)), 0x0002);  // tie -> even (2)
  EXPECT_EQ(Bits16(h, 1.0 + std::ldexp(1.0, -11)), 0x3C00);  // tie -> even
  EXPECT_EQ(Bits16(h, 1.0 + std::ldexp(3.0, -11)), 0x3C02);
  EXPECT_EQ(Bits16(h, -0.0), 0x8000);
  EXPECT_EQ(Bits16(h, std::ldexp(1.0, -1074)), 0x0000);  // double subnormal
  EXPECT_DOUBLE_EQ(Load16(h, 0x3555), 0.333251953125);
}

TEST(ElementTest, BFloat16KnownValues) {
  const DType b = DType::kBFloat16;
  EXPECT_EQ(Bits16(b, 1.0), 0x3F80);
  EXPECT_EQ(Bits16(b, 1.0 + std::ldexp(1.0, -8)), 0x3F80);  // tie -> even
  EXPECT_EQ(Bits16(b, 1.0 + std::ldexp(3.0, -8)), 0x3F82);
  EXPECT_EQ(Bits16(b, 3.0e38), 0x7F62);
  EXPECT_EQ(Bits16(b, 1e39), 0x7F80);  // overflow -> inf
  EXPECT_EQ(Bits16(b, std::ldexp(1.0, -133)), 0x0001);
}

// Random doubles: the stored value is a nearest neighbour, ties to even
// (checked against the two adjacent encodings, not against the algorithm).
TEST(ElementTest, HalfTypesRoundToNearestEven) {
  std::mt19937_64 rng(42);
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    const double max_exp = dtype == DType::kFloat16 ? 16 : 120;
    std::uniform_real_distribution<double> mant(-2.0, 2.0);
    std::uniform_int_distribution<int> ex(-30, static_cast<int>(max_exp) - 1);
    for (int trial = 0; trial < 200000; ++trial) {
      const double x = std::ldexp(mant(rng), ex(rng));
      const uint16_t bits = Bits16(dtype, x);
      const double y = Load16(dtype, bits);
      if (std::isinf(y)) continue;
      const double err = std::abs(x - y);
      for (int step : {-1, 1}) {
        const uint16_t nb = static_cast<uint16_t>(bits + step);
        const double z = Load16(dtype, nb);
        if (std::isnan(z) || std::signbit(z) != std::signbit(y)) continue;
        const double other = std::abs(x - z);
        ASSERT_LE(err, other) << x;
        if (err == other) {
          ASSERT_EQ(bits & 1, 0) << "tie not even: " << x;
        }
      }
    }
  }
#if defined(__FLT16_MAX__)
  // Cross-check with the compiler's own conversion where it has _Float16.
  std::uniform_real_distribution<double> any(-70000.0, 70000.0);
  for (int trial = 0; trial < 100000; ++trial) {
    const double x = any(rng) * std::ldexp(1.0, -(trial % 30));
    const _Float16 f = static_cast<_Float16>(x);
    uint16_t want;
    std::memcpy(&want, &f, 2);
    ASSERT_EQ(Bits16(DType::kFloat16, x), want) << x;
  }
#endif
}

TEST(ElementTest, FloatAndDoubleAreNative) {
  uint8_t buf[8];
  StoreElement(DType::kFloat32, buf, 0.1);
  float f;
  std::memcpy(&f, buf, 4);
  EXPECT_EQ(f, 0.1f);
  EXPECT_EQ(LoadElement(DType::kFloat32, buf), static_cast<double>(0.1f));
  StoreElement(DType::kFloat64, buf, 0.1);
  EXPECT_EQ(LoadElement(DType::kFloat64, buf), 0.1);
}

TEST(ElementTest, IntegersTruncateThenWrap) {
  uint8_t buf[8];
  StoreElement(DType::kInt8, buf, 300.7);  // 300 mod 256 = 44
  EXPECT_EQ(LoadElement(DType::kInt8, buf), 44);
  StoreElement(DType::kInt8, buf, -1.9);
  EXPECT_EQ(LoadElement(DType::kInt8, buf), -1);
  StoreElement(DType::kInt8, buf, 200);
  EXPECT_EQ(LoadElement(DType::kInt8, buf), -56);
  StoreElement(DType::kUInt8, buf, -1);
  EXPECT_EQ(LoadElement(DType::kUInt8, buf), 255);
  StoreElement(DType::kInt32, buf, 4294967296.0 + 5);
  EXPECT_EQ(LoadElement(DType::kInt32, buf), 5);
  StoreElement(DType::kInt32, buf, -2147483649.0);
  EXPECT_EQ(LoadElement(DType::kInt32, buf), 2147483647);
  StoreElement(DType::kInt64, buf, 18446744073709551616.0 + 4096);
  EXPECT_EQ(LoadInteger(DType::kInt64, buf), 4096);
  StoreElement(DType::kInt64, buf, -9223372036854775808.0);
  EXPECT_EQ(LoadInteger(DType::kInt64, buf),
            std::numeric_limits<int64_t>::min());
  StoreElement(DType::kInt64, buf, std::nan(""));
  EXPECT_EQ(LoadInteger(DType::kInt64, buf), 0);
  StoreInteger(DType::kInt64, buf, (int64_t{1} << 62) + 1);  // exact
  EXPECT_EQ(LoadInteger(DType::kInt64, buf), (int64_t{1} << 62) + 1);
  EXPECT_EQ(WrapInteger(DType::kUInt8, -3), 253);
  EXPECT_EQ(WrapInteger(DType::kInt8, 128), -128);
  EXPECT_EQ(WrapInteger(DType::kInt32, int64_t{1} << 31), -(int64_t{1} << 31));
}

}  // namespace
}  // namespace meshcast::worker
