#include "worker/cuda/cuda_handles.h"

#include <cuda.h>  // CUresult and CUcontext only: libcuda is not linked

#include <utility>

#include "absl/strings/str_cat.h"
#include "util/bytes_text.h"
#include "util/status_macros.h"
#include "worker/cuda/device_pattern.h"

namespace meshcast::worker::cuda {
namespace {

// cuCtxGetCurrent, looked up through the runtime so that nothing here links
// the driver library (binaries built with CUDA must still start, and skip
// their GPU tests, on machines without a driver). Null if unavailable.
using CtxGetCurrentFn = CUresult (*)(CUcontext*);
CtxGetCurrentFn CtxGetCurrent() {
  static const CtxGetCurrentFn function = []() -> CtxGetCurrentFn {
    void* pointer = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &pointer, 12000,
                                         cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<CtxGetCurrentFn>(pointer);
  }();
  return function;
}

// Whether the calling thread has a CUDA context bound; true when unknown.
bool ThreadHasContext() {
  const CtxGetCurrentFn get = CtxGetCurrent();
  if (get == nullptr) return true;
  CUcontext context = nullptr;
  return get(&context) == CUDA_SUCCESS && context != nullptr;
}

}  // namespace

ScopedCudaDevice::ScopedCudaDevice(int gpu) {
  // A thread that never chose a device reports device 0 without having a
  // context on it. Restoring "0" there would call cudaSetDevice(0), which
  // since CUDA 12 creates GPU 0's primary context (hundreds of MiB of GPU 0
  // memory in every worker process, even one that only drives GPU 3). Only
  // restore a device the thread was actually using.
  const bool had_context = ThreadHasContext();
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    current = -1;
  }
  if (had_context && current == gpu) return;  // already there
  status_ =
      CudaStatus(cudaSetDevice(gpu), absl::StrCat("cudaSetDevice(", gpu, ")"));
  if (status_.ok() && had_context) previous_ = current;
}

ScopedCudaDevice::~ScopedCudaDevice() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

absl::StatusOr<DeviceMemory> DeviceMemory::Allocate(int gpu, size_t bytes) {
  DeviceMemory memory;
  memory.gpu_ = gpu;
  if (bytes == 0) return memory;
  ScopedCudaDevice on(gpu);
  RETURN_IF_ERROR(on.status());
  const cudaError_t error = cudaMalloc(&memory.data_, bytes);
  if (error == cudaErrorMemoryAllocation) {
    // Say how far off it is: the tile's size against what the GPU has left.
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    memory.data_ = nullptr;
    return absl::ResourceExhaustedError(
        absl::StrCat("GPU ", gpu, ": cannot allocate ",
                     FormatBytes(static_cast<int64_t>(bytes)), " (",
                     FormatBytes(static_cast<int64_t>(free_bytes)), " free of ",
                     FormatBytes(static_cast<int64_t>(total_bytes)), ")"));
  }
  RETURN_IF_ERROR(CudaStatus(
      error, absl::StrCat("cudaMalloc of ", bytes, " bytes on GPU ", gpu)));
  memory.size_ = bytes;
  return memory;
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    gpu_ = std::exchange(other.gpu_, -1);
  }
  return *this;
}

void DeviceMemory::Reset() {
  if (data_ != nullptr) {
    ScopedCudaDevice on(gpu_);
    cudaFree(data_);
  }
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<PinnedHostMemory> PinnedHostMemory::Allocate(size_t bytes) {
  PinnedHostMemory memory;
  if (bytes == 0) return memory;
  RETURN_IF_ERROR(
      CudaStatus(cudaMallocHost(&memory.data_, bytes),
                 absl::StrCat("cudaMallocHost of ", bytes, " bytes")));
  memory.size_ = bytes;
  return memory;
}

PinnedHostMemory& PinnedHostMemory::operator=(
    PinnedHostMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void PinnedHostMemory::Reset() {
  if (data_ != nullptr) cudaFreeHost(data_);
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<CudaStream> CudaStream::Create(int gpu) {
  CudaStream stream;
  ScopedCudaDevice on(gpu);
  RETURN_IF_ERROR(on.status());
  RETURN_IF_ERROR(CudaStatus(
      cudaStreamCreateWithFlags(&stream.stream_, cudaStreamNonBlocking),
      absl::StrCat("cudaStreamCreate on GPU ", gpu)));
  stream.gpu_ = gpu;
  return stream;
}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    Reset();
    stream_ = std::exchange(other.stream_, nullptr);
    gpu_ = std::exchange(other.gpu_, -1);
  }
  return *this;
}

void CudaStream::Reset() {
  if (stream_ != nullptr) {
    ScopedCudaDevice on(gpu_);
    cudaStreamDestroy(stream_);
  }
  stream_ = nullptr;
}

absl::StatusOr<CudaEvent> CudaEvent::Create(int gpu) {
  CudaEvent event;
  ScopedCudaDevice on(gpu);
  RETURN_IF_ERROR(on.status());
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&event.event_),
                             absl::StrCat("cudaEventCreate on GPU ", gpu)));
  event.gpu_ = gpu;
  return event;
}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    Reset();
    event_ = std::exchange(other.event_, nullptr);
    gpu_ = std::exchange(other.gpu_, -1);
  }
  return *this;
}

void CudaEvent::Reset() {
  if (event_ != nullptr) {
    ScopedCudaDevice on(gpu_);
    cudaEventDestroy(event_);
  }
  event_ = nullptr;
}

absl::StatusOr<double> ElapsedSeconds(const CudaEvent& start,
                                      const CudaEvent& end) {
  float milliseconds = 0;
  RETURN_IF_ERROR(
      CudaStatus(cudaEventElapsedTime(&milliseconds, start.get(), end.get()),
                 "cudaEventElapsedTime"));
  return milliseconds / 1000.0;
}

}  // namespace meshcast::worker::cuda
