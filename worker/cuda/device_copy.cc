#include "worker/cuda/device_copy.h"

#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "util/status_macros.h"
#include "worker/box_runs.h"
#include "worker/cuda/copy_kernels.h"
#include "worker/cuda/cuda_handles.h"
#include "worker/cuda/device_pattern.h"

namespace meshcast::worker::cuda {
namespace {

// Builds the copy of elements [first, last) of `region` between buffers
// holding `dst_box` and `src_box` (a packed chunk is the region's own box,
// based at -first).
absl::StatusOr<RegionCopy> MakeCopy(const Box& region, const Box& dst_box,
                                    bool dst_packed, const Box& src_box,
                                    bool src_packed, int64_t first,
                                    int64_t last, int element_size) {
  RETURN_IF_ERROR(CheckRegionInBox(region, dst_box, "region"));
  RETURN_IF_ERROR(CheckRegionInBox(region, src_box, "region"));
  RETURN_IF_ERROR(CheckElementRange(region, first, last));
  if (element_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("element size ", element_size, " must be >= 1"));
  }
  const int rank = static_cast<int>(region.size());
  RegionCopy copy;
  copy.element_size = element_size;
  copy.first = first;
  copy.last = last;
  if (rank == 0) {  // a scalar: one element at offset 0 of each buffer
    copy.dst_base = dst_packed ? -first : 0;
    copy.src_base = src_packed ? -first : 0;
    return copy;
  }
  auto covered = [&](int d) {
    const int64_t n = region[d].size();
    return n == dst_box[d].size() && n == src_box[d].size();
  };
  int split = rank - 1;
  while (split > 0 && covered(split)) --split;
  if (split > kMaxCopyOuterRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("region ", BoxToString(region), " needs ", split,
                     " strided dimensions; the GPU copy kernels handle up to ",
                     kMaxCopyOuterRank));
  }
  std::vector<int64_t> dst_stride(rank), src_stride(rank);
  int64_t dst_step = 1, src_step = 1;
  for (int d = rank - 1; d >= 0; --d) {
    dst_stride[d] = dst_step;
    src_stride[d] = src_step;
    dst_step *= dst_box[d].size();
    src_step *= src_box[d].size();
  }
  copy.run = 1;
  for (int d = split; d < rank; ++d) copy.run *= region[d].size();
  if (copy.run == 0) copy.run = 1;  // empty region: no rows are touched
  copy.outer_rank = split;
  for (int d = 0; d < split; ++d) {
    copy.outer_extent[d] = region[d].size();
    copy.dst_stride[d] = dst_stride[d];
    copy.src_stride[d] = src_stride[d];
  }
  for (int d = 0; d < rank; ++d) {
    copy.dst_base += (region[d].begin - dst_box[d].begin) * dst_stride[d];
    copy.src_base += (region[d].begin - src_box[d].begin) * src_stride[d];
  }
  if (dst_packed) copy.dst_base -= first;
  if (src_packed) copy.src_base -= first;
  return copy;
}

}  // namespace

absl::StatusOr<RegionCopy> MakePackCopy(const Box& slice, const Box& tile_box,
                                        int64_t first, int64_t last,
                                        int element_size) {
  return MakeCopy(slice, slice, /*dst_packed=*/true, tile_box,
                  /*src_packed=*/false, first, last, element_size);
}

absl::StatusOr<RegionCopy> MakeUnpackCopy(const Box& slice, const Box& tile_box,
                                          int64_t first, int64_t last,
                                          int element_size) {
  return MakeCopy(slice, tile_box, /*dst_packed=*/false, slice,
                  /*src_packed=*/true, first, last, element_size);
}

absl::StatusOr<RegionCopy> MakeTileCopy(const Box& region, const Box& dst_box,
                                        const Box& src_box, int element_size) {
  return MakeCopy(region, dst_box, false, src_box, false, 0,
                  NumElements(region), element_size);
}

bool IsSingleSegment(const RegionCopy& copy) {
  return EndRow(copy) - FirstRow(copy) <= 1;
}

absl::Status EnqueueRegionCopy(GpuPointer dst, ConstGpuPointer src,
                               const RegionCopy& copy, cudaStream_t stream,
                               int stream_gpu) {
  const int64_t rows = EndRow(copy) - FirstRow(copy);
  if (rows <= 0) return absl::OkStatus();
  auto* out = static_cast<uint8_t*>(dst.data);
  const auto* in = static_cast<const uint8_t*>(src.data);
  ScopedCudaDevice on(stream_gpu);
  RETURN_IF_ERROR(on.status());
  if (rows == 1) {
    int64_t d = 0, s = 0, length = 0;
    RowSegment(copy, FirstRow(copy), &d, &s, &length);
    const size_t bytes = static_cast<size_t>(length) * copy.element_size;
    if (dst.gpu == src.gpu) {
      return CudaStatus(cudaMemcpyAsync(out + d * copy.element_size,
                                        in + s * copy.element_size, bytes,
                                        cudaMemcpyDeviceToDevice, stream),
                        "cudaMemcpyAsync device to device");
    }
    return CudaStatus(
        cudaMemcpyPeerAsync(out + d * copy.element_size, dst.gpu,
                            in + s * copy.element_size, src.gpu, bytes, stream),
        absl::StrCat("cudaMemcpyPeerAsync GPU ", src.gpu, " -> GPU ", dst.gpu));
  }
  // The kernel runs on the stream's GPU and reaches the other buffers
  // through peer access.
  for (int other : {src.gpu, dst.gpu}) {
    if (!CanAccessPeer(stream_gpu, other)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "a strided copy from GPU ", src.gpu, " to GPU ", dst.gpu,
          " on a stream of GPU ", stream_gpu, " needs peer access, which GPU ",
          stream_gpu, " does not have to GPU ", other));
    }
  }
  return CudaStatus(LaunchRegionCopy(out, in, copy, stream),
                    "launching the region copy kernel");
}

bool CanAccessPeer(int gpu, int peer) {
  if (gpu == peer) return true;
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, gpu, peer) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return can != 0;
}

absl::Status EnablePeerAccess(const std::vector<int>& gpus) {
  for (int gpu : gpus) {
    for (int peer : gpus) {
      if (gpu == peer || !CanAccessPeer(gpu, peer)) continue;
      ScopedCudaDevice on(gpu);
      RETURN_IF_ERROR(on.status());
      const cudaError_t error = cudaDeviceEnablePeerAccess(peer, 0);
      if (error == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // clear it: enabling twice is fine
        continue;
      }
      RETURN_IF_ERROR(CudaStatus(
          error, absl::StrCat("enabling peer access GPU ", gpu, " -> ", peer)));
    }
  }
  return absl::OkStatus();
}

absl::Status ShareDefaultMemPoolWithPeers(int gpu) {
  static absl::Mutex* const mu = new absl::Mutex;
  static auto* const shared = new absl::flat_hash_set<int>;
  absl::MutexLock lock(mu);
  if (shared->contains(gpu)) return absl::OkStatus();
  std::vector<cudaMemAccessDesc> access;
  for (int peer = 0; peer < GpuCount(); ++peer) {
    if (peer == gpu || !CanAccessPeer(peer, gpu)) continue;
    cudaMemAccessDesc desc = {};
    desc.location.type = cudaMemLocationTypeDevice;
    desc.location.id = peer;
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    access.push_back(desc);
  }
  if (!access.empty()) {
    ScopedCudaDevice on(gpu);
    RETURN_IF_ERROR(on.status());
    cudaMemPool_t pool = nullptr;
    RETURN_IF_ERROR(CudaStatus(cudaDeviceGetDefaultMemPool(&pool, gpu),
                               absl::StrCat("default memory pool of GPU ", gpu)));
    RETURN_IF_ERROR(CudaStatus(
        cudaMemPoolSetAccess(pool, access.data(), access.size()),
        absl::StrCat("sharing GPU ", gpu, "'s memory pool with its peers")));
  }
  shared->insert(gpu);
  return absl::OkStatus();
}

}  // namespace meshcast::worker::cuda
