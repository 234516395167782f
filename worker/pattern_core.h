// The deterministic data pattern, in a form that compiles for host and CUDA
// device code alike (no Abseil, no standard library beyond <cstdint>).
//
// Element with global row-major index i of tensor t holds PatternBits(type,
// i, t): the low PatternTypeSize(type) bytes of the returned word are the
// element's little-endian bit pattern. Integers get a 64-bit hash of (i, t)
// truncated to their width. Floating-point types get a signed integer drawn
// from the hash with at most as many significant bits as the type's
// mantissa, so the value is exact in that type (fp16: [-1024, 1023], bf16:
// [-128, 127], fp32: [-2^23, 2^23 - 1], fp64: [-2^52, 2^52 - 1]) and never
// NaN; verification compares bit patterns.
//
// The functions are constexpr so that tests can pin values at compile time.
// worker/pattern.h is the host-side API built on this header.
// Thread safety: pure functions.
#ifndef MESHCAST_WORKER_PATTERN_CORE_H_
#define MESHCAST_WORKER_PATTERN_CORE_H_

#include <cstdint>

#if defined(__CUDACC__)
#define MESHCAST_HOST_DEVICE __host__ __device__
#else
#define MESHCAST_HOST_DEVICE
#endif

namespace meshcast::worker {

// Mirrors meshcast::DType (planner/tensor.h), which device code cannot
// include; pattern.h converts between the two.
enum class PatternType : int32_t {
  kInt8 = 0,
  kUInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
};

MESHCAST_HOST_DEVICE constexpr int PatternTypeSize(PatternType type) {
  switch (type) {
    case PatternType::kInt8:
    case PatternType::kUInt8:
      return 1;
    case PatternType::kFloat16:
    case PatternType::kBFloat16:
      return 2;
    case PatternType::kInt32:
    case PatternType::kFloat32:
      return 4;
    case PatternType::kInt64:
    case PatternType::kFloat64:
      return 8;
  }
  return 0;
}

// A 64-bit mix of (index, tensor): the SplitMix64 finalizer over the index
// offset by a tensor-dependent odd constant, so neighbouring elements and
// different tensors get unrelated values.
MESHCAST_HOST_DEVICE constexpr uint64_t PatternHash(uint64_t index,
                                                    uint32_t tensor) {
  uint64_t z = index + 0x9E3779B97F4A7C15ull * (uint64_t{tensor} * 2 + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// IEEE-754 bits of the integer `value` in a binary format with the given
// exponent and mantissa widths. Exact when |value| < 2^(mantissa_bits + 1).
MESHCAST_HOST_DEVICE constexpr uint64_t IntegerToFloatBits(int64_t value,
                                                           int exponent_bits,
                                                           int mantissa_bits) {
  if (value == 0) return 0;
  const uint64_t sign = value < 0 ? 1 : 0;
  const uint64_t magnitude = value < 0
                                 ? uint64_t{0} - static_cast<uint64_t>(value)
                                 : static_cast<uint64_t>(value);
  // floor(log2(magnitude)) by binary search (no intrinsics: host + device).
  int exponent = 0;
  uint64_t x = magnitude;
  if (x >> 32) {
    x >>= 32;
    exponent += 32;
  }
  if (x >> 16) {
    x >>= 16;
    exponent += 16;
  }
  if (x >> 8) {
    x >>= 8;
    exponent += 8;
  }
  if (x >> 4) {
    x >>= 4;
    exponent += 4;
  }
  if (x >> 2) {
    x >>= 2;
    exponent += 2;
  }
  if (x >> 1) {
    exponent += 1;
  }
  const uint64_t mantissa_mask = (uint64_t{1} << mantissa_bits) - 1;
  const uint64_t mantissa =
      exponent <= mantissa_bits
          ? (magnitude << (mantissa_bits - exponent)) & mantissa_mask
          : (magnitude >> (exponent - mantissa_bits)) & mantissa_mask;
  const uint64_t bias = (uint64_t{1} << (exponent_bits - 1)) - 1;
  return (sign << (exponent_bits + mantissa_bits)) |
         ((static_cast<uint64_t>(exponent) + bias) << mantissa_bits) | mantissa;
}

// The small signed integer a floating-point element holds: `hash` reduced to
// [-2^mantissa_bits, 2^mantissa_bits - 1].
MESHCAST_HOST_DEVICE constexpr int64_t PatternInteger(uint64_t hash,
                                                      int mantissa_bits) {
  const uint64_t span = uint64_t{1} << (mantissa_bits + 1);
  return static_cast<int64_t>(hash & (span - 1)) -
         static_cast<int64_t>(span >> 1);
}

// The element's bit pattern in the low PatternTypeSize(type) bytes.
MESHCAST_HOST_DEVICE constexpr uint64_t PatternBits(PatternType type,
                                                    uint64_t index,
                                                    uint32_t tensor) {
  const uint64_t h = PatternHash(index, tensor);
  switch (type) {
    case PatternType::kInt8:
    case PatternType::kUInt8:
      return h & 0xFFu;
    case PatternType::kInt32:
      return h & 0xFFFFFFFFu;
    case PatternType::kInt64:
      return h;
    case PatternType::kFloat16:
      return IntegerToFloatBits(PatternInteger(h, 10), 5, 10);
    case PatternType::kBFloat16:
      return IntegerToFloatBits(PatternInteger(h, 7), 8, 7);
    case PatternType::kFloat32:
      return IntegerToFloatBits(PatternInteger(h, 23), 8, 23);
    case PatternType::kFloat64:
      return IntegerToFloatBits(PatternInteger(h, 52), 11, 52);
  }
  return 0;
}

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_PATTERN_CORE_H_
