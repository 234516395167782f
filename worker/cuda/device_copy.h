// Strided copies between GPU buffers, with absl::Status errors: the host
// side of copy_kernels.h. A slice of a tile is packed into a contiguous chunk
// (for NCCL), unpacked from one into a tile, or copied tile to tile (local
// hops between logical devices, the destination pre-copy).
//
//   ASSIGN_OR_RETURN(RegionCopy pack,
//                    MakePackCopy(slice, tile_box, first, last, size));
//   RETURN_IF_ERROR(EnqueueRegionCopy({chunk, gpu}, {tile, gpu}, pack,
//                                     stream, gpu));
//
// Make*Copy describe the copy (pure, testable without a GPU: the host test
// runs the same RowSegment arithmetic as the kernels). EnqueueRegionCopy
// issues it asynchronously on `stream`: a single contiguous segment as one
// cudaMemcpyAsync (cudaMemcpyPeerAsync between GPUs), anything else as a
// kernel on the stream's GPU, which between two GPUs needs peer access (see
// EnablePeerAccess).
// Thread safety: pure functions and CUDA runtime calls.
#ifndef MESHCAST_WORKER_CUDA_DEVICE_COPY_H_
#define MESHCAST_WORKER_CUDA_DEVICE_COPY_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/tensor.h"
#include "worker/cuda/copy_core.h"

namespace meshcast::worker::cuda {

// Elements [first, last) of `slice` (slice row-major order) from a tile
// holding `tile_box` into a packed chunk of (last - first) elements.
absl::StatusOr<RegionCopy> MakePackCopy(const Box& slice, const Box& tile_box,
                                        int64_t first, int64_t last,
                                        int element_size);

// The inverse: a packed chunk of elements [first, last) of `slice` into the
// tile.
absl::StatusOr<RegionCopy> MakeUnpackCopy(const Box& slice, const Box& tile_box,
                                          int64_t first, int64_t last,
                                          int element_size);

// All of `region` from a tile holding `src_box` to one holding `dst_box`.
absl::StatusOr<RegionCopy> MakeTileCopy(const Box& region, const Box& dst_box,
                                        const Box& src_box, int element_size);

// True if the copy is one contiguous segment in both buffers (or empty).
bool IsSingleSegment(const RegionCopy& copy);

// A GPU buffer: device pointer and the CUDA ordinal it lives on.
struct GpuPointer {
  void* data = nullptr;
  int gpu = 0;
};
struct ConstGpuPointer {
  const void* data = nullptr;
  int gpu = 0;
};

// Enqueues `copy` from `src` to `dst` on `stream`, which belongs to
// `stream_gpu` (one of the two buffers' GPUs).
absl::Status EnqueueRegionCopy(GpuPointer dst, ConstGpuPointer src,
                               const RegionCopy& copy, cudaStream_t stream,
                               int stream_gpu);

// Lets each GPU of `gpus` access the memory of every other one where the
// hardware allows it (NVLink or PCIe P2P); pairs that cannot are left alone
// and reported by CanAccessPeer. Idempotent.
absl::Status EnablePeerAccess(const std::vector<int>& gpus);
bool CanAccessPeer(int gpu, int peer);

// Lets every other GPU that can reach `gpu` peer to peer read and write the
// memory of `gpu`'s default stream-ordered pool (cudaMallocAsync).
// cudaDeviceEnablePeerAccess does not cover pool memory, yet NCCL reads and
// writes user buffers of another GPU directly when both ranks live in one
// process (its P2P "direct pointer" path), so staging chunks allocated from
// the pool must be shared. Once per GPU per process; thread-safe.
absl::Status ShareDefaultMemPoolWithPeers(int gpu);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_DEVICE_COPY_H_
