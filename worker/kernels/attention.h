// Attention kernels on host memory, as the CPU backend runs OP_COMPUTE
// steps: one block of flash attention with the online-softmax update of a
// per-row state (plan.proto AttentionBlockAttrs) and the finish that turns
// the state into the output (AttentionFinishAttrs).
//
//   v1::AttentionBlockAttrs a;  // batch, heads, kv_heads, q_rows, kv_rows,
//                               // head_dim, scale, causal, positions
//   RETURN_IF_ERROR(RunAttentionBlock(a, DType::kBFloat16, q, k, v,
//                                     /*state_in=*/{}, state));
//   RETURN_IF_ERROR(RunAttentionBlock(a2, DType::kBFloat16, q, k2, v2, state,
//                                     state));  // in place
//   v1::AttentionFinishAttrs f;  f.set_head_dim(a.head_dim());
//   RETURN_IF_ERROR(RunAttentionFinish(f, DType::kBFloat16, state, out));
//
// Attention block: Q is [batch, heads, q_rows, head_dim], K and V [batch,
// kv_heads, kv_rows, head_dim] (head h reads kv head h / (heads /
// kv_heads)), the state [batch, heads, q_rows, head_dim + 2]: per query
// row the unnormalized output o, the running maximum m and the running sum
// l; every operand row-major. `state_in` empty: the state starts empty (o =
// 0, m = -inf, l = 0). For query row i and key row j, s_ij = scale * q_i .
// k_j (scale 0 read as 1 / sqrt(head_dim), AttentionScale), masked when
// causal and kv_position[j] > q_position[i]. Arithmetic: float for
// float16, bfloat16 and float32, double for float64 (the accumulator), the
// float exponentials by a vectorizable polynomial (under 2 ulp); each
// stored value is rounded once to the dtype. Per (b, h), tiles of up to
// kAttentionQueryTile query rows run against chunks of kAttentionKeyChunk
// key rows: the scores of the tile come from one GEMM (BLIS sgemm / dgemm,
// alpha = scale), masked keys become -inf, and each row with a kept key in
// the chunk takes the flash update
//   m_new = the chunk's maximum, max(m, max_j s_ij), rounded to the dtype;
//   f = exp(m - m_new) (0 while m is -inf: an empty state);
//   p_j = exp(s_ij - m_new) (0 for a masked key);
//   l = l f + sum_j p_j;  o = o f + sum_j p_j v_j (a second GEMM);
// m is rounded to the dtype before any exponential is taken, so the o and
// l that are stored are exactly relative to the m that is stored (a later
// block continues from a consistent state). A row none of whose keys are
// kept (causal) keeps its state bit for bit: the input state's row, or the
// empty state without one (o = +0, m = -inf, l = +0); no NaN appears. The
// GPU (worker/cuda/compute_kernels.h) runs the same update over the same
// 256-key chunks; the bits may differ (order of the sums), the reference's
// tolerance (reference.h) covers both.
// `state_out` may alias `state_in` exactly (in place: each row's state is
// read before it is written); any other overlap with an input is computed
// into a copy first.
// Errors: INVALID_ARGUMENT for an integer dtype, spans that are not a
// multiple of the element size, and CheckAttentionBlock's.
//
// Attention finish: `state` rows of head_dim + 2 elements (rows = its
// elements / (head_dim + 2)), `out` rows of head_dim: O = o / l per row,
// computed in the accumulator (float, or double for float64) and rounded
// once; +0 for every element of a row whose l is 0 (no key kept).
// `out` may overlap `state` (computed into a copy first).
// Errors: INVALID_ARGUMENT for an integer dtype, spans that are not a
// multiple of the element size, and CheckAttentionFinish's.
//
// Attention backward (plan.proto AttentionBackwardAttrs): the gradients of
// one block, from Q, K, V, the output gradient dO, the output O and the
// forward's final state S (its m and l), into dQ (TARGET_DQ) or dK and dV
// ([2, ...], TARGET_DKV); with `accumulate`, added to what `out` holds.
//
//   v1::AttentionBackwardAttrs g;  *g.mutable_block() = a;
//   g.set_target(v1::AttentionBackwardAttrs::TARGET_DKV);
//   RETURN_IF_ERROR(RunAttentionBackward(g, dtype, q, k, v, dout, o, s, dkv));
//
// Per (b, h), the same tiles and chunks as the block: the scores by one
// GEMM (alpha = scale), P_ij = exp(s_ij - m_i) / l_i with the stored m and
// l (0 where masked or where l is 0: a row that saw no key has no
// gradient), dP = dO V^T by a second GEMM, D_i = dO_i . O_i, dS = P (dP -
// D); then dQ += scale dS K, or dK += scale dS^T Q and dV += P^T dO, each
// by one GEMM per chunk. Arithmetic in the block's accumulator (float, or
// double for float64); each output element rounded once to the dtype.
// Chunks that a causal mask hides from a whole tile are skipped. `out` may
// overlap an input (computed into a copy first).
// Errors: INVALID_ARGUMENT for an integer dtype, spans that are not a
// multiple of the element size, and CheckAttentionBackward's.
//
// Thread safety: pure functions; any number may run at once (BLIS serial
// is reentrant, compute.h).
#ifndef MESHCAST_WORKER_KERNELS_ATTENTION_H_
#define MESHCAST_WORKER_KERNELS_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"

namespace meshcast::worker {

// Query rows per tile and key rows per chunk of the host kernel (the GPU's
// chunk is the same 256 keys). 128 query rows: each chunk's K and V are
// packed for the GEMMs once per tile, and 128 rows x 256 keys of scores
// (128 KiB) still sit in a core's L2; on one Zen 5 core 64 rows took 15%
// longer (bench/attention/attention_kernel_bench). A row's result does not
// depend on the tile it is in.
inline constexpr int64_t kAttentionQueryTile = 128;
inline constexpr int64_t kAttentionKeyChunk = 256;

absl::Status RunAttentionBlock(const v1::AttentionBlockAttrs& attrs,
                               DType dtype, absl::Span<const uint8_t> q,
                               absl::Span<const uint8_t> k,
                               absl::Span<const uint8_t> v,
                               absl::Span<const uint8_t> state_in,
                               absl::Span<uint8_t> state_out);

absl::Status RunAttentionFinish(const v1::AttentionFinishAttrs& attrs,
                                DType dtype, absl::Span<const uint8_t> state,
                                absl::Span<uint8_t> out);

absl::Status RunAttentionBackward(const v1::AttentionBackwardAttrs& attrs,
                                  DType dtype, absl::Span<const uint8_t> q,
                                  absl::Span<const uint8_t> k,
                                  absl::Span<const uint8_t> v,
                                  absl::Span<const uint8_t> dout,
                                  absl::Span<const uint8_t> o,
                                  absl::Span<const uint8_t> state,
                                  absl::Span<uint8_t> out);

// The float exponential of the kernels: within 2 ulp of exp(x) for x in
// [-87.3, 88.3], an exact 0 below (and for -inf), +inf above; inline in
// the kernels so that their loops vectorize, exported for its test.
float AttentionFastExp(float x);

// AttentionBlockAttrs.scale as used: 0 (unset) reads as 1 / sqrt(head_dim).
double AttentionScale(const v1::AttentionBlockAttrs& attrs);

// OK if an attention block with these attributes fits operands of these
// element counts (`s_in_elements` < 0: no input state): batch, heads,
// kv_heads, q_rows, kv_rows and head_dim each in [1, 2^31 - 1]; heads a
// multiple of kv_heads; scale finite; q_position empty (only without
// causal) or of q_rows entries, kv_position likewise of kv_rows entries; Q
// holding batch * heads * q_rows * head_dim elements, K and V batch *
// kv_heads * kv_rows * head_dim each, S (when given) and S' batch * heads *
// q_rows * (head_dim + 2). INVALID_ARGUMENT naming the field
// (attention_block.heads, attention_block.q_position, ...) or operand and
// the allowed values otherwise, e.g. "attention_block.q_position has 3
// entries; want q_rows = 4". Shared by the kernels (CPU and GPU), the
// reference and the program parser. The dtype is not checked here (floats
// only: the callers say so).
absl::Status CheckAttentionBlock(const v1::AttentionBlockAttrs& attrs,
                                 int64_t q_elements, int64_t k_elements,
                                 int64_t v_elements, int64_t s_in_elements,
                                 int64_t s_out_elements);

// OK if an attention finish with these attributes fits a state of
// `s_elements` and an output of `o_elements` elements: head_dim in [1, 2^31
// - 1], S whole rows of head_dim + 2, O holding rows(S) * head_dim
// elements. INVALID_ARGUMENT naming the field (attention_finish.head_dim)
// or operand otherwise. Shared like CheckAttentionBlock.
absl::Status CheckAttentionFinish(const v1::AttentionFinishAttrs& attrs,
                                  int64_t s_elements, int64_t o_elements);

// OK if an attention backward with these attributes fits its operands:
// target TARGET_DQ or TARGET_DKV; the block as CheckAttentionBlock with S
// in the place of S' (errors prefixed "attention_backward.block: "); dO
// and O holding as many elements as Q; the output batch * heads * q_rows *
// head_dim (TARGET_DQ) or 2 * batch * kv_heads * kv_rows * head_dim
// elements (TARGET_DKV). INVALID_ARGUMENT naming the field or operand
// otherwise. Shared like CheckAttentionBlock.
absl::Status CheckAttentionBackward(const v1::AttentionBackwardAttrs& attrs,
                                    int64_t q_elements, int64_t k_elements,
                                    int64_t v_elements, int64_t do_elements,
                                    int64_t o_elements, int64_t s_elements,
                                    int64_t out_elements);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_KERNELS_ATTENTION_H_
