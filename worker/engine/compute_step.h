// The CPU kernel of OP_COMPUTE: GEMM (BLIS), an elementwise op, a row
// gather, a row dot, an attention block or an attention finish over the
// step's operands, on the step's device (worker/kernels/compute.h,
// attention.h).
//
// Each operand is row-major over its own box (plan.proto). An operand whose
// elements are one contiguous run of its tile (the whole tile, a slab of
// whole rows: TileBuffer::ContiguousBytes) is used in place; any other
// slice is packed into a contiguous copy first (and an output slice
// unpacked afterwards), so the kernels always see dense operands. A GEMM's
// output that overlaps an input, or an elementwise op's output that
// overlaps an input other than exactly, is computed into a copy (the other
// kernels take overlaps themselves).
//
// Errors: FAILED_PRECONDITION naming the operand when its buffer has no
// tile here or the dtypes differ; the kernels' errors (sizes that do not
// match m, n, k, unsupported dtypes) as they return them.
// Thread safety: concurrent calls for different steps are safe.
#ifndef MESHCAST_WORKER_ENGINE_COMPUTE_STEP_H_
#define MESHCAST_WORKER_ENGINE_COMPUTE_STEP_H_

#include "absl/status/status.h"
#include "worker/engine/kernel_registry.h"

namespace meshcast::worker {

absl::Status RunCompute(const StepDesc& step, const StepEnvironment& env);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_ENGINE_COMPUTE_STEP_H_
