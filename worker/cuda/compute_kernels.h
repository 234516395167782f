// CUDA kernels for the element arithmetic of the GPU backend: the combine
// step of reducing collectives, the elementwise compute ops, the row gather
// and the row dot, with the bits of worker/kernels/element_core.h (the host's
// rules, reduce.h and compute.h); and the attention block, finish and
// backward (worker/kernels/attention.h's arithmetic, not its bits). Plain C++
// and the CUDA runtime API, so nvcc compiles it without Abseil;
// worker/cuda/device_compute.h and device_collectives.h wrap it with
// absl::Status.
//
//   LaunchReduceInto(PatternType::kFloat32, /*max=*/false, in, inout, n, s);
//   LaunchAdd(PatternType::kBFloat16, a, b, out, n, s);
//   LaunchScale(PatternType::kInt32, 0.5, in, out, n, s);
//   LaunchGather(PatternType::kFloat16, x, w, index, row, k, rows_y, y, s);
//   LaunchRowDot(PatternType::kBFloat16, a, b, index, row, n, d, s);
//   LaunchAttentionBlock(PatternType::kFloat32, shape, q, k, v, s_in, s_out,
//                        q_pos, kv_pos, scratch, s);
//   LaunchAttentionFinish(PatternType::kFloat32, state, out, rows, d, s);
//   LaunchAttentionBackward(PatternType::kBFloat16, grad_shape, q, k, v, dout,
//                           o, state, out, q_pos, kv_pos, scratch, s);
//
// Contract: n elements of PatternTypeSize(type) bytes each, device memory of
// the stream's GPU (or peer memory it can reach). `inout` and `in` must not
// overlap; `out` may alias an input exactly. Launches are asynchronous on
// `stream` and return the launch error (cudaErrorInvalidValue for n < 0).
// Thread safety: as the CUDA runtime.
#ifndef MESHCAST_WORKER_CUDA_COMPUTE_KERNELS_H_
#define MESHCAST_WORKER_CUDA_COMPUTE_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/pattern_core.h"

namespace meshcast::worker::cuda {

// inout[i] = ReduceBits(type, max, inout[i], in[i]).
cudaError_t LaunchReduceInto(PatternType type, bool max, const void* in,
                             void* inout, int64_t n, cudaStream_t stream);

// out[i] = AddBits(type, a[i], b[i]).
cudaError_t LaunchAdd(PatternType type, const void* a, const void* b,
                      void* out, int64_t n, cudaStream_t stream);

// out[i] = ScaleBits(type, alpha, in[i]).
cudaError_t LaunchScale(PatternType type, double alpha, const void* in,
                        void* out, int64_t n, cudaStream_t stream);

// out[i] = ReluBits(type, in[i]) / SigmoidBits(type, in[i]); float types
// only (cudaErrorInvalidValue for integers).
cudaError_t LaunchRelu(PatternType type, const void* in, void* out, int64_t n,
                       cudaStream_t stream);
cudaError_t LaunchSigmoid(PatternType type, const void* in, void* out,
                          int64_t n, cudaStream_t stream);

// out[i] = ReluGradBits(type, grad[i], y[i]) / SigmoidGradBits(type,
// grad[i], y[i]) (y: RELU's / SIGMOID's output); float types only
// (cudaErrorInvalidValue for integers).
cudaError_t LaunchReluGrad(PatternType type, const void* grad, const void* y,
                           void* out, int64_t n, cudaStream_t stream);
cudaError_t LaunchSigmoidGrad(PatternType type, const void* grad, const void* y,
                              void* out, int64_t n, cudaStream_t stream);

// compute.h's RunGather on device memory: `y` holds rows_y rows of `row`
// elements; element (i, c) = sum over j < k, in j order, of w[i * k + j] *
// x[index[i * k + j] * row + c] (w null: weights of 1), an index of -1
// adding nothing. Floats accumulate with GatherMulAdd and round once
// (CoreFloatStoreBits); integers, unweighted only (cudaErrorInvalidValue
// with w), sum with wrap-around. `index` (rows_y * k int64 entries) is
// device memory, already checked by the caller (compute.h CheckGather): an
// index outside x reads out of bounds. `y` must not overlap x or w.
// One thread per output element in a grid-stride loop, so a warp reads
// consecutive columns of one source row.
cudaError_t LaunchGather(PatternType type, const void* x, const void* w,
                         const int64_t* index, int64_t row, int64_t k,
                         int64_t rows_y, void* y, cudaStream_t stream);

// compute.h's RunRowDot on device memory: `d` holds n elements; element i
// = sum over c < row, in c order, of a[index[2 i] * row + c] * b[index[2 i
// + 1] * row + c], accumulated with GatherMulAdd and rounded once
// (CoreFloatStoreBits), or +0 when either index is -1. Float types only
// (cudaErrorInvalidValue for integers, row < 1 or n < 0). `index` (2 n
// int64 entries) is device memory, already checked by the caller (compute.h
// CheckRowDot): an index outside a or b reads out of bounds. `d` must not
// overlap a or b. One thread per D element in a grid-stride loop, its row
// summed in order.
cudaError_t LaunchRowDot(PatternType type, const void* a, const void* b,
                         const int64_t* index, int64_t row, int64_t n, void* d,
                         cudaStream_t stream);

// The attributes of an attention block (plan.proto AttentionBlockAttrs),
// checked by the caller (attention.h CheckAttentionBlock); `scale` as used
// (attention.h AttentionScale: never 0).
struct AttentionBlockShape {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t q_rows = 0;
  int64_t kv_rows = 0;
  int64_t head_dim = 0;
  double scale = 1;
  bool causal = false;
};

// Device memory LaunchAttentionBlock needs for `shape` in `type` (its
// accumulators: one head_dim row per thread block).
int64_t AttentionBlockScratchBytes(PatternType type,
                                   const AttentionBlockShape& shape);

// attention.h's RunAttentionBlock on device memory: q [batch, heads,
// q_rows, head_dim], k and v [batch, kv_heads, kv_rows, head_dim], s_in
// (null: the empty state) and s_out [batch, heads, q_rows, head_dim + 2],
// row-major; q_pos (q_rows) and kv_pos (kv_rows int64 entries) in device
// memory when causal, else unused (may be null); `scratch`
// AttentionBlockScratchBytes of device memory (used by the row kernel
// only).
//
// Two kernels compute the same online softmax: per query row and chunk of
// keys, m_new = max(m, the chunk's largest score) rounded to the dtype, f =
// exp(m - m_new) (0 while m is -inf), each score becomes exp(s - m_new), l =
// l f + their sum, o = o f + sum_j p_j v_j. A row no key of which is kept
// keeps its state bit for bit (s_in's row, or o = +0, m = -inf, l = +0).
// - The tiled kernel (fp16, bf16, float32 with head_dim <= 128): a thread
//   block takes 64 query rows of one (batch, head) and walks the keys in
//   tiles of 64 held in shared memory, so each key is read once per 64
//   query rows; float accumulators in registers (the host's too,
//   attention.h); tiles where every (query, key) pair is masked are
//   skipped whole.
// - The row kernel (float64, larger head_dim, and LaunchAttentionBlockByRow):
//   one thread block of 128 threads per query row (grid-stride over the
//   rows), the row's o in `scratch` in the accumulator type (float for
//   fp16 / bf16, double for float32 / float64), keys in chunks of 256 (the
//   host's kAttentionKeyChunk) scored by a dot product per thread.
// The bits may differ from the host's (the order of the sums, the chunk
// size), within the reference's tolerance. `s_out` may alias `s_in`
// exactly; it must not overlap q, k or v. Float types only
// (cudaErrorInvalidValue for integers or a dimension < 1).
cudaError_t LaunchAttentionBlock(PatternType type,
                                 const AttentionBlockShape& shape,
                                 const void* q, const void* k, const void* v,
                                 const void* s_in, void* s_out,
                                 const int64_t* q_pos, const int64_t* kv_pos,
                                 void* scratch, cudaStream_t stream);

// The row kernel alone, whatever the dtype and head_dim: the baseline the
// GPU benchmark measures the tiled kernel against (bench/gpu/gpu_bench.cc).
cudaError_t LaunchAttentionBlockByRow(PatternType type,
                                      const AttentionBlockShape& shape,
                                      const void* q, const void* k,
                                      const void* v, const void* s_in,
                                      void* s_out, const int64_t* q_pos,
                                      const int64_t* kv_pos, void* scratch,
                                      cudaStream_t stream);

// attention.h's RunAttentionFinish on device memory: `state` rows of
// head_dim + 2 elements, `out` rows of head_dim: out = o / l in the
// accumulator type (as the host), rounded once; +0 where l is 0. One thread
// per output element. `out` must not overlap `state`. Float types only
// (cudaErrorInvalidValue for integers, head_dim < 1 or rows < 0).
cudaError_t LaunchAttentionFinish(PatternType type, const void* state,
                                  void* out, int64_t rows, int64_t head_dim,
                                  cudaStream_t stream);

// The attributes of an attention backward (plan.proto
// AttentionBackwardAttrs), checked by the caller (attention.h
// CheckAttentionBackward): the forward's block, the target and accumulate.
struct AttentionBackwardShape {
  AttentionBlockShape block;
  bool dkv = false;  // TARGET_DKV: dK and dV; else TARGET_DQ: dQ
  bool accumulate = false;
};

// Device memory LaunchAttentionBackward needs for `shape` in `type` (D per
// query row, and one or two head_dim rows of accumulators per thread
// block).
int64_t AttentionBackwardScratchBytes(PatternType type,
                                      const AttentionBackwardShape& shape);

// attention.h's RunAttentionBackward on device memory: q, dout and o
// [batch, heads, q_rows, head_dim], k and v [batch, kv_heads, kv_rows,
// head_dim], `state` the forward's final state [batch, heads, q_rows,
// head_dim + 2] (only its m and l are read), `out` dQ [batch, heads,
// q_rows, head_dim] or dKV [2, batch, kv_heads, kv_rows, head_dim] (dK
// then dV), read first when `accumulate`; q_pos and kv_pos as for
// LaunchAttentionBlock; `scratch` AttentionBackwardScratchBytes of device
// memory. With P_ij = exp(s_ij - m_i) / l_i (s_ij = scale q_i . k_j; 0
// where masked or l_i is 0), D_i = dO_i . O_i, dP_ij = dO_i . v_j and dS_ij
// = P_ij (dP_ij - D_i): dQ_i (+)= scale sum_j dS_ij k_j, dK_j (+)= scale
// sum dS_ij q_i and dV_j (+)= sum P_ij dO_i, the last two over every query
// row i of every head of k_j's group. Arithmetic in the accumulator type
// (float for fp16 / bf16, double for float32 / float64), each output
// element rounded once; the bits may differ from the host's (the order of
// the sums). A straightforward kernel, not tuned (no tensor cores, no
// tiling beyond shared-memory chunks): a first kernel computes D, one
// thread per query row; then, for dQ, one thread block of 128 threads per
// query row (grid-stride over the rows) whose threads each take keys of a
// 256-key chunk (the row's dS_ij into shared memory) and then columns of
// the row's accumulator in `scratch` (sum over the chunk, key order); for
// dK and dV, one thread block per key row whose threads take query rows of
// a 256-row chunk of each head of the group (P_ij and dS_ij into shared
// memory) and then columns of the key row's two accumulators. No atomics:
// every output element has one writer. `out` must not overlap any input.
// Float types only (cudaErrorInvalidValue for integers or a dimension <
// 1).
cudaError_t LaunchAttentionBackward(PatternType type,
                                    const AttentionBackwardShape& shape,
                                    const void* q, const void* k, const void* v,
                                    const void* dout, const void* o,
                                    const void* state, void* out,
                                    const int64_t* q_pos, const int64_t* kv_pos,
                                    void* scratch, cudaStream_t stream);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_COMPUTE_KERNELS_H_
