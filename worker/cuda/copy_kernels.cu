#include <algorithm>

#include "worker/cuda/copy_kernels.h"

namespace meshcast::worker::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int64_t kMaxBlocks = 65535;

// The widest word (16, 8, 4, 2 or 1 bytes) that divides both addresses and
// the length, so a row moves with as few accesses as its alignment allows.
__device__ int WordBytes(const uint8_t* dst, const uint8_t* src,
                         int64_t bytes) {
  const uint64_t bits = reinterpret_cast<uint64_t>(dst) |
                        reinterpret_cast<uint64_t>(src) |
                        static_cast<uint64_t>(bytes);
  if (bits % 16 == 0) return 16;
  if (bits % 8 == 0) return 8;
  if (bits % 4 == 0) return 4;
  if (bits % 2 == 0) return 2;
  return 1;
}

template <typename Word>
__device__ void CopyWords(uint8_t* dst, const uint8_t* src, int64_t bytes,
                          int64_t start, int64_t step) {
  Word* out = reinterpret_cast<Word*>(dst);
  const Word* in = reinterpret_cast<const Word*>(src);
  const int64_t words = bytes / static_cast<int64_t>(sizeof(Word));
  for (int64_t i = start; i < words; i += step) out[i] = in[i];
}

// Copies `bytes` from src to dst; the calling threads take words start,
// start + step, ...
__device__ void CopyBytes(uint8_t* dst, const uint8_t* src, int64_t bytes,
                          int64_t start, int64_t step) {
  switch (WordBytes(dst, src, bytes)) {
    case 16:
      CopyWords<uint4>(dst, src, bytes, start, step);
      break;
    case 8:
      CopyWords<unsigned long long>(dst, src, bytes, start, step);
      break;
    case 4:
      CopyWords<uint32_t>(dst, src, bytes, start, step);
      break;
    case 2:
      CopyWords<uint16_t>(dst, src, bytes, start, step);
      break;
    default:
      CopyWords<uint8_t>(dst, src, bytes, start, step);
  }
}

// One warp per row: long rows, coalesced in both buffers.
__global__ void CopyRowsByWarp(uint8_t* dst, const uint8_t* src,
                               RegionCopy copy) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) +
                       threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t end = EndRow(copy);
  const int64_t size = copy.element_size;
  for (int64_t row = FirstRow(copy) + warp; row < end; row += warps) {
    int64_t d = 0, s = 0, length = 0;
    RowSegment(copy, row, &d, &s, &length);
    CopyBytes(dst + d * size, src + s * size, length * size, lane, kWarp);
  }
}

// One thread per row: short rows (down to single elements), where a warp
// per row would leave most lanes idle.
__global__ void CopyRowsByThread(uint8_t* dst, const uint8_t* src,
                                 RegionCopy copy) {
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t end = EndRow(copy);
  const int64_t size = copy.element_size;
  for (int64_t row = FirstRow(copy) +
                     static_cast<int64_t>(blockIdx.x) * blockDim.x +
                     threadIdx.x;
       row < end; row += threads) {
    int64_t d = 0, s = 0, length = 0;
    RowSegment(copy, row, &d, &s, &length);
    CopyBytes(dst + d * size, src + s * size, length * size, 0, 1);
  }
}

int Blocks(int64_t workers_per_block, int64_t work) {
  const int64_t needed = (work + workers_per_block - 1) / workers_per_block;
  return static_cast<int>(std::clamp<int64_t>(needed, 1, kMaxBlocks));
}

}  // namespace

cudaError_t LaunchRegionCopy(uint8_t* dst, const uint8_t* src,
                             const RegionCopy& copy, cudaStream_t stream) {
  if (copy.run < 1 || copy.element_size < 1 || copy.outer_rank < 0 ||
      copy.outer_rank > kMaxCopyOuterRank) {
    return cudaErrorInvalidValue;
  }
  const int64_t rows = EndRow(copy) - FirstRow(copy);
  if (rows <= 0) return cudaSuccess;
  if (copy.run * copy.element_size >= kWarpRowBytes) {
    CopyRowsByWarp<<<Blocks(kThreads / kWarp, rows), kThreads, 0, stream>>>(
        dst, src, copy);
  } else {
    CopyRowsByThread<<<Blocks(kThreads, rows), kThreads, 0, stream>>>(dst, src,
                                                                      copy);
  }
  return cudaGetLastError();
}

}  // namespace meshcast::worker::cuda
