// What the element-wise CUDA kernel files share: the storage word of each
// PatternType, the launch geometry of their grid-stride loops, and the
// switch that turns a run-time PatternType into a template argument.
//
//   using W = WordOf<PatternTypeSize(kType)>::Type;
//   MyKernel<kType><<<LaunchBlocks(n), kLaunchThreads, 0, stream>>>(...);
//   #define MY_CALL(t) Launch<t>(args)
//   MESHCAST_DISPATCH_PATTERN_TYPE(type, MY_CALL);  // returns from the caller
//
// Only for .cu files (device code). Thread safety: compile-time helpers.
#ifndef MESHCAST_WORKER_CUDA_KERNEL_LAUNCH_H_
#define MESHCAST_WORKER_CUDA_KERNEL_LAUNCH_H_

#include <algorithm>
#include <cstdint>

#include "worker/pattern_core.h"

namespace meshcast::worker::cuda {

template <int kSize>
struct WordOf;
template <>
struct WordOf<1> {
  using Type = uint8_t;
};
template <>
struct WordOf<2> {
  using Type = uint16_t;
};
template <>
struct WordOf<4> {
  using Type = uint32_t;
};
template <>
struct WordOf<8> {
  using Type = unsigned long long;
};

// The word an element of `kType` is stored in.
template <PatternType kType>
using WordT = typename WordOf<PatternTypeSize(kType)>::Type;

inline constexpr int kLaunchThreads = 256;

// Blocks of a grid-stride loop over n elements (at least 1, at most 65535;
// the loop covers the rest).
inline int LaunchBlocks(int64_t n) {
  const int64_t needed = (n + kLaunchThreads - 1) / kLaunchThreads;
  return static_cast<int>(std::clamp<int64_t>(needed, 1, 65535));
}

}  // namespace meshcast::worker::cuda

// `return CALL(PatternType::kX);` for the run-time `type`;
// cudaErrorInvalidValue for a value outside the enum.
#define MESHCAST_DISPATCH_PATTERN_TYPE(type, CALL)            \
  switch (type) {                                             \
    case ::meshcast::worker::PatternType::kInt8:              \
      return CALL(::meshcast::worker::PatternType::kInt8);    \
    case ::meshcast::worker::PatternType::kUInt8:             \
      return CALL(::meshcast::worker::PatternType::kUInt8);   \
    case ::meshcast::worker::PatternType::kInt32:             \
      return CALL(::meshcast::worker::PatternType::kInt32);   \
    case ::meshcast::worker::PatternType::kInt64:             \
      return CALL(::meshcast::worker::PatternType::kInt64);   \
    case ::meshcast::worker::PatternType::kFloat16:           \
      return CALL(::meshcast::worker::PatternType::kFloat16); \
    case ::meshcast::worker::PatternType::kBFloat16:          \
      return CALL(::meshcast::worker::PatternType::kBFloat16); \
    case ::meshcast::worker::PatternType::kFloat32:           \
      return CALL(::meshcast::worker::PatternType::kFloat32); \
    case ::meshcast::worker::PatternType::kFloat64:           \
      return CALL(::meshcast::worker::PatternType::kFloat64); \
  }                                                           \
  return cudaErrorInvalidValue

#endif  // MESHCAST_WORKER_CUDA_KERNEL_LAUNCH_H_
