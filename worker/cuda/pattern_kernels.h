// CUDA kernels that fill a device tile with the deterministic pattern and
// count the elements that differ from it: the GPU side of worker/pattern.h,
// computing the same bits (both use pattern_core.h).
//
// Plain C++ and the CUDA runtime API only, so nvcc compiles it without
// Abseil; worker/cuda/device_pattern.h wraps it with absl::Status.
//
//   PatternTile tile = ...;  // see MakePatternTile in device_pattern.h
//   LaunchFillPattern(ptr, tile, PatternType::kFloat16, 0, stream);
//   LaunchVerifyPattern(ptr, tile, PatternType::kFloat16, 0, count, stream);
//
// Launches are asynchronous on `stream`. Thread safety: as the CUDA runtime.
#ifndef MESHCAST_WORKER_CUDA_PATTERN_KERNELS_H_
#define MESHCAST_WORKER_CUDA_PATTERN_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/pattern_core.h"

namespace meshcast::worker::cuda {

inline constexpr int kMaxPatternRank = 8;

// Where a tile sits in its tensor: a box of `rank` dimensions stored
// row-major in the tile. tensor_stride[d] is the row-major stride of
// dimension d in the full tensor (elements).
struct PatternTile {
  int rank = 0;
  int64_t elements = 0;  // product of box_size
  int64_t box_begin[kMaxPatternRank] = {};
  int64_t box_size[kMaxPatternRank] = {};
  int64_t tensor_stride[kMaxPatternRank] = {};
};

// Writes the pattern of tensor `tensor` into every element of the tile at
// `data` (device memory, tile.elements * PatternTypeSize(type) bytes).
cudaError_t LaunchFillPattern(void* data, const PatternTile& tile,
                              PatternType type, uint32_t tensor,
                              cudaStream_t stream);

// Adds the number of tile elements whose bits differ from the pattern to
// *mismatches (device memory; the caller zeroes it first).
cudaError_t LaunchVerifyPattern(const void* data, const PatternTile& tile,
                                PatternType type, uint32_t tensor,
                                unsigned long long* mismatches,
                                cudaStream_t stream);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_PATTERN_KERNELS_H_
