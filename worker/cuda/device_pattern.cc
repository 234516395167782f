#include "worker/cuda/device_pattern.h"

#include <string>
#include <utility>

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
  std::string message = absl::StrCat(what, ": ", cudaGetErrorName(error), ": ",
                                     cudaGetErrorString(error));
  // Out of memory is the job's size, not a fault of the worker.
  if (error == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(std::move(message));
  }
  return absl::InternalError(std::move(message));
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

bool IsPatternInitializer(const v1::Initializer& init) {
  return init.kind() == v1::Initializer::KIND_PATTERN ||
         init.kind() == v1::Initializer::KIND_UNSPECIFIED;
}

absl::Status FillInitializerOnDevice(void* data, const Box& box,
                                     const TensorSpec& spec, int tensor_index,
                                     const v1::Initializer& init,
                                     cudaStream_t stream) {
  switch (init.kind()) {
    case v1::Initializer::KIND_UNSPECIFIED:
    case v1::Initializer::KIND_PATTERN:
      return FillBoxOnDevice(data, box, spec, tensor_index, stream);
    case v1::Initializer::KIND_RANDOM: {
      ASSIGN_OR_RETURN(const PatternTile tile, MakePatternTile(box, spec));
      return CudaStatus(
          LaunchFillRandom(data, tile, ToPatternType(spec.dtype), init.seed(),
                           static_cast<uint32_t>(tensor_index), stream),
          "launching the RANDOM initializer kernel");
    }
    case v1::Initializer::KIND_ZEROS:
      return CudaStatus(
          cudaMemsetAsync(data, 0, NumElements(box) * DTypeSize(spec.dtype),
                          stream),
          "zeroing a source tile");
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", tensor_index, ": initializer kind ",
          static_cast<int>(init.kind()),
          " is unknown; allowed: KIND_PATTERN, KIND_RANDOM, KIND_ZEROS"));
  }
}

absl::StatusOr<DeviceVerifyResult> VerifyBoxOnDevice(const void* data,
                                                     const Box& box,
                                                     const TensorSpec& spec,
                                                     int tensor_index,
                                                     cudaStream_t stream) {
  ASSIGN_OR_RETURN(const PatternTile tile, MakePatternTile(box, spec));
  void* allocation = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&allocation, sizeof(VerifyCounters)),
                             "cudaMalloc verify counters"));
  auto* counters = static_cast<VerifyCounters*>(allocation);
  absl::Status status =
      CudaStatus(cudaMemsetAsync(&counters->mismatches, 0,
                                 sizeof(counters->mismatches), stream),
                 "zeroing the mismatch count");
  if (status.ok()) {
    // All bits set: kNoMismatch.
    status =
        CudaStatus(cudaMemsetAsync(&counters->first_mismatch, 0xFF,
                                   sizeof(counters->first_mismatch), stream),
                   "resetting the first mismatch");
  }
  if (status.ok()) {
    status =
        CudaStatus(LaunchVerifyPattern(data, tile, ToPatternType(spec.dtype),
                                       static_cast<uint32_t>(tensor_index),
                                       counters, stream),
                   "launching the pattern verify kernel");
  }
  VerifyCounters host = {0, kNoMismatch};
  if (status.ok()) {
    status = CudaStatus(cudaMemcpyAsync(&host, counters, sizeof(host),
                                        cudaMemcpyDeviceToHost, stream),
                        "copying the verify counters");
  }
  if (status.ok()) {
    status = CudaStatus(cudaStreamSynchronize(stream), "verify kernel");
  }
  cudaFree(counters);
  if (!status.ok()) return status;
  DeviceVerifyResult result;
  result.mismatches = static_cast<int64_t>(host.mismatches);
  if (host.mismatches == 0) return result;
  if (host.first_mismatch >= static_cast<unsigned long long>(tile.elements)) {
    return absl::InternalError(absl::StrCat(
        "the verify kernel counted ", host.mismatches, " mismatches in tile ",
        BoxToString(box), " but recorded no first one inside it (",
        host.first_mismatch, ")"));
  }
  result.first_mismatch_element = static_cast<int64_t>(host.first_mismatch);
  return result;
}

}  // namespace meshcast::worker::cuda
