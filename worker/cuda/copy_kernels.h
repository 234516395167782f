// CUDA kernels for strided copies on a GPU: pack a sub-box of a tile into a
// contiguous chunk, unpack a chunk into a tile, or copy a region between two
// tiles (copy_core.h has the index arithmetic; device_copy.h builds the
// RegionCopy from boxes and wraps this with absl::Status).
//
// Plain C++ and the CUDA runtime API only, so nvcc compiles it without
// Abseil.
//
//   LaunchRegionCopy(dst_bytes, src_bytes, copy, stream);
//
// `dst` and `src` may be on different GPUs when peer access is enabled
// between them (the kernel runs on the stream's GPU and reads or writes the
// other through unified addressing). Launches are asynchronous on `stream`.
// Thread safety: as the CUDA runtime.
#ifndef MESHCAST_WORKER_CUDA_COPY_KERNELS_H_
#define MESHCAST_WORKER_CUDA_COPY_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/cuda/copy_core.h"

namespace meshcast::worker::cuda {

// Rows at least this long (bytes) are copied by a warp each; shorter rows by
// a thread each.
inline constexpr int64_t kWarpRowBytes = 256;

cudaError_t LaunchRegionCopy(uint8_t* dst, const uint8_t* src,
                             const RegionCopy& copy, cudaStream_t stream);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_COPY_KERNELS_H_
