// RAII handles for the CUDA runtime objects the GPU data plane owns: device
// memory, pinned host memory, streams and events, each bound to the GPU it
// was created on, plus a guard that switches the calling thread's current
// device and restores it.
//
//   ASSIGN_OR_RETURN(DeviceMemory tile, DeviceMemory::Allocate(gpu, bytes));
//   ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(gpu));
//   ScopedCudaDevice on(gpu);  // kernels launched here run on `gpu`
//
// Every fallible call returns absl::Status (CudaStatus in device_pattern.h).
// Destructors release quietly; they never throw and never fail loudly,
// since they run on error paths too.
// Thread safety: handles are movable values used by one thread at a time;
// the CUDA runtime calls themselves are thread-safe.
#ifndef MESHCAST_WORKER_CUDA_CUDA_HANDLES_H_
#define MESHCAST_WORKER_CUDA_CUDA_HANDLES_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace meshcast::worker::cuda {

// Sets the current device for the scope; restores the previous one if the
// thread had one (a thread with no CUDA context yet is left on `gpu`, so
// that no context is created on a GPU the process does not use).
class ScopedCudaDevice {
 public:
  explicit ScopedCudaDevice(int gpu);
  ~ScopedCudaDevice();
  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;

  // The result of switching (an invalid ordinal fails here).
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

// cudaMalloc'd memory on one GPU. Zero bytes is a valid, null allocation.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  static absl::StatusOr<DeviceMemory> Allocate(int gpu, size_t bytes);
  ~DeviceMemory() { Reset(); }
  DeviceMemory(DeviceMemory&& other) noexcept { *this = std::move(other); }
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* data() const { return data_; }
  uint8_t* bytes() const { return static_cast<uint8_t*>(data_); }
  size_t size() const { return size_; }
  int gpu() const { return gpu_; }
  void Reset();

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  int gpu_ = -1;
};

// Page-locked host memory (cudaMallocHost): the host end of device copies
// that must run at full PCIe speed and asynchronously.
class PinnedHostMemory {
 public:
  PinnedHostMemory() = default;
  static absl::StatusOr<PinnedHostMemory> Allocate(size_t bytes);
  ~PinnedHostMemory() { Reset(); }
  PinnedHostMemory(PinnedHostMemory&& other) noexcept {
    *this = std::move(other);
  }
  PinnedHostMemory& operator=(PinnedHostMemory&& other) noexcept;
  PinnedHostMemory(const PinnedHostMemory&) = delete;
  PinnedHostMemory& operator=(const PinnedHostMemory&) = delete;

  uint8_t* data() const { return static_cast<uint8_t*>(data_); }
  size_t size() const { return size_; }
  void Reset();

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// A non-blocking stream (no implicit sync with the legacy default stream).
class CudaStream {
 public:
  CudaStream() = default;
  static absl::StatusOr<CudaStream> Create(int gpu);
  ~CudaStream() { Reset(); }
  CudaStream(CudaStream&& other) noexcept { *this = std::move(other); }
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return stream_; }
  int gpu() const { return gpu_; }
  void Reset();

 private:
  cudaStream_t stream_ = nullptr;
  int gpu_ = -1;
};

// An event that records timing (for per-step elapsed times).
class CudaEvent {
 public:
  CudaEvent() = default;
  static absl::StatusOr<CudaEvent> Create(int gpu);
  ~CudaEvent() { Reset(); }
  CudaEvent(CudaEvent&& other) noexcept { *this = std::move(other); }
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }
  int gpu() const { return gpu_; }
  void Reset();

 private:
  cudaEvent_t event_ = nullptr;
  int gpu_ = -1;
};

// Seconds between two completed events recorded on the same GPU.
absl::StatusOr<double> ElapsedSeconds(const CudaEvent& start,
                                      const CudaEvent& end);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_CUDA_HANDLES_H_
