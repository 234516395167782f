// How the GPU verifier describes the first mismatching element of a
// destination tile, in the words of the CPU verifier (worker/buffer_set.h).
//
// The verify kernel (pattern_kernels.h) reports a tile's mismatch count and
// the row-major index within the tile of its first mismatching element;
// DeviceBufferSet copies just that element's bytes to the host. This file
// is the pure host-side rest: it places the element in its tensor,
// recomputes the pattern value it should hold (worker/pattern.h, the same
// bits as the kernels) and words VerificationSummary::first_mismatch
// exactly as BufferSet::VerifyDestinations does, so that a job reports a
// mismatch the same way on CPU and GPU devices. It needs no GPU, and is
// tested without one.
//
//   ASSIGN_OR_RETURN(TileMismatch m,
//                    LocateTileElement(buffer.box, spec, buffer.tensor,
//                                      element, element_bytes));
//   summary.first_mismatch = FirstMismatchMessage(buffer, m, mismatches);
//
// Thread safety: pure functions.
#ifndef MESHCAST_WORKER_CUDA_MISMATCH_REPORT_H_
#define MESHCAST_WORKER_CUDA_MISMATCH_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "planner/tensor.h"
#include "worker/program.h"

namespace meshcast::worker::cuda {

// One element of a tile, placed in its tensor and compared with the
// pattern.
struct TileMismatch {
  std::vector<int64_t> coordinates;  // in the tensor, one per dimension
  int64_t global_index = 0;          // row-major in the tensor
  uint64_t expected_bits = 0;        // the pattern, low DTypeSize bytes
  uint64_t found_bits = 0;           // what the tile holds, likewise
};

// Element `element` (row-major index within `box`) of a tile holding `box`
// of tensor `tensor_index`, whose DTypeSize(spec.dtype) bytes as stored
// (little endian, as on the device) are `element_bytes`. InvalidArgument if
// the box is not inside the tensor, `element` is not in [0,
// NumElements(box)) or `element_bytes` has the wrong size. Equal bits are a
// result too (found_bits == expected_bits), not an error.
absl::StatusOr<TileMismatch> LocateTileElement(
    const Box& box, const TensorSpec& spec, int tensor_index, int64_t element,
    absl::Span<const uint8_t> element_bytes);

// VerificationSummary::first_mismatch for `buffer`, whose first
// mismatching element is `first` and which has `mismatches` in all:
// "device D tensor T global index G: expected bits 0x.., found 0x.. (N
// mismatches in tile [..])", as the CPU verifier words it.
std::string FirstMismatchMessage(const BufferDesc& buffer,
                                 const TileMismatch& first, int64_t mismatches);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_MISMATCH_REPORT_H_
