// Element arithmetic (fp16/bf16 rounding, integer wrap-around, reductions,
// elementwise ops, the accumulation of gathers and row dots) written once
// for host and CUDA device code: the CPU kernels (element.h, compute.h) use
// its conversions and the GPU kernels (worker/cuda/compute_kernels.h) all
// of it, so both produce the same bits; element_core_test.cc proves it
// against reduce.h and compute.h without a GPU.
//
//   const uint64_t r = ReduceBits(PatternType::kFloat16, /*max=*/false,
//                                 inout_bits, in_bits);
//
// Elements are passed as their bits in the low PatternTypeSize(type) bytes
// of a uint64_t. The rules are the host's (reduce.h, compute.h, element.h):
//  - ReduceBits(type, max, a, b): a (+ | max) b, `a` being the accumulator
//    and `b` the incoming value. float32/float64 natively; fp16/bf16 through
//    float, rounded once to nearest even (NaN becomes the dtype's positive
//    quiet NaN, as StoreElement writes it); integers wrap to their width, max
//    compares signed (uint8 unsigned). MAX is `b > a ? b : a`.
//  - AddBits(type, x, y): elementwise ADD, x + y: ReduceBits(sum).
//  - ScaleBits(type, alpha, x): elementwise SCALE. Floats: alpha * x in
//    double, rounded once to the dtype (float32 by the double -> float
//    conversion); integers: ScaleInteger's rule (an integral alpha within
//    int64 multiplies with wrap-around, any other alpha multiplies in double
//    and truncates toward zero, wrapping modulo 2^64).
//  - ReluBits(type, x): elementwise RELU on a float dtype: x < 0 becomes +0,
//    every other value (+-0, NaN, +inf) keeps its bits: exact.
//  - SigmoidBits(type, x): elementwise SIGMOID on a float dtype: 1 / (1 +
//    exp(-x)) evaluated in double and rounded once to the dtype.
//  - ReluGradBits(type, g, y): elementwise RELU_GRAD on a float dtype: `g`'s
//    bits where y > 0, else +0 (y <= 0, -0 and NaN mask): exact.
//  - SigmoidGradBits(type, g, s): elementwise SIGMOID_GRAD on a float dtype:
//    (g * s) * (1 - s) in that order, each operation rounded in the
//    dtype's arithmetic (fp16/bf16: float, as ADD; float32 and float64:
//    double), then the result rounded once to the dtype (float32: the
//    double -> float conversion).
//  - Gather (compute.h RunGather): CoreFloatValue decodes a float element,
//    GatherMulAdd(type, acc, w, x) adds one term w * x to a row's running
//    sum in the dtype's accumulator (fp16/bf16: float, float32/float64:
//    double; the sum is held in a double either way, exactly), and
//    CoreFloatStoreBits rounds the finished sum once to the dtype.
//  - Row dot (compute.h RunRowDot): the same accumulation, GatherMulAdd(type,
//    acc, a, b) over the row's columns in order from acc = 0, with a from A's
//    row and b from B's, rounded once by CoreFloatStoreBits.
// Device code uses the _rn intrinsics, which nvcc never fuses into an FMA,
// and the host's x86-64 baseline has no FMA to fuse into, so host and GPU
// give the same bits for the same term order.
// Thread safety: pure functions.
#ifndef MESHCAST_WORKER_KERNELS_ELEMENT_CORE_H_
#define MESHCAST_WORKER_KERNELS_ELEMENT_CORE_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "worker/pattern_core.h"

namespace meshcast::worker {

MESHCAST_HOST_DEVICE inline uint64_t CoreDoubleBits(double value) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(value));
#else
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

MESHCAST_HOST_DEVICE inline double CoreBitsDouble(uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

MESHCAST_HOST_DEVICE inline uint32_t CoreFloatBits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

MESHCAST_HOST_DEVICE inline float CoreBitsFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

// 2^e as a double, for e in [-1022, 1023].
MESHCAST_HOST_DEVICE inline double CorePow2(int e) {
  return CoreBitsDouble(static_cast<uint64_t>(e + 1023) << 52);
}

MESHCAST_HOST_DEVICE inline bool CoreIsNan(double value) {
  const uint64_t bits = CoreDoubleBits(value);
  return (bits & 0x7FF0000000000000ull) == 0x7FF0000000000000ull &&
         (bits & 0x000FFFFFFFFFFFFFull) != 0;
}

MESHCAST_HOST_DEVICE inline bool CoreIsInf(double value) {
  return (CoreDoubleBits(value) & 0x7FFFFFFFFFFFFFFFull) ==
         0x7FF0000000000000ull;
}

// sig >> shift rounded to nearest, ties to even (shift >= 1).
MESHCAST_HOST_DEVICE inline uint64_t CoreShiftRoundEven(uint64_t sig,
                                                        int shift) {
  if (shift >= 64) return 0;
  const uint64_t q = sig >> shift;
  const uint64_t rem = sig & ((uint64_t{1} << shift) - 1);
  const uint64_t half = uint64_t{1} << (shift - 1);
  return (rem > half || (rem == half && (q & 1))) ? q + 1 : q;
}

// The bits of the binary format (exponent_bits, mantissa_bits) nearest to
// `value`, ties to even: element.h's RoundToFloatBits, for fp16 (5, 10) and
// bf16 (8, 7).
MESHCAST_HOST_DEVICE inline uint64_t CoreRoundToFloatBits(double value,
                                                          int exponent_bits,
                                                          int mantissa_bits) {
  const int total = 1 + exponent_bits + mantissa_bits;
  const uint64_t bits = CoreDoubleBits(value);
  const uint64_t sign = (bits >> 63) ? uint64_t{1} << (total - 1) : 0;
  const uint64_t exp_all_ones = (uint64_t{1} << exponent_bits) - 1;
  if (CoreIsNan(value)) {
    return (exp_all_ones << mantissa_bits) |
           (uint64_t{1} << (mantissa_bits - 1));  // quiet NaN, positive
  }
  if (CoreIsInf(value)) return sign | (exp_all_ones << mantissa_bits);
  const int biased = static_cast<int>((bits >> 52) & 0x7FF);
  if (biased == 0) return sign;  // double subnormals: far below the range
  const int e = biased - 1023;
  const uint64_t sig = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1} << 52);
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int min_exp = 1 - bias;
  uint64_t magnitude;
  if (e >= min_exp) {
    const uint64_t q = CoreShiftRoundEven(sig, 52 - mantissa_bits);
    magnitude = (static_cast<uint64_t>(e + bias) << mantissa_bits) +
                (q - (uint64_t{1} << mantissa_bits));
    if (magnitude >= (exp_all_ones << mantissa_bits)) {
      magnitude = exp_all_ones << mantissa_bits;  // overflow: infinity
    }
  } else {
    magnitude = CoreShiftRoundEven(sig, 52 - mantissa_bits + (min_exp - e));
  }
  return sign | magnitude;
}

// The value of such bits (exact in double).
MESHCAST_HOST_DEVICE inline double CoreFloatBitsToDouble(uint64_t bits,
                                                         int exponent_bits,
                                                         int mantissa_bits) {
  const int total = 1 + exponent_bits + mantissa_bits;
  const bool negative = (bits >> (total - 1)) & 1;
  const uint64_t exp_all_ones = (uint64_t{1} << exponent_bits) - 1;
  const uint64_t exponent = (bits >> mantissa_bits) & exp_all_ones;
  const uint64_t mantissa = bits & ((uint64_t{1} << mantissa_bits) - 1);
  const int bias = (1 << (exponent_bits - 1)) - 1;
  double magnitude;
  if (exponent == exp_all_ones) {
    magnitude = CoreBitsDouble(mantissa != 0 ? 0x7FF8000000000000ull
                                             : 0x7FF0000000000000ull);
  } else if (exponent == 0) {
    magnitude = static_cast<double>(mantissa) *
                CorePow2(1 - bias - mantissa_bits);
  } else {
    magnitude =
        static_cast<double>(mantissa | (uint64_t{1} << mantissa_bits)) *
        CorePow2(static_cast<int>(exponent) - bias - mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

MESHCAST_HOST_DEVICE inline int CoreExponentBits(PatternType type) {
  return type == PatternType::kFloat16 ? 5 : 8;
}
MESHCAST_HOST_DEVICE inline int CoreMantissaBits(PatternType type) {
  return type == PatternType::kFloat16 ? 10 : 7;
}

// Truncates toward zero and wraps modulo 2^64 (NaN and infinities: 0):
// element.h's DoubleToWrappedInt64.
MESHCAST_HOST_DEVICE inline int64_t CoreDoubleToWrappedInt64(double value) {
  if (CoreIsNan(value) || CoreIsInf(value)) return 0;
  constexpr double kTwo63 = 9223372036854775808.0;
  constexpr double kTwo64 = 18446744073709551616.0;
  if (value >= -kTwo63 && value < kTwo63) {
    return static_cast<int64_t>(value);  // truncates toward zero
  }
  // |value| >= 2^63: an integer, a multiple of 2^11; reduce mod 2^64
  // exactly.
  double t = ::fmod(value, kTwo64);
  if (t < 0) t += kTwo64;
  if (t >= kTwo64) t = 0;
  const uint64_t u = t >= kTwo63 ? static_cast<uint64_t>(t - kTwo63) +
                                       (uint64_t{1} << 63)
                                 : static_cast<uint64_t>(t);
  return static_cast<int64_t>(u);
}

// compute.h's ScaleInteger.
MESHCAST_HOST_DEVICE inline int64_t CoreScaleInteger(int64_t value,
                                                     double alpha) {
  constexpr double kTwo63 = 9223372036854775808.0;
  if (alpha >= -kTwo63 && alpha < kTwo63 &&
      alpha == static_cast<double>(static_cast<int64_t>(alpha))) {
    return static_cast<int64_t>(static_cast<uint64_t>(value) *
                                static_cast<uint64_t>(
                                    static_cast<int64_t>(alpha)));
  }
  return CoreDoubleToWrappedInt64(alpha * static_cast<double>(value));
}

// The integer element's value (int8/int32/int64 signed, uint8 unsigned).
MESHCAST_HOST_DEVICE inline int64_t CoreIntegerValue(PatternType type,
                                                     uint64_t bits) {
  switch (type) {
    case PatternType::kInt8:
      return static_cast<int8_t>(static_cast<uint8_t>(bits));
    case PatternType::kUInt8:
      return static_cast<uint8_t>(bits);
    case PatternType::kInt32:
      return static_cast<int32_t>(static_cast<uint32_t>(bits));
    default:
      return static_cast<int64_t>(bits);
  }
}

// An integer wrapped to the element's width, as bits.
MESHCAST_HOST_DEVICE inline uint64_t CoreIntegerBits(PatternType type,
                                                     int64_t value) {
  const uint64_t u = static_cast<uint64_t>(value);
  switch (type) {
    case PatternType::kInt8:
    case PatternType::kUInt8:
      return u & 0xFFu;
    case PatternType::kInt32:
      return u & 0xFFFFFFFFu;
    default:
      return u;
  }
}

MESHCAST_HOST_DEVICE inline uint64_t ReduceBits(PatternType type, bool max,
                                                uint64_t a, uint64_t b) {
  switch (type) {
    case PatternType::kInt8:
    case PatternType::kUInt8:
    case PatternType::kInt32:
    case PatternType::kInt64: {
      const int64_t x = CoreIntegerValue(type, a);
      const int64_t y = CoreIntegerValue(type, b);
      if (max) return CoreIntegerBits(type, y > x ? y : x);
      return CoreIntegerBits(
          type, static_cast<int64_t>(static_cast<uint64_t>(x) +
                                     static_cast<uint64_t>(y)));
    }
    case PatternType::kFloat16:
    case PatternType::kBFloat16: {
      const int e = CoreExponentBits(type), m = CoreMantissaBits(type);
      const float x = static_cast<float>(CoreFloatBitsToDouble(a, e, m));
      const float y = static_cast<float>(CoreFloatBitsToDouble(b, e, m));
      const float r = max ? (y > x ? y : x) : x + y;
      return CoreRoundToFloatBits(static_cast<double>(r), e, m);
    }
    case PatternType::kFloat32: {
      const float x = CoreBitsFloat(static_cast<uint32_t>(a));
      const float y = CoreBitsFloat(static_cast<uint32_t>(b));
      return CoreFloatBits(max ? (y > x ? y : x) : x + y);
    }
    case PatternType::kFloat64: {
      const double x = CoreBitsDouble(a), y = CoreBitsDouble(b);
      return CoreDoubleBits(max ? (y > x ? y : x) : x + y);
    }
  }
  return 0;
}

MESHCAST_HOST_DEVICE inline uint64_t AddBits(PatternType type, uint64_t x,
                                             uint64_t y) {
  return ReduceBits(type, /*max=*/false, x, y);
}

MESHCAST_HOST_DEVICE inline uint64_t ScaleBits(PatternType type, double alpha,
                                               uint64_t x) {
  switch (type) {
    case PatternType::kInt8:
    case PatternType::kUInt8:
    case PatternType::kInt32:
    case PatternType::kInt64:
      return CoreIntegerBits(
          type, CoreScaleInteger(CoreIntegerValue(type, x), alpha));
    case PatternType::kFloat16:
    case PatternType::kBFloat16: {
      const int e = CoreExponentBits(type), m = CoreMantissaBits(type);
      return CoreRoundToFloatBits(alpha * CoreFloatBitsToDouble(x, e, m), e,
                                  m);
    }
    case PatternType::kFloat32: {
      const float v = CoreBitsFloat(static_cast<uint32_t>(x));
      return CoreFloatBits(static_cast<float>(alpha * static_cast<double>(v)));
    }
    case PatternType::kFloat64:
      return CoreDoubleBits(alpha * CoreBitsDouble(x));
  }
  return 0;
}

MESHCAST_HOST_DEVICE inline bool CoreIsFloatType(PatternType type) {
  return type == PatternType::kFloat16 || type == PatternType::kBFloat16 ||
         type == PatternType::kFloat32 || type == PatternType::kFloat64;
}

// The value of a float element (exact in double). Integer types: their value.
MESHCAST_HOST_DEVICE inline double CoreFloatValue(PatternType type,
                                                  uint64_t bits) {
  switch (type) {
    case PatternType::kFloat16:
    case PatternType::kBFloat16:
      return CoreFloatBitsToDouble(bits, CoreExponentBits(type),
                                   CoreMantissaBits(type));
    case PatternType::kFloat32:
      return static_cast<double>(CoreBitsFloat(static_cast<uint32_t>(bits)));
    case PatternType::kFloat64:
      return CoreBitsDouble(bits);
    default:
      return static_cast<double>(CoreIntegerValue(type, bits));
  }
}

// `value` rounded once to a float dtype (nearest, ties to even), as bits.
// Integer types: truncated and wrapped.
MESHCAST_HOST_DEVICE inline uint64_t CoreFloatStoreBits(PatternType type,
                                                        double value) {
  switch (type) {
    case PatternType::kFloat16:
    case PatternType::kBFloat16:
      return CoreRoundToFloatBits(value, CoreExponentBits(type),
                                  CoreMantissaBits(type));
    case PatternType::kFloat32:
      return CoreFloatBits(static_cast<float>(value));
    case PatternType::kFloat64:
      return CoreDoubleBits(value);
    default:
      return CoreIntegerBits(type, CoreDoubleToWrappedInt64(value));
  }
}

MESHCAST_HOST_DEVICE inline uint64_t ReluBits(PatternType type, uint64_t x) {
  return CoreFloatValue(type, x) < 0 ? 0 : x;  // +0 is all zero bits
}

MESHCAST_HOST_DEVICE inline uint64_t SigmoidBits(PatternType type, uint64_t x) {
  const double v = CoreFloatValue(type, x);
  return CoreFloatStoreBits(type, 1.0 / (1.0 + ::exp(-v)));
}

MESHCAST_HOST_DEVICE inline uint64_t ReluGradBits(PatternType type, uint64_t g,
                                                  uint64_t y) {
  return CoreFloatValue(type, y) > 0 ? g : 0;  // NaN > 0 is false: +0
}

// See the top of the file. The _rn intrinsics on the device keep nvcc from
// fusing anything (there is no add to fuse a product into anyway), so host
// and GPU round the same operations.
MESHCAST_HOST_DEVICE inline uint64_t SigmoidGradBits(PatternType type,
                                                     uint64_t g, uint64_t s) {
  const double gv = CoreFloatValue(type, g), sv = CoreFloatValue(type, s);
  if (type == PatternType::kFloat16 || type == PatternType::kBFloat16) {
    // Both are exact in float.
    const float gf = static_cast<float>(gv), sf = static_cast<float>(sv);
#if defined(__CUDA_ARCH__)
    const float r = __fmul_rn(__fmul_rn(gf, sf), __fsub_rn(1.0f, sf));
#else
    const float gs = gf * sf;
    const float rest = 1.0f - sf;
    const float r = gs * rest;
#endif
    return CoreFloatStoreBits(type, static_cast<double>(r));
  }
#if defined(__CUDA_ARCH__)
  const double r = __dmul_rn(__dmul_rn(gv, sv), __dsub_rn(1.0, sv));
#else
  const double gs = gv * sv;
  const double rest = 1.0 - sv;
  const double r = gs * rest;
#endif
  return CoreFloatStoreBits(type, r);
}

// acc + w * x, rounded as the dtype's gather accumulator does (see the top
// of the file); `acc` and the result are that accumulator's values.
MESHCAST_HOST_DEVICE inline double GatherMulAdd(PatternType type, double acc,
                                                double w, double x) {
  if (type == PatternType::kFloat16 || type == PatternType::kBFloat16) {
    const float a = static_cast<float>(acc);
    const float wf = static_cast<float>(w), xf = static_cast<float>(x);
#if defined(__CUDA_ARCH__)
    return static_cast<double>(__fadd_rn(a, __fmul_rn(wf, xf)));
#else
    const float product = wf * xf;
    return static_cast<double>(a + product);
#endif
  }
#if defined(__CUDA_ARCH__)
  return __dadd_rn(acc, __dmul_rn(w, x));
#else
  const double product = w * x;
  return acc + product;
#endif
}

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_KERNELS_ELEMENT_CORE_H_
