#include "worker/cuda/pattern_kernels.h"

#include "worker/cuda/kernel_launch.h"
#include "worker/kernels/initializer_core.h"

namespace meshcast::worker::cuda {
namespace {

// Global row-major index of tile element `e`.
__device__ uint64_t GlobalIndex(const PatternTile& tile, int64_t e) {
  uint64_t global = 0;
  for (int d = tile.rank - 1; d >= 0; --d) {
    const int64_t i = e % tile.box_size[d];
    e /= tile.box_size[d];
    global += static_cast<uint64_t>(tile.box_begin[d] + i) *
              static_cast<uint64_t>(tile.tensor_stride[d]);
  }
  return global;
}

template <PatternType kType>
__global__ void FillKernel(typename WordOf<PatternTypeSize(kType)>::Type* out,
                           PatternTile tile, uint32_t tensor) {
  using Word = typename WordOf<PatternTypeSize(kType)>::Type;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       e < tile.elements; e += stride) {
    out[e] =
        static_cast<Word>(PatternBits(kType, GlobalIndex(tile, e), tensor));
  }
}

// The RANDOM initializer (initializer_core.h): the same bits as the host's
// FillInitializer.
template <PatternType kType>
__global__ void FillRandomKernel(
    typename WordOf<PatternTypeSize(kType)>::Type* out, PatternTile tile,
    uint64_t seed, uint32_t tensor) {
  using Word = typename WordOf<PatternTypeSize(kType)>::Type;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       e < tile.elements; e += stride) {
    out[e] = static_cast<Word>(
        RandomBits(kType, seed, GlobalIndex(tile, e), tensor));
  }
}

template <PatternType kType>
__global__ void VerifyKernel(
    const typename WordOf<PatternTypeSize(kType)>::Type* in, PatternTile tile,
    uint32_t tensor, VerifyCounters* counters) {
  using Word = typename WordOf<PatternTypeSize(kType)>::Type;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  unsigned long long first = kNoMismatch;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       e < tile.elements; e += stride) {
    const Word expected =
        static_cast<Word>(PatternBits(kType, GlobalIndex(tile, e), tensor));
    if (in[e] != expected) {
      // A thread visits its elements in increasing order: its first
      // mismatch is its lowest.
      if (local == 0) first = static_cast<unsigned long long>(e);
      ++local;
    }
  }
  // Two atomics per thread that found something, not per element.
  if (local != 0) {
    atomicAdd(&counters->mismatches, local);
    atomicMin(&counters->first_mismatch, first);
  }
}

template <PatternType kType>
cudaError_t Fill(void* data, const PatternTile& tile, uint32_t tensor,
                 cudaStream_t stream) {
  using Word = typename WordOf<PatternTypeSize(kType)>::Type;
  FillKernel<kType><<<LaunchBlocks(tile.elements), kLaunchThreads, 0, stream>>>(
      static_cast<Word*>(data), tile, tensor);
  return cudaGetLastError();
}

template <PatternType kType>
cudaError_t FillRandom(void* data, const PatternTile& tile, uint64_t seed,
                       uint32_t tensor, cudaStream_t stream) {
  using Word = typename WordOf<PatternTypeSize(kType)>::Type;
  FillRandomKernel<kType>
      <<<LaunchBlocks(tile.elements), kLaunchThreads, 0, stream>>>(
          static_cast<Word*>(data), tile, seed, tensor);
  return cudaGetLastError();
}

template <PatternType kType>
cudaError_t Verify(const void* data, const PatternTile& tile, uint32_t tensor,
                   VerifyCounters* counters, cudaStream_t stream) {
  using Word = typename WordOf<PatternTypeSize(kType)>::Type;
  VerifyKernel<kType>
      <<<LaunchBlocks(tile.elements), kLaunchThreads, 0, stream>>>(
          static_cast<const Word*>(data), tile, tensor, counters);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchFillPattern(void* data, const PatternTile& tile,
                              PatternType type, uint32_t tensor,
                              cudaStream_t stream) {
  if (tile.rank < 0 || tile.rank > kMaxPatternRank) {
    return cudaErrorInvalidValue;
  }
  if (tile.elements == 0) return cudaSuccess;
#define MESHCAST_FILL(t) Fill<t>(data, tile, tensor, stream)
  MESHCAST_DISPATCH_PATTERN_TYPE(type, MESHCAST_FILL);
#undef MESHCAST_FILL
}

cudaError_t LaunchFillRandom(void* data, const PatternTile& tile,
                             PatternType type, uint64_t seed, uint32_t tensor,
                             cudaStream_t stream) {
  if (tile.rank < 0 || tile.rank > kMaxPatternRank) {
    return cudaErrorInvalidValue;
  }
  if (tile.elements == 0) return cudaSuccess;
#define MESHCAST_FILL_RANDOM(t) FillRandom<t>(data, tile, seed, tensor, stream)
  MESHCAST_DISPATCH_PATTERN_TYPE(type, MESHCAST_FILL_RANDOM);
#undef MESHCAST_FILL_RANDOM
}

cudaError_t LaunchVerifyPattern(const void* data, const PatternTile& tile,
                                PatternType type, uint32_t tensor,
                                VerifyCounters* counters, cudaStream_t stream) {
  if (tile.rank < 0 || tile.rank > kMaxPatternRank) {
    return cudaErrorInvalidValue;
  }
  if (tile.elements == 0) return cudaSuccess;
#define MESHCAST_VERIFY(t) Verify<t>(data, tile, tensor, counters, stream)
  MESHCAST_DISPATCH_PATTERN_TYPE(type, MESHCAST_VERIFY);
#undef MESHCAST_VERIFY
}


}  // namespace meshcast::worker::cuda
