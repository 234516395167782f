// DeviceBufferSet: the tiles of one job on this worker's GPUs, the GPU
// counterpart of worker/buffer_set.h (same contract, docs/dataplane.md).
//
// Create() allocates each tile with cudaMalloc on the GPU behind its
// logical device and fills it as BufferSet does: SOURCE tiles with their
// tensor's initializer (the pattern kernel, the RANDOM kernel built on
// worker/kernels/initializer_core.h, or zeros: the host's bits), the
// DESTINATION tiles of moved tensors with poison (0xFF bytes), those of
// computed tensors and every SCRATCH tile with zeros; then it pre-copies
// into each destination the part that the same device's source tile
// already holds. Relays look tiles up by (device, tensor, role); the other
// ops name their operands' buffers by id (ById).
//
// VerifyDestinations checks the destinations as the program's verify mode
// says: tiles of moved PATTERN tensors on the GPU (the verify kernel counts
// mismatches and finds the first; only that element is copied to the host
// and described as the CPU verifier would, mismatch_report.h); computed
// tensors on the host, after copying the tile back, with the CPU path's
// reference and tolerance (worker/kernels/reference.h VerifyComputed: the
// logic is written once); moved tensors of other initializers on the host
// against InitialBits.
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

  // Null if the device has no tile of that tensor and role (scratch tiles
  // are found by id only).
  DeviceTile* Find(int device, int tensor, BufferRole role) const;
  // The tile of local buffer `id`; null if there is none.
  DeviceTile* ById(int id) const;
  // As BufferSet: FailedPrecondition naming the device and slice.
  absl::StatusOr<const DeviceTile*> SenderTile(int device, int tensor,
                                               const Box& slice) const;
  absl::StatusOr<DeviceTile*> ReceiverTile(int device, int tensor,
                                           const Box& slice) const;
  // CUDA ordinal of a local device; -1 if not local.
  int GpuOf(int device) const;

  // Checks the destinations as BufferSet::VerifyDestinations does (verify
  // mode, reference, tolerance, first_mismatch wording). Mismatches are a
  // result; errors are CUDA failures, a reference that cannot be built, or
  // CANCELLED.
  absl::StatusOr<VerificationSummary> VerifyDestinations(
      const Cancellation& cancellation) const;
  absl::StatusOr<VerificationSummary> VerifyDestinations() const;

  int64_t total_bytes() const;

 private:
  using Key = std::tuple<int, int, BufferRole>;  // device, tensor, role

  DeviceBufferSet() = default;

  const ParsedProgram* program_ = nullptr;
  absl::flat_hash_map<int, int> device_gpu_;
  // Every tile by buffer id; relays' lookups by (device, tensor, role).
  absl::flat_hash_map<int, std::unique_ptr<DeviceTile>> by_id_;
  absl::flat_hash_map<Key, DeviceTile*> tiles_;
};

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_DEVICE_BUFFER_SET_H_
