// Fill and verify the deterministic pattern in GPU memory, with
// absl::Status errors: the host-side wrappers of pattern_kernels.h.
//
//   ASSIGN_OR_RETURN(PatternTile tile, MakePatternTile(box, spec));
//   RETURN_IF_ERROR(FillBoxOnDevice(device_ptr, box, spec, t, stream));
//   ASSIGN_OR_RETURN(DeviceVerifyResult r,
//                    VerifyBoxOnDevice(device_ptr, box, spec, t, stream));
//
// VerifyBoxOnDevice synchronizes `stream`; FillBoxOnDevice does not.
// GpuCount() is 0 (never an error) where there is no usable GPU.
// Thread safety: as the CUDA runtime.
#ifndef MESHCAST_WORKER_CUDA_DEVICE_PATTERN_H_
#define MESHCAST_WORKER_CUDA_DEVICE_PATTERN_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"
#include "worker/cuda/pattern_kernels.h"

namespace meshcast::worker::cuda {

// Number of visible CUDA devices; 0 if the runtime reports none or fails.
int GpuCount();

// A CUDA error as a Status naming `what`.
absl::Status CudaStatus(cudaError_t error, absl::string_view what);

// The kernels' view of `box` in a tensor of `spec`. InvalidArgument for a
// box outside the tensor or a rank above kMaxPatternRank.
absl::StatusOr<PatternTile> MakePatternTile(const Box& box,
                                            const TensorSpec& spec);

// True for KIND_PATTERN and KIND_UNSPECIFIED (the resharding pattern).
bool IsPatternInitializer(const v1::Initializer& init);

// Fills `box` of tensor `tensor_index` with its initializer (plan.proto
// Initializer): the pattern kernel, the RANDOM kernel (the bits of
// worker/kernels/initializer_core.h, as the host's FillInitializer), or
// zeros. INVALID_ARGUMENT for an unknown kind.
absl::Status FillInitializerOnDevice(void* data, const Box& box,
                                     const TensorSpec& spec, int tensor_index,
                                     const v1::Initializer& init,
                                     cudaStream_t stream);

absl::Status FillBoxOnDevice(void* data, const Box& box, const TensorSpec& spec,
                             int tensor_index, cudaStream_t stream);

struct DeviceVerifyResult {
  int64_t mismatches = 0;  // elements whose bits differ from the pattern
  // Row-major index within the tile of the first of them, -1 if none
  // (mismatch_report.h turns it into a description).
  int64_t first_mismatch_element = -1;
};

// Runs the verify kernel over the tile at `data` (device memory holding
// `box` of tensor `tensor_index`) and waits for it. Errors: InvalidArgument
// as for MakePatternTile, Internal for a CUDA failure.
absl::StatusOr<DeviceVerifyResult> VerifyBoxOnDevice(const void* data,
                                                     const Box& box,
                                                     const TensorSpec& spec,
                                                     int tensor_index,
                                                     cudaStream_t stream);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_DEVICE_PATTERN_H_
