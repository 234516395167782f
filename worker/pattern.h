// Host-side fill and verification of the deterministic data pattern.
//
// A reshard job fills every source tile with PatternValue(dtype, i, t) for
// the element with global row-major index i of tensor t, and after the
// transfer checks every destination element against it (docs/dataplane.md).
// The value function itself lives in pattern_core.h so the CUDA kernels
// (worker/cuda/pattern_kernels.h) compute exactly the same bits.
//
//   RETURN_IF_ERROR(FillBox(tile_bytes, tile_box, spec, tensor_index));
//   ASSIGN_OR_RETURN(VerifyResult r, VerifyBox(tile_bytes, tile_box, spec, t));
//
// Buffers hold one box of the tensor in row-major order (last dimension
// fastest), DTypeSize(spec.dtype) bytes per element, host byte order (little
// endian). Thread safety: pure functions; concurrent calls on disjoint
// buffers are fine.
#ifndef MESHCAST_WORKER_PATTERN_H_
#define MESHCAST_WORKER_PATTERN_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "planner/tensor.h"
#include "worker/pattern_core.h"

namespace meshcast::worker {

PatternType ToPatternType(DType dtype);

// The element's bit pattern in the low DTypeSize(dtype) bytes.
inline uint64_t PatternBits(DType dtype, int64_t global_index, int tensor) {
  return PatternBits(ToPatternType(dtype), static_cast<uint64_t>(global_index),
                     static_cast<uint32_t>(tensor));
}

// The element's bytes as stored in memory: DTypeSize(dtype) bytes.
std::string PatternValue(DType dtype, int64_t global_index, int tensor);

// The element as a number (integers as their signed/unsigned value, floats
// decoded), for human-readable mismatch reports.
double PatternNumber(DType dtype, int64_t global_index, int tensor);

// Writes the pattern of every element of `box` into `buffer`, which holds
// `box` of tensor `tensor_index` (shape/dtype from `spec`). InvalidArgument if
// the box is not inside the tensor or the buffer size is not
// NumElements(box) * DTypeSize(spec.dtype).
absl::Status FillBox(absl::Span<uint8_t> buffer, const Box& box,
                     const TensorSpec& spec, int tensor_index);

struct VerifyResult {
  int64_t elements = 0;    // elements checked
  int64_t mismatches = 0;  // elements whose bits differ from the pattern
  // Global index of the first mismatching element, or -1.
  int64_t first_mismatch_index = -1;
  // MismatchBitsText of the first one, empty if none.
  std::string first_mismatch;
};

// "expected bits 0x<expected>, found 0x<found>" (hex, no leading zeros):
// how a mismatching element is described, by VerifyBox and by the GPU
// verifier (worker/cuda/mismatch_report.h) alike.
std::string MismatchBitsText(uint64_t expected_bits, uint64_t found_bits);

// Compares every element of `box` in `buffer` with the pattern. Errors as for
// FillBox; a mismatch is a result, not an error.
absl::StatusOr<VerifyResult> VerifyBox(absl::Span<const uint8_t> buffer,
                                       const Box& box, const TensorSpec& spec,
                                       int tensor_index);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_PATTERN_H_
