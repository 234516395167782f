// Compute kernels on host memory: GEMM (BLIS for float32/float64),
// elementwise ops, row gathers and row dots, as the CPU backend runs
// OP_COMPUTE steps.
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
//    multiplies in double and truncates toward zero (ScaleInteger);
//  - KIND_RELU: out = max(in0, 0) (one input; exact: negative values become
//    +0, NaN stays NaN);
//  - KIND_SIGMOID: out = 1 / (1 + exp(-in0)) (one input), in double and
//    rounded once to the dtype;
//  - KIND_RELU_GRAD: out = in1 > 0 ? in0 : +0 (two inputs: in0 the
//    gradient, in1 RELU's output or input; exact: in0's bits or +0, a NaN
//    in1 masking);
//  - KIND_SIGMOID_GRAD: out = in0 * in1 * (1 - in1) (two inputs: in0 the
//    gradient, in1 SIGMOID's output), as (in0 * in1) * (1 - in1) in float
//    for fp16/bf16 and in double for float32/float64, rounded once to the
//    dtype;
//  RELU, SIGMOID and their gradients take floating-point dtypes only
//  (INVALID_ARGUMENT for integers, as plan.proto defines them); their bits
//  are element_core.h's ReluBits / SigmoidBits / ReluGradBits /
//  SigmoidGradBits, shared with the GPU.
// `out` may alias an input exactly (in place), not partly.
// Errors: INVALID_ARGUMENT for an unknown kind, the wrong number of inputs,
// or sizes that differ or are not a multiple of the element size.
//
// Gather (plan.proto GatherAttrs), `x` rows(X) rows and `y` rows(Y) rows of
// `row` elements, `w` empty (no W) or rows(Y) * k elements, k 0 read as 1:
// Y row i = sum over j < k of w(i, j) * X row index[i * k + j] (w = 1
// without W); an index of -1 adds nothing (a row of -1s is zeros).
//  - k = 1 without W: row copies (memcpy) and zero rows, exact in every
//    dtype;
//  - floats otherwise: each output element is summed over j in order in
//    float (fp16/bf16) or double (float32/float64) and rounded once to the
//    dtype (element_core.h GatherMulAdd, the GPU's arithmetic too);
//  - integers without W: the sum wraps to the width, as elementwise ADD;
//    with W: UNIMPLEMENTED (no job weights integer rows).
// `y` may overlap `x` or `w` (the rows are gathered into a copy first), so
// an in-place permutation reads X as it was before the step.
// Errors: CheckGather's, with the sizes of the spans.
//
// Row dot (plan.proto RowDotAttrs), `a` rows(A) and `b` rows(B) rows of
// `row` elements, `d` elements(D) elements: D element i = sum over c < row
// of A row index[2 i] column c times B row index[2 i + 1] column c, 0 (+0)
// when either index is -1. Floats only: each element is summed over c in
// order in float (fp16/bf16) or double (float32/float64), from 0, and
// rounded once to the dtype (element_core.h GatherMulAdd and
// CoreFloatStoreBits, the GPU's arithmetic too). `d` may overlap `a` or `b`
// (the products are computed into a copy first).
// Errors: INVALID_ARGUMENT for an integer dtype, spans that are not a
// multiple of the element size, and CheckRowDot's.
//
// Thread safety: pure functions; any number may run at once (the CPU
// engine runs one GEMM per device concurrently). The BLAS behind RunGemm
// (BLIS, single-threaded) is reentrant and starts no threads.
#ifndef MESHCAST_WORKER_KERNELS_COMPUTE_H_
#define MESHCAST_WORKER_KERNELS_COMPUTE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"

namespace meshcast::worker {

// Whether two byte ranges share a byte (empty ranges share none): the
// kernels' test for operands that overlap, and the compute step's.
bool Overlaps(absl::Span<const uint8_t> a, absl::Span<const uint8_t> b);

absl::Status RunGemm(const v1::GemmAttrs& attrs, DType dtype,
                     absl::Span<const uint8_t> a, absl::Span<const uint8_t> b,
                     absl::Span<uint8_t> c);

absl::Status RunElementwise(const v1::ElementwiseAttrs& attrs, DType dtype,
                            const std::vector<absl::Span<const uint8_t>>& inputs,
                            absl::Span<uint8_t> out);

absl::Status RunGather(const v1::GatherAttrs& attrs, DType dtype,
                       absl::Span<const uint8_t> x, absl::Span<const uint8_t> w,
                       absl::Span<uint8_t> y);

absl::Status RunRowDot(const v1::RowDotAttrs& attrs, DType dtype,
                       absl::Span<const uint8_t> a, absl::Span<const uint8_t> b,
                       absl::Span<uint8_t> d);

// GatherAttrs.k as used: 0 (unset) reads as 1.
inline int64_t GatherK(const v1::GatherAttrs& attrs) {
  return attrs.k() == 0 ? 1 : attrs.k();
}

// OK if a gather with these attributes fits operands of these element
// counts (`w_elements` < 0: no W): row >= 1, k >= 0, X's and Y's counts
// multiples of row, index holding rows(Y) * k entries each -1 or in [0,
// rows(X)), W holding rows(Y) * k elements. INVALID_ARGUMENT naming the
// field (gather.row, gather.k, gather.index[i]) or operand and the allowed
// values otherwise. Shared by the kernels, the reference and the program
// parser, so that all of them accept the same steps.
absl::Status CheckGather(const v1::GatherAttrs& attrs, int64_t x_elements,
                         int64_t w_elements, int64_t y_elements);

// OK if a row dot with these attributes fits operands of these element
// counts: row >= 1, A's and B's counts multiples of row, index holding 2 *
// elements(D) entries, the even ones (rows of A) each -1 or in [0,
// rows(A)), the odd ones (rows of B) each -1 or in [0, rows(B)).
// INVALID_ARGUMENT naming the field (row_dot.row, row_dot.index,
// row_dot.index[i]) and the allowed values otherwise. Shared by the
// kernels, the reference and the program parser. The dtype is not checked
// here (floats only: the callers say so).
absl::Status CheckRowDot(const v1::RowDotAttrs& attrs, int64_t a_elements,
                         int64_t b_elements, int64_t d_elements);

// True for the elementwise kinds that take floating-point dtypes only
// (RELU, SIGMOID, RELU_GRAD, SIGMOID_GRAD).
bool ElementwiseNeedsFloat(v1::ElementwiseAttrs::Kind kind);

// The number of inputs of an elementwise kind (ADD, RELU_GRAD and
// SIGMOID_GRAD 2; SCALE, RELU and SIGMOID 1), 0 for an unknown kind.
int ElementwiseInputs(v1::ElementwiseAttrs::Kind kind);

// "add", "scale", "relu", "sigmoid", "relu_grad", "sigmoid_grad"
// ("unknown" otherwise), for messages.
const char* ElementwiseName(v1::ElementwiseAttrs::Kind kind);

// Every known kind's name, for error messages.
inline constexpr char kElementwiseKinds[] =
    "KIND_ADD, KIND_SCALE, KIND_RELU, KIND_SIGMOID, KIND_RELU_GRAD, "
    "KIND_SIGMOID_GRAD";

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
