// Compute kernels on host memory: GEMM (OpenBLAS for float32/float64) and
// elementwise ops, as the CPU backend runs OP_COMPUTE steps.
//
//   v1::GemmAttrs g;  g.set_m(64); g.set_n(32); g.set_k(256);
//   RETURN_IF_ERROR(RunGemm(g, DType::kFloat32, a_bytes, b_bytes, c_bytes));
//
// GEMM (plan.proto GemmAttrs): C = alpha * op(A) * op(B) (+ C when
// accumulate), alpha 0 read as 1. Every operand is row-major: A is m x k (k x
// m when trans_a), B is k x n (n x k when trans_b), C is m x n.
//  - float32 / float64: cblas_sgemm / cblas_dgemm (row-major), beta =
//    accumulate ? 1 : 0 (beta 0: C's old contents, NaN included, are not
//    read);
//  - float16 / bfloat16: a loop that accumulates each row of C in float and
//    rounds once to the dtype (as cuBLAS does with float compute);
//  - integer dtypes: UNIMPLEMENTED (no plan emits them yet).
// Errors: INVALID_ARGUMENT when m, n or k is negative or above 2^31 - 1, or
// an operand's size is not its element count times the element size (the
// message names m, n, k and the operand).
//
// Elementwise (plan.proto ElementwiseAttrs), over equally sized operands:
//  - KIND_ADD: out = in0 + in1 (two inputs), in the dtype's arithmetic
//    (fp16/bf16 through float, integers wrapping);
//  - KIND_SCALE: out = alpha * in0 (one input; alpha is taken as given, 0
//    included). Floats: computed in double and rounded once to the dtype;
//    integers: an integral alpha multiplies with wrap-around, any other alpha
//    multiplies in double and truncates toward zero (ScaleInteger).
// `out` may alias an input exactly (in place), not partly.
// Errors: INVALID_ARGUMENT for an unknown kind, the wrong number of inputs,
// or sizes that differ or are not a multiple of the element size.
//
// Thread safety: pure functions. OpenBLAS runs its own threads inside
// RunGemm for large float32/float64 problems.
#ifndef MESHCAST_WORKER_KERNELS_COMPUTE_H_
#define MESHCAST_WORKER_KERNELS_COMPUTE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"

namespace meshcast::worker {

absl::Status RunGemm(const v1::GemmAttrs& attrs, DType dtype,
                     absl::Span<const uint8_t> a, absl::Span<const uint8_t> b,
                     absl::Span<uint8_t> c);

absl::Status RunElementwise(const v1::ElementwiseAttrs& attrs, DType dtype,
                            const std::vector<absl::Span<const uint8_t>>& inputs,
                            absl::Span<uint8_t> out);

// GemmAttrs.alpha as used: 0 (unset) reads as 1.
inline double GemmAlpha(const v1::GemmAttrs& attrs) {
  return attrs.alpha() == 0 ? 1.0 : attrs.alpha();
}

// alpha * value for integer elements: exact wrapping multiplication when
// alpha is integral (and within int64), else the double product truncated
// toward zero and wrapped (element.h). Shared by the kernel and the
// reference so that both define integer SCALE the same way.
int64_t ScaleInteger(int64_t value, double alpha);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_KERNELS_COMPUTE_H_
