// The GPU kernel of OP_COMPUTE: GEMM with cuBLAS (cublasGemmEx), the
// elementwise ops, the row gather, the row dot and attention (block,
// finish and backward) with CUDA kernels (compute_kernels.h), on the step's
// device; the GPU counterpart of worker/engine/compute_step.h with the same
// contract (plan.proto GemmAttrs, ElementwiseAttrs, GatherAttrs,
// RowDotAttrs, AttentionBlockAttrs, AttentionFinishAttrs,
// AttentionBackwardAttrs; compute.h, attention.h).
//
// Each operand is row-major over its own box. An operand that is one
// contiguous segment of its tile is used in place; any other slice is
// packed into stream-ordered staging first (and an output slice unpacked
// afterwards, after packing its old value when the GEMM or the attention
// backward accumulates).
//
// GEMM: C = alpha * op(A) * op(B) (+ C when accumulate), alpha 0 read as 1.
// cuBLAS is column-major; a row-major m x n C is the column-major n x m
// matrix C^T = op(B)^T op(A)^T, so the call passes B before A with n and m
// swapped and each operand's transpose flag as given (a row-major matrix
// read column-major is its own transpose): no copy. float32 and float64 in
// their own precision (CUBLAS_COMPUTE_32F, _64F; TF32 is not enabled),
// float16 and bfloat16 with float accumulation (CUBLAS_COMPUTE_32F), as the
// CPU path and the reference's tolerance assume; integer dtypes are
// UNIMPLEMENTED, as on the CPU.
//
// Elementwise: KIND_ADD (two inputs), KIND_SCALE, KIND_RELU and
// KIND_SIGMOID (one input), KIND_RELU_GRAD and KIND_SIGMOID_GRAD (two: the
// gradient and the activation's output); all but ADD and SCALE floats only;
// with the host's bits (worker/kernels/element_core.h).
//
// Gather (GatherAttrs): inputs [X] or [X, W], outputs [Y]; the index list
// is copied to the GPU on the step's stream and one thread computes each Y
// element, summing its k terms in the host's order and arithmetic
// (element_core.h GatherMulAdd), so the bits equal compute.h RunGather's.
// A Y that shares bytes with X or W is gathered into staging first.
//
// Row dot (RowDotAttrs): inputs [A, B], outputs [D], floats only; the index
// list is copied to the GPU likewise and one thread computes each D
// element, summing its row in column order with the host's arithmetic
// (GatherMulAdd), so the bits equal compute.h RunRowDot's. A D that shares
// bytes with A or B is computed into staging first.
//
// Attention block (AttentionBlockAttrs): inputs [Q, K, V] or [Q, K, V, S],
// outputs [S'], floats only; the causal positions are copied to the GPU
// likewise, and one thread block per query row runs the online-softmax
// update over 256-key chunks with the host's arithmetic (attention.h; the
// bits may differ in the order of the sums). S' may be S itself (in
// place); an S' that shares bytes with Q, K or V, or with S otherwise, is
// computed into staging first. Attention finish (AttentionFinishAttrs):
// inputs [S], outputs [O], one thread per O element (o / l, 0 where l is
// 0); an O that shares bytes with S is computed into staging first.
//
// Attention backward (AttentionBackwardAttrs): inputs [Q, K, V, dO, O, S]
// (S the forward's final state: its m and l), outputs [dQ] (TARGET_DQ) or
// [dKV] (TARGET_DKV: dK then dV), floats only; the causal positions are
// copied to the GPU likewise. A straightforward kernel, not tuned: D = dO .
// O one thread per query row, then one thread block per query row (dQ) or
// per key row (dK and dV, over every query row of every head of its
// group), with the host's arithmetic (attention.h; the bits may differ in
// the order of the sums). With accumulate the output's old value is read
// and the gradient added to it. An output that shares bytes with an input
// is computed into staging first (holding the old value when
// accumulating).
//
// Errors: INVALID_ARGUMENT for m, n, k outside [0, 2^31 - 1], operand sizes
// that do not match them or a gather's, row dot's or attention step's
// attributes (compute.h CheckGather, CheckRowDot; attention.h
// CheckAttentionBlock, CheckAttentionFinish, CheckAttentionBackward), an
// unknown kind, RELU / SIGMOID / RELU_GRAD / SIGMOID_GRAD, a row dot or
// attention on integers or the wrong operand count;
// UNIMPLEMENTED for a weighted integer gather; FAILED_PRECONDITION for an
// operand without a tile here or mixed dtypes; cuBLAS and CUDA errors.
// Thread safety: one lane thread per call (device_step.h).
#ifndef MESHCAST_WORKER_CUDA_DEVICE_COMPUTE_H_
#define MESHCAST_WORKER_CUDA_DEVICE_COMPUTE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/cuda/device_step.h"

namespace meshcast::worker::cuda {

// GEMM warm-ups larger than this (A, B and C together) are skipped.
inline constexpr int64_t kMaxGemmWarmUpBytes = int64_t{2} << 30;

// Runs every distinct GEMM (lane, GPU, dtype, m, n, k, flags) among this
// worker's OP_COMPUTE steps once on zeroed scratch of its shape, on the
// lane that will run it, and waits for them: outside the steps' timing, so
// that a step's time is the GEMM's, not the process's first use of that
// cuBLAS kernel (CUDA loads kernels lazily, on first launch) or of the
// lane's handle. On an H200 the first GEMM of a shape in a process took
// 95 to 157 ms, the next ones 0.7 to 3 ms. Shapes whose scratch exceeds
// kMaxGemmWarmUpBytes, and steps a kernel would refuse, are left out.
// Errors: cuBLAS and CUDA errors (e.g. out of memory).
absl::Status WarmUpGemms(const ParsedProgram& program,
                         const DeviceRelayEnvironment& env,
                         std::vector<DeviceLane>& lanes);

absl::Status EnqueueCompute(const StepDesc& step,
                            const DeviceRelayEnvironment& env,
                            const DeviceLane& lane,
                            absl::Span<const cudaEvent_t> waits,
                            const StepEvents& events);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_DEVICE_COMPUTE_H_
