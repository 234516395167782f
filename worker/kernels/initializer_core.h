// The RANDOM initializer's values, in a form that compiles for host and CUDA
// device code alike (no Abseil, no standard library beyond <cstdint>), like
// worker/pattern_core.h for the PATTERN initializer.
//
// Element with global row-major index i of tensor t under seed s holds
// RandomBits(type, s, i, t): a counter-based hash of (s, t, i) (no state, so
// any element can be computed alone, on any worker, in any order):
//  - floating-point types: k * 2^-M with k uniform in [-2^M, 2^M) and M the
//    type's mantissa width (fp16 10, bf16 7, fp32 23, fp64 52), i.e. uniform
//    in [-1, 1) on the type's own grid, so the value is exact in the type;
//  - integer types: uniform in [-8, 8), stored wrapped to the width (uint8
//    holds 248..255 for -8..-1).
// Thread safety: pure functions.
#ifndef MESHCAST_WORKER_KERNELS_INITIALIZER_CORE_H_
#define MESHCAST_WORKER_KERNELS_INITIALIZER_CORE_H_

#include <cstdint>

#include "worker/pattern_core.h"

namespace meshcast::worker {

// SplitMix64's finalizer.
MESHCAST_HOST_DEVICE constexpr uint64_t RandomMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A 64-bit hash of (seed, tensor, index): the pattern hash of (index,
// tensor) offset by a mix of the seed, mixed again so that nearby seeds give
// unrelated streams.
MESHCAST_HOST_DEVICE constexpr uint64_t RandomHash(uint64_t seed,
                                                   uint64_t index,
                                                   uint32_t tensor) {
  return RandomMix(PatternHash(index, tensor) +
                   RandomMix(seed ^ 0xD1B54A32D192ED03ull));
}

// The element's bit pattern in the low PatternTypeSize(type) bytes.
MESHCAST_HOST_DEVICE constexpr uint64_t RandomBits(PatternType type,
                                                   uint64_t seed,
                                                   uint64_t index,
                                                   uint32_t tensor) {
  const uint64_t h = RandomHash(seed, index, tensor);
  // Integers: [-8, 8) as two's complement, truncated to the width.
  const uint64_t small = (h & 15u) - 8u;
  switch (type) {
    case PatternType::kInt8:
    case PatternType::kUInt8:
      return small & 0xFFu;
    case PatternType::kInt32:
      return small & 0xFFFFFFFFu;
    case PatternType::kInt64:
      return small;
    case PatternType::kFloat16: {
      // k * 2^-10: the integer's bits with the exponent lowered by 10.
      const int64_t k = PatternInteger(h, 10);
      if (k == 0) return 0;
      return IntegerToFloatBits(k, 5, 10) - (uint64_t{10} << 10);
    }
    case PatternType::kBFloat16: {
      const int64_t k = PatternInteger(h, 7);
      if (k == 0) return 0;
      return IntegerToFloatBits(k, 8, 7) - (uint64_t{7} << 7);
    }
    case PatternType::kFloat32: {
      const int64_t k = PatternInteger(h, 23);
      if (k == 0) return 0;
      return IntegerToFloatBits(k, 8, 23) - (uint64_t{23} << 23);
    }
    case PatternType::kFloat64: {
      const int64_t k = PatternInteger(h, 52);
      if (k == 0) return 0;
      return IntegerToFloatBits(k, 11, 52) - (uint64_t{52} << 52);
    }
  }
  return 0;
}

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_KERNELS_INITIALIZER_CORE_H_
