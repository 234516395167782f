// What every GPU step kernel shares: the kernel signature, the step's
// stream with its dependency waits, start/done events and stream-ordered
// staging memory (StepStream), operand lookups and dense copies of
// operands, and one cuBLAS handle per lane and GPU.
//
// A GPU kernel enqueues this worker's part of one step on the lane's
// streams and returns; the data moves later. Every non-relay kernel runs on
// one stream, the lane's stream of the step's primary GPU
// (StepPrimaryGpu): copies to and from the worker's other GPUs are peer
// copies issued there, and NCCL is driven through that GPU's rank, so one
// stream orders all of a step's work and its staging memory.
//
//   ASSIGN_OR_RETURN(StepStream s, StepStream::Begin(lane, gpu, waits, events));
//   ASSIGN_OR_RETURN(uint8_t* acc, s.Allocate(bytes));
//   RETURN_IF_ERROR(PackOperand(*tile, box, acc, s));
//   ...
//   return s.End();
//
// Errors: FAILED_PRECONDITION naming the operand for a missing tile;
// CUDA errors as CudaStatus words them.
// Thread safety: a StepStream belongs to the lane thread that began it.
#ifndef MESHCAST_WORKER_CUDA_DEVICE_STEP_H_
#define MESHCAST_WORKER_CUDA_DEVICE_STEP_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/cuda/device_buffer_set.h"
#include "worker/cuda/device_relay.h"
#include "worker/program.h"

namespace meshcast::worker::cuda {

// The name of the GPU backend in kernel tables and messages.
inline constexpr absl::string_view kCudaBackend = "cuda";

// Enqueues this worker's part of `step` after `waits`, recording
// events.start before and events.done after it on the step's primary
// stream. Errors need not name the step: the table's wrapper does.
using DeviceStepKernel = std::function<absl::Status(
    const StepDesc& step, const DeviceRelayEnvironment& env,
    const DeviceLane& lane, absl::Span<const cudaEvent_t> waits,
    const StepEvents& events)>;

// CUDA ordinal of the step's primary stream: the GPU of its first local
// group rank, or of `device` for ops without a group (local copy,
// compute).
absl::StatusOr<int> StepPrimaryGpu(const StepDesc& step,
                                   const DeviceRelayEnvironment& env);

// One cuBLAS handle per GPU for one lane, created on first use on the lane's
// thread and bound to the lane's stream of that GPU.
class BlasHandles {
 public:
  BlasHandles() = default;
  ~BlasHandles();
  BlasHandles(const BlasHandles&) = delete;
  BlasHandles& operator=(const BlasHandles&) = delete;

  absl::StatusOr<cublasHandle_t> Get(int gpu, cudaStream_t stream);

 private:
  absl::flat_hash_map<int, cublasHandle_t> handles_;
};

// A cuBLAS status as absl::Status naming `what`.
absl::Status CublasStatus(cublasStatus_t status, absl::string_view what);

class StepStream {
 public:
  // Waits for `waits` on the lane's stream of `gpu` and records
  // events.start there.
  static absl::StatusOr<StepStream> Begin(const DeviceLane& lane, int gpu,
                                          absl::Span<const cudaEvent_t> waits,
                                          const StepEvents& events);
  StepStream(StepStream&& other) noexcept;
  StepStream& operator=(StepStream&&) = delete;
  StepStream(const StepStream&) = delete;
  // Frees what is still allocated (after an error).
  ~StepStream();

  cudaStream_t stream() const { return stream_; }
  int gpu() const { return gpu_; }
  const DeviceLane& lane() const { return *lane_; }

  // Stream-ordered staging memory on gpu(), freed by End (null for 0
  // bytes).
  absl::StatusOr<uint8_t*> Allocate(size_t bytes);

  // Frees the staging memory (stream-ordered) and records events.done.
  absl::Status End();

 private:
  StepStream(const DeviceLane& lane, int gpu, cudaStream_t stream,
             cudaEvent_t done)
      : lane_(&lane), gpu_(gpu), stream_(stream), done_(done) {}
  absl::Status FreeAll();

  const DeviceLane* lane_;
  int gpu_;
  cudaStream_t stream_;
  cudaEvent_t done_;
  std::vector<void*> allocations_;
};

// The tile of a local operand; FAILED_PRECONDITION naming `what` (e.g.
// "inputs[2]") when the operand is on another worker or has no tile.
absl::StatusOr<DeviceTile*> OperandTile(const OperandDesc& operand,
                                        const DeviceBufferSet& buffers,
                                        absl::string_view what);

// Where `box` lies in `tile` when it is one contiguous segment of it, else
// null.
absl::StatusOr<uint8_t*> ContiguousRegion(const DeviceTile& tile,
                                          const Box& box);

// Copies `box` of the tile into `dense` (row-major over the box) on `gpu`,
// or back, on the step's stream.
absl::Status PackRegion(const DeviceTile& tile, const Box& box, void* dense,
                        int gpu, const StepStream& s);
absl::Status UnpackRegion(const void* dense, int gpu, const Box& box,
                          const DeviceTile& tile, const StepStream& s);

// Copies `region` from a dense buffer holding `src_box` (row-major) on
// `src_gpu` into `tile`, on the step's stream.
absl::Status CopyFromDense(const void* src, int src_gpu, const Box& src_box,
                           const Box& region, const DeviceTile& tile,
                           const StepStream& s);

// `bytes` contiguous bytes from one GPU buffer to another on the step's
// stream (cudaMemcpyPeerAsync between GPUs).
absl::Status CopyBytes(void* dst, int dst_gpu, const void* src, int src_gpu,
                       size_t bytes, const StepStream& s);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_DEVICE_STEP_H_
