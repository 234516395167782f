// Initial values of tensors (Plan.tensor_inits): PATTERN, RANDOM, ZEROS.
//
// Every initialized element is a pure function of (initializer, tensor
// index, global row-major element index), so every worker fills its tiles
// independently and the reference (worker/kernels/reference.h) recomputes
// any element without reading a buffer:
//
//   RETURN_IF_ERROR(FillInitializer(tile, tile_box, spec, tensor, init));
//   double x = InitialValue(spec, tensor, init, global_index);
//
// Kinds (plan.proto, Initializer):
//  - KIND_PATTERN and KIND_UNSPECIFIED: exactly the bits of the resharding
//    pattern (worker/pattern_core.h PatternBits), so a plan with no
//    tensor_inits fills what FillBox (worker/pattern.h) fills;
//  - KIND_RANDOM: RandomBits (initializer_core.h): floats uniform in [-1, 1)
//    on the dtype's grid (exact in the dtype), integers uniform in [-8, 8);
//  - KIND_ZEROS: all bits zero.
// Unknown kinds (a newer controller) are INVALID_ARGUMENT in
// FillInitializer and CheckInitializer.
//
// Thread safety: pure functions; concurrent calls on disjoint buffers are
// fine.
#ifndef MESHCAST_WORKER_KERNELS_INITIALIZER_H_
#define MESHCAST_WORKER_KERNELS_INITIALIZER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"
#include "worker/pattern_core.h"

namespace meshcast::worker {

// DType -> the device-code mirror of it (same as pattern.h's ToPatternType;
// this library does not link meshcast_worker).
PatternType KernelPatternType(DType dtype);

// OK for PATTERN, RANDOM, ZEROS and UNSPECIFIED; INVALID_ARGUMENT naming the
// tensor and the allowed kinds otherwise.
absl::Status CheckInitializer(const v1::Initializer& init, int tensor);

// The element's bits in the low DTypeSize(dtype) bytes (an unknown kind
// reads as zeros; CheckInitializer first).
uint64_t InitialBits(DType dtype, int tensor, const v1::Initializer& init,
                     int64_t global_index);

// The element's value (LoadElement of InitialBits). int64 values beyond
// 2^53 are rounded; InitialInteger is exact.
double InitialValue(const TensorSpec& spec, int tensor,
                    const v1::Initializer& init, int64_t global_index);
int64_t InitialInteger(const TensorSpec& spec, int tensor,
                       const v1::Initializer& init, int64_t global_index);

// Writes every element of `box` (row-major, DTypeSize(spec.dtype) bytes
// each) of tensor `tensor` into `buffer`. INVALID_ARGUMENT if the box is not
// inside the tensor, the buffer size is not NumElements(box) *
// DTypeSize(spec.dtype), or the kind is unknown.
absl::Status FillInitializer(absl::Span<uint8_t> buffer, const Box& box,
                             const TensorSpec& spec, int tensor,
                             const v1::Initializer& init);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_KERNELS_INITIALIZER_H_
