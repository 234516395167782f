// CUDA kernels that fill a device tile with the deterministic pattern and
// find the elements that differ from it (how many, and the first): the GPU
// side of worker/pattern.h, computing the same bits (both use
// pattern_core.h).
//
// Plain C++ and the CUDA runtime API only, so nvcc compiles it without
// Abseil; worker/cuda/device_pattern.h wraps it with absl::Status.
//
//   PatternTile tile = ...;  // see MakePatternTile in device_pattern.h
//   LaunchFillPattern(ptr, tile, PatternType::kFloat16, 0, stream);
//   // counters: device memory, mismatches = 0, first_mismatch = kNoMismatch
//   LaunchVerifyPattern(ptr, tile, PatternType::kFloat16, 0, counters, stream);
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

// first_mismatch of a tile without mismatches (all bits set, so that
// cudaMemset to 0xFF initialises it).
// Fills the tile with the RANDOM initializer of (seed, tensor): the bits of
// worker/kernels/initializer_core.h's RandomBits, as the host's
// FillInitializer writes them.
cudaError_t LaunchFillRandom(void* data, const PatternTile& tile,
                             PatternType type, uint64_t seed, uint32_t tensor,
                             cudaStream_t stream);

inline constexpr unsigned long long kNoMismatch = ~0ull;

// What the verify kernel accumulates, in device memory. Before a launch the
// caller sets mismatches to 0 and first_mismatch to kNoMismatch.
struct VerifyCounters {
  // Elements whose bits differ from the pattern.
  unsigned long long mismatches;
  // The lowest row-major index within the tile of such an element: also
  // the lowest global index, since the tile's row-major order follows the
  // tensor's. The host fetches just that element to describe it.
  unsigned long long first_mismatch;
};

// Adds the number of tile elements whose bits differ from the pattern to
// counters->mismatches and lowers counters->first_mismatch to the index of
// the first of them.
cudaError_t LaunchVerifyPattern(const void* data, const PatternTile& tile,
                                PatternType type, uint32_t tensor,
                                VerifyCounters* counters, cudaStream_t stream);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_PATTERN_KERNELS_H_
