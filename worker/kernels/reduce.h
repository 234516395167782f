// Elementwise reduction of one buffer into another: the combine step of
// every reducing collective on the CPU (all-reduce, reduce-scatter), and of
// the reference's tests.
//
//   RETURN_IF_ERROR(ReduceInto(v1::REDUCTION_SUM, DType::kFloat32,
//                              received, accumulator));
//
// Contract: inout[i] = inout[i] (+ | max) in[i] for every element, in the
// dtype's own arithmetic: float32/float64 natively (float32 is a plain loop
// the compiler vectorizes), fp16/bf16 through float and rounded back to
// nearest even (exactly the correctly rounded fp16/bf16 result: float's 24
// bits are more than twice their precision plus 2), integers wrap to their
// width (two's complement; max compares signed, uint8 unsigned). MAX on
// floats is `in > inout ? in : inout`: a NaN in `in` is ignored, a NaN
// already in inout stays.
// Errors: INVALID_ARGUMENT if the sizes differ or are not a multiple of the
// element size, or the reduction is unknown.
// Thread safety: pure function; `in` and `inout` must not overlap.
#ifndef MESHCAST_WORKER_KERNELS_REDUCE_H_
#define MESHCAST_WORKER_KERNELS_REDUCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"

namespace meshcast::worker {

absl::Status ReduceInto(v1::Reduction reduction, DType dtype,
                        absl::Span<const uint8_t> in,
                        absl::Span<uint8_t> inout);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_KERNELS_REDUCE_H_
