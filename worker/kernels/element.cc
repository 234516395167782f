#include "worker/kernels/element.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace meshcast::worker {
namespace {

template <typename T>
T LoadAs(const uint8_t* in) {
  T value;
  std::memcpy(&value, in, sizeof(T));
  return value;
}

template <typename T>
void StoreAs(uint8_t* out, T value) {
  std::memcpy(out, &value, sizeof(T));
}

// sig >> shift rounded to nearest, ties to even (shift >= 1).
uint64_t ShiftRoundEven(uint64_t sig, int shift) {
  if (shift >= 64) return 0;  // below half of one unit (sig < 2^53)
  const uint64_t q = sig >> shift;
  const uint64_t rem = sig & ((uint64_t{1} << shift) - 1);
  const uint64_t half = uint64_t{1} << (shift - 1);
  return (rem > half || (rem == half && (q & 1))) ? q + 1 : q;
}

}  // namespace

uint64_t RoundToFloatBits(double value, int exponent_bits, int mantissa_bits) {
  const int total = 1 + exponent_bits + mantissa_bits;
  const uint64_t sign = std::signbit(value) ? uint64_t{1} << (total - 1) : 0;
  const uint64_t exp_all_ones = (uint64_t{1} << exponent_bits) - 1;
  if (std::isnan(value)) {
    return (exp_all_ones << mantissa_bits) |
           (uint64_t{1} << (mantissa_bits - 1));  // quiet NaN, positive
  }
  if (std::isinf(value)) return sign | (exp_all_ones << mantissa_bits);
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const int biased = static_cast<int>((bits >> 52) & 0x7FF);
  // Double subnormals are far below every target format's range.
  if (biased == 0) return sign;
  const int e = biased - 1023;
  const uint64_t sig = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1} << 52);
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int min_exp = 1 - bias;
  uint64_t magnitude;
  if (e >= min_exp) {
    const uint64_t q = ShiftRoundEven(sig, 52 - mantissa_bits);
    // q in [2^M, 2^(M+1)]: a carry into bit M+1 bumps the exponent, which
    // the addition below does by itself.
    magnitude = (static_cast<uint64_t>(e + bias) << mantissa_bits) +
                (q - (uint64_t{1} << mantissa_bits));
    if (magnitude >= (exp_all_ones << mantissa_bits)) {
      magnitude = exp_all_ones << mantissa_bits;  // overflow: infinity
    }
  } else {
    // Subnormal (or zero): q in [0, 2^M]; 2^M encodes the smallest normal.
    magnitude = ShiftRoundEven(sig, 52 - mantissa_bits + (min_exp - e));
  }
  return sign | magnitude;
}

double FloatBitsToDouble(uint64_t bits, int exponent_bits, int mantissa_bits) {
  const int total = 1 + exponent_bits + mantissa_bits;
  const bool negative = (bits >> (total - 1)) & 1;
  const uint64_t exp_all_ones = (uint64_t{1} << exponent_bits) - 1;
  const uint64_t exponent = (bits >> mantissa_bits) & exp_all_ones;
  const uint64_t mantissa = bits & ((uint64_t{1} << mantissa_bits) - 1);
  const int bias = (1 << (exponent_bits - 1)) - 1;
  double magnitude;
  if (exponent == exp_all_ones) {
    magnitude = mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                              : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa),
                           1 - bias - mantissa_bits);
  } else {
    magnitude = std::ldexp(
        static_cast<double>(mantissa | (uint64_t{1} << mantissa_bits)),
        static_cast<int>(exponent) - bias - mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

int64_t DoubleToWrappedInt64(double value) {
  if (std::isnan(value)) return 0;
  if (std::isinf(value)) return 0;  // inf mod 2^64 is undefined; pick 0
  double t = std::trunc(value);
  if (t >= -9223372036854775808.0 && t < 9223372036854775808.0) {
    return static_cast<int64_t>(t);
  }
  constexpr double kTwo64 = 18446744073709551616.0;
  t = std::fmod(t, kTwo64);  // exact
  if (t < 0) t += kTwo64;    // exact: |t| >= 2^63 here or t is small
  if (t >= kTwo64) t = 0;
  const uint64_t u = t >= 9223372036854775808.0
                         ? static_cast<uint64_t>(t - 9223372036854775808.0) +
                               (uint64_t{1} << 63)
                         : static_cast<uint64_t>(t);
  return static_cast<int64_t>(u);
}

bool IsIntegerDType(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt32:
    case DType::kInt64:
      return true;
    default:
      return false;
  }
}

int64_t WrapInteger(DType dtype, int64_t value) {
  switch (dtype) {
    case DType::kInt8:
      return static_cast<int8_t>(static_cast<uint8_t>(value));
    case DType::kUInt8:
      return static_cast<uint8_t>(value);
    case DType::kInt32:
      return static_cast<int32_t>(static_cast<uint32_t>(value));
    default:
      return value;
  }
}

double LoadElement(DType dtype, const uint8_t* in) {
  switch (dtype) {
    case DType::kInt8:
      return LoadAs<int8_t>(in);
    case DType::kUInt8:
      return LoadAs<uint8_t>(in);
    case DType::kInt32:
      return LoadAs<int32_t>(in);
    case DType::kInt64:
      return static_cast<double>(LoadAs<int64_t>(in));
    case DType::kFloat16:
      return FloatBitsToDouble(LoadAs<uint16_t>(in), 5, 10);
    case DType::kBFloat16: {
      const uint32_t word = uint32_t{LoadAs<uint16_t>(in)} << 16;
      float value;
      std::memcpy(&value, &word, sizeof(value));
      return value;
    }
    case DType::kFloat32:
      return LoadAs<float>(in);
    case DType::kFloat64:
      return LoadAs<double>(in);
  }
  return 0;
}

void StoreElement(DType dtype, uint8_t* out, double value) {
  switch (dtype) {
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt32:
    case DType::kInt64:
      return StoreInteger(dtype, out, DoubleToWrappedInt64(value));
    case DType::kFloat16:
      return StoreAs<uint16_t>(
          out, static_cast<uint16_t>(RoundToFloatBits(value, 5, 10)));
    case DType::kBFloat16:
      return StoreAs<uint16_t>(
          out, static_cast<uint16_t>(RoundToFloatBits(value, 8, 7)));
    case DType::kFloat32:
      // The conversion rounds to nearest even (the default rounding mode).
      return StoreAs<float>(out, static_cast<float>(value));
    case DType::kFloat64:
      return StoreAs<double>(out, value);
  }
}

int64_t LoadInteger(DType dtype, const uint8_t* in) {
  switch (dtype) {
    case DType::kInt8:
      return LoadAs<int8_t>(in);
    case DType::kUInt8:
      return LoadAs<uint8_t>(in);
    case DType::kInt32:
      return LoadAs<int32_t>(in);
    case DType::kInt64:
      return LoadAs<int64_t>(in);
    default:
      return DoubleToWrappedInt64(LoadElement(dtype, in));
  }
}

void StoreInteger(DType dtype, uint8_t* out, int64_t value) {
  switch (dtype) {
    case DType::kInt8:
    case DType::kUInt8:
      return StoreAs<uint8_t>(out, static_cast<uint8_t>(value));
    case DType::kInt32:
      return StoreAs<uint32_t>(out, static_cast<uint32_t>(value));
    case DType::kInt64:
      return StoreAs<int64_t>(out, value);
    default:
      return StoreElement(dtype, out, static_cast<double>(value));
  }
}

}  // namespace meshcast::worker
