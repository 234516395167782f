#include "worker/cuda/device_pattern.h"

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "worker/box_runs.h"
#include "worker/pattern.h"

namespace meshcast::worker::cuda {

int GpuCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(error),
                                          ": ", cudaGetErrorString(error)));
}

absl::StatusOr<PatternTile> MakePatternTile(const Box& box,
                                            const TensorSpec& spec) {
  RETURN_IF_ERROR(CheckRegionInBox(box, spec.full_box(), "box"));
  if (box.size() > static_cast<size_t>(kMaxPatternRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("box ", BoxToString(box), " has rank ", box.size(),
                     "; the GPU kernels handle up to ", kMaxPatternRank));
  }
  PatternTile tile;
  tile.rank = static_cast<int>(box.size());
  tile.elements = NumElements(box);
  int64_t stride = 1;
  for (int d = tile.rank - 1; d >= 0; --d) {
    tile.box_begin[d] = box[d].begin;
    tile.box_size[d] = box[d].size();
    tile.tensor_stride[d] = stride;
    stride *= spec.shape[d];
  }
  return tile;
}

absl::Status FillBoxOnDevice(void* data, const Box& box, const TensorSpec& spec,
                             int tensor_index, cudaStream_t stream) {
  ASSIGN_OR_RETURN(const PatternTile tile, MakePatternTile(box, spec));
  return CudaStatus(
      LaunchFillPattern(data, tile, ToPatternType(spec.dtype),
                        static_cast<uint32_t>(tensor_index), stream),
      "launching the pattern fill kernel");
}

absl::StatusOr<int64_t> CountMismatchesOnDevice(const void* data,
                                                const Box& box,
                                                const TensorSpec& spec,
                                                int tensor_index,
                                                cudaStream_t stream) {
  ASSIGN_OR_RETURN(const PatternTile tile, MakePatternTile(box, spec));
  void* allocation = nullptr;
  RETURN_IF_ERROR(
      CudaStatus(cudaMalloc(&allocation, sizeof(unsigned long long)),
                 "cudaMalloc counter"));
  auto* count = static_cast<unsigned long long*>(allocation);
  absl::Status status = CudaStatus(
      cudaMemsetAsync(count, 0, sizeof(*count), stream), "zeroing counter");
  if (status.ok()) {
    status = CudaStatus(
        LaunchVerifyPattern(data, tile, ToPatternType(spec.dtype),
                            static_cast<uint32_t>(tensor_index), count, stream),
        "launching the pattern verify kernel");
  }
  unsigned long long host = 0;
  if (status.ok()) {
    status = CudaStatus(cudaMemcpyAsync(&host, count, sizeof(host),
                                        cudaMemcpyDeviceToHost, stream),
                        "copying the mismatch count");
  }
  if (status.ok()) {
    status = CudaStatus(cudaStreamSynchronize(stream), "verify kernel");
  }
  cudaFree(count);
  if (!status.ok()) return status;
  return static_cast<int64_t>(host);
}

}  // namespace meshcast::worker::cuda
