// DeviceBufferSet: the tiles of one job on this worker's GPUs, the GPU
// counterpart of worker/buffer_set.h (same contract, docs/dataplane.md).
//
// Create() allocates each tile with cudaMalloc on the GPU behind its
// logical device, fills SOURCE tiles with the pattern kernel, poisons
// DESTINATION tiles (0xFF bytes, as on CPU), and pre-copies into each
// destination the part that the same device's source tile already holds.
// VerifyDestinations runs the verify kernel over each destination tile,
// which counts its mismatches and finds the first; for the first tile with
// mismatches it copies only that element to the host and describes it as
// the CPU verifier would (mismatch_report.h).
//
//   ASSIGN_OR_RETURN(DeviceBufferSet buffers,
//                    DeviceBufferSet::Create(program, device_gpu, cancel));
//   ASSIGN_OR_RETURN(const DeviceTile* from,
//                    buffers.SenderTile(device, tensor, slice));
//
// Thread safety: lookups are safe concurrently; Create and
// VerifyDestinations synchronize the GPUs they use.
#ifndef MESHCAST_WORKER_CUDA_DEVICE_BUFFER_SET_H_
#define MESHCAST_WORKER_CUDA_DEVICE_BUFFER_SET_H_

#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "planner/tensor.h"
#include "worker/buffer_set.h"
#include "worker/cancellation.h"
#include "worker/cuda/cuda_handles.h"
#include "worker/program.h"

namespace meshcast::worker::cuda {

// GPU memory holding one box of a tensor in row-major order.
class DeviceTile {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceTile>> Create(int gpu,
                                                            DType dtype,
                                                            Box box);

  int gpu() const { return memory_.gpu(); }
  DType dtype() const { return dtype_; }
  const Box& box() const { return box_; }
  int element_size() const { return DTypeSize(dtype_); }
  int64_t num_elements() const { return NumElements(box_); }
  int64_t size_bytes() const { return num_elements() * element_size(); }
  uint8_t* data() const { return memory_.bytes(); }

 private:
  DeviceTile(DType dtype, Box box, DeviceMemory memory)
      : dtype_(dtype), box_(std::move(box)), memory_(std::move(memory)) {}

  DType dtype_;
  Box box_;
  DeviceMemory memory_;
};

class DeviceBufferSet {
 public:
  // `device_gpu` maps every local device of `program` to its CUDA ordinal;
  // `program` must outlive the set.
  static absl::StatusOr<DeviceBufferSet> Create(
      const ParsedProgram& program,
      const absl::flat_hash_map<int, int>& device_gpu,
      const Cancellation& cancellation);

  DeviceBufferSet(DeviceBufferSet&&) = default;
  DeviceBufferSet& operator=(DeviceBufferSet&&) = default;

  // Null if the device has no tile of that tensor and role.
  DeviceTile* Find(int device, int tensor, BufferRole role) const;
  // As BufferSet: FailedPrecondition naming the device and slice.
  absl::StatusOr<const DeviceTile*> SenderTile(int device, int tensor,
                                               const Box& slice) const;
  absl::StatusOr<DeviceTile*> ReceiverTile(int device, int tensor,
                                           const Box& slice) const;
  // CUDA ordinal of a local device; -1 if not local.
  int GpuOf(int device) const;

  // Checks every destination element against the pattern, as
  // BufferSet::VerifyDestinations does and with the same first_mismatch
  // wording. Mismatches are a result; errors are CUDA failures.
  absl::StatusOr<VerificationSummary> VerifyDestinations() const;

  int64_t total_bytes() const;

 private:
  using Key = std::tuple<int, int, BufferRole>;  // device, tensor, role

  DeviceBufferSet() = default;

  const ParsedProgram* program_ = nullptr;
  absl::flat_hash_map<int, int> device_gpu_;
  absl::flat_hash_map<Key, std::unique_ptr<DeviceTile>> tiles_;
};

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_DEVICE_BUFFER_SET_H_
