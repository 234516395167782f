#include "worker/cuda/device_step.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "worker/cuda/cublas_loader.h"
#include "worker/cuda/cuda_handles.h"
#include "worker/cuda/device_copy.h"
#include "worker/cuda/device_pattern.h"

namespace meshcast::worker::cuda {

absl::StatusOr<int> StepPrimaryGpu(const StepDesc& step,
                                   const DeviceRelayEnvironment& env) {
  if (!step.chain.empty()) return PrimaryGpu(step, env);
  const int gpu = env.buffers->GpuOf(step.device);
  if (gpu < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step.id, " runs on device ", step.device,
        ", which has no GPU on this worker"));
  }
  return gpu;
}

absl::Status CublasStatus(cublasStatus_t status, absl::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  absl::StatusOr<const CublasApi*> blas = LoadCublas();
  std::string message = absl::StrCat(
      what, ": cuBLAS error ", static_cast<int>(status), " (",
      blas.ok() ? (*blas)->status_string(status) : "no cuBLAS", ")");
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(std::move(message));
    case CUBLAS_STATUS_INVALID_VALUE:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::InvalidArgumentError(std::move(message));
    default:
      return absl::InternalError(std::move(message));
  }
}

BlasHandles::~BlasHandles() {
  for (auto& [gpu, handle] : handles_) {
    ScopedCudaDevice on(gpu);
    // A handle exists only if cuBLAS loaded.
    (*LoadCublas())->destroy(handle);
  }
}

absl::StatusOr<cublasHandle_t> BlasHandles::Get(int gpu, cudaStream_t stream) {
  auto it = handles_.find(gpu);
  if (it == handles_.end()) {
    ScopedCudaDevice on(gpu);
    RETURN_IF_ERROR(on.status());
    ASSIGN_OR_RETURN(const CublasApi* blas, LoadCublas());
    cublasHandle_t handle = nullptr;
    RETURN_IF_ERROR(CublasStatus(blas->create(&handle),
                                 absl::StrCat("cublasCreate on GPU ", gpu)));
    it = handles_.emplace(gpu, handle).first;
  }
  // One handle per (lane, GPU) and one stream per (lane, GPU): the handle's
  // stream never changes, so its workspace is never shared across streams.
  ASSIGN_OR_RETURN(const CublasApi* blas, LoadCublas());
  RETURN_IF_ERROR(
      CublasStatus(blas->set_stream(it->second, stream), "cublasSetStream"));
  return it->second;
}

absl::StatusOr<StepStream> StepStream::Begin(
    const DeviceLane& lane, int gpu, absl::Span<const cudaEvent_t> waits,
    const StepEvents& events) {
  auto it = lane.streams.find(gpu);
  if (it == lane.streams.end()) {
    return absl::InternalError(
        absl::StrCat("lane ", lane.index, " has no stream on GPU ", gpu));
  }
  ScopedCudaDevice on(gpu);
  RETURN_IF_ERROR(on.status());
  for (cudaEvent_t event : waits) {
    RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(it->second, event, 0),
                               "waiting for a dependency"));
  }
  RETURN_IF_ERROR(CudaStatus(cudaEventRecord(events.start, it->second),
                             "recording the step start"));
  return StepStream(lane, gpu, it->second, events.done);
}

StepStream::StepStream(StepStream&& other) noexcept
    : lane_(other.lane_),
      gpu_(other.gpu_),
      stream_(other.stream_),
      done_(other.done_),
      allocations_(std::move(other.allocations_)) {
  other.allocations_.clear();
}

StepStream::~StepStream() { FreeAll().IgnoreError(); }

absl::StatusOr<uint8_t*> StepStream::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  RETURN_IF_ERROR(PrepareStagingPool(gpu_));
  ScopedCudaDevice on(gpu_);
  RETURN_IF_ERROR(on.status());
  void* memory = nullptr;
  RETURN_IF_ERROR(
      CudaStatus(cudaMallocAsync(&memory, bytes, stream_),
                 absl::StrCat("allocating ", bytes, " bytes of staging on GPU ",
                              gpu_)));
  allocations_.push_back(memory);
  return static_cast<uint8_t*>(memory);
}

absl::Status StepStream::FreeAll() {
  absl::Status status;
  if (allocations_.empty()) return status;
  ScopedCudaDevice on(gpu_);
  status.Update(on.status());
  for (void* memory : allocations_) {
    status.Update(
        CudaStatus(cudaFreeAsync(memory, stream_), "freeing step staging"));
  }
  allocations_.clear();
  return status;
}

absl::Status StepStream::End() {
  RETURN_IF_ERROR(FreeAll());
  ScopedCudaDevice on(gpu_);
  RETURN_IF_ERROR(on.status());
  return CudaStatus(cudaEventRecord(done_, stream_), "recording the step end");
}

absl::StatusOr<DeviceTile*> OperandTile(const OperandDesc& operand,
                                        const DeviceBufferSet& buffers,
                                        absl::string_view what) {
  if (!operand.local) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " (buffer ", operand.buffer, " on device ",
                     operand.device, ") is not on this worker"));
  }
  DeviceTile* tile = buffers.ById(operand.buffer);
  if (tile == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": buffer ", operand.buffer, " has no tile on this worker"));
  }
  if (!Contains(tile->box(), operand.box)) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": slice ", BoxToString(operand.box), " is not inside buffer ",
        operand.buffer, "'s box ", BoxToString(tile->box())));
  }
  return tile;
}

absl::StatusOr<uint8_t*> ContiguousRegion(const DeviceTile& tile,
                                          const Box& box) {
  if (IsEmpty(box)) return tile.data();
  ASSIGN_OR_RETURN(const RegionCopy copy,
                   MakeTileCopy(box, box, tile.box(), tile.element_size()));
  if (!IsSingleSegment(copy)) return nullptr;
  int64_t dst = 0, src = 0, length = 0;
  RowSegment(copy, FirstRow(copy), &dst, &src, &length);
  return tile.data() + src * tile.element_size();
}

absl::Status PackRegion(const DeviceTile& tile, const Box& box, void* dense,
                        int gpu, const StepStream& s) {
  if (IsEmpty(box)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const RegionCopy copy,
                   MakeTileCopy(box, box, tile.box(), tile.element_size()));
  return EnqueueRegionCopy({dense, gpu}, {tile.data(), tile.gpu()}, copy,
                           s.stream(), s.gpu());
}

absl::Status UnpackRegion(const void* dense, int gpu, const Box& box,
                          const DeviceTile& tile, const StepStream& s) {
  return CopyFromDense(dense, gpu, box, box, tile, s);
}

absl::Status CopyFromDense(const void* src, int src_gpu, const Box& src_box,
                           const Box& region, const DeviceTile& tile,
                           const StepStream& s) {
  if (IsEmpty(region)) return absl::OkStatus();
  ASSIGN_OR_RETURN(
      const RegionCopy copy,
      MakeTileCopy(region, tile.box(), src_box, tile.element_size()));
  return EnqueueRegionCopy({tile.data(), tile.gpu()}, {src, src_gpu}, copy,
                           s.stream(), s.gpu());
}

absl::Status CopyBytes(void* dst, int dst_gpu, const void* src, int src_gpu,
                       size_t bytes, const StepStream& s) {
  if (bytes == 0 || dst == src) return absl::OkStatus();
  ScopedCudaDevice on(s.gpu());
  RETURN_IF_ERROR(on.status());
  if (dst_gpu == src_gpu) {
    return CudaStatus(cudaMemcpyAsync(dst, src, bytes,
                                      cudaMemcpyDeviceToDevice, s.stream()),
                      "copying on the GPU");
  }
  return CudaStatus(
      cudaMemcpyPeerAsync(dst, dst_gpu, src, src_gpu, bytes, s.stream()),
      "copying between GPUs");
}

}  // namespace meshcast::worker::cuda
