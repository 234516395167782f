// The reference for computed outputs: what every element of a plan's tensors
// should hold, recomputed by a simple, unfused path in float64 from the same
// deterministic inputs, and the verifier that compares a buffer with it.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Reference> ref, Reference::Create(plan));
//   ASSIGN_OR_RETURN(double x, ref->Value(tensor, {3, 7}));
//   ASSIGN_OR_RETURN(ComputedCheck check,
//                    VerifyComputed(bytes, box, spec, tensor, *ref,
//                                   v1::VERIFY_MODE_SAMPLE, cancellation));
//
// Value semantics (plan.proto): all buffers of a tensor hold the same value
// at the same coordinate, so moves (broadcast, tensor-form send/recv,
// all-gather, local copy) are ignored here. A tensor element is
//  - defined by the last value-defining step (in dependency order) whose
//    output operand covers it, computed from its inputs as they were before
//    that step:
//      OP_SEND_RECV in the operand form (IsOperandCopy): a copy between two
//        regions, maybe of different tensors: OUT element e = IN element e,
//        e counting each operand's region in row-major order;
//      OP_ALL_REDUCE, OP_REDUCE_SCATTER: OUT[x] = sum | max over r of
//        IN[r, x] (IN = tensor of inputs[0], OUT = tensor of the outputs);
//      OP_ALL_TO_ALL: OUT block (s, r) = IN block (r, s) over flat indices,
//        IN sender-major, OUT receiver-major, block sizes from `counts`;
//      OP_COMPUTE GEMM: alpha * sum_p op(A)[i, p] * op(B)[p, j] (+ C's
//        previous value when accumulate), operands row-major over their
//        boxes, (i, j) from the element's offset in the output operand;
//      OP_COMPUTE elementwise: in0 + in1, alpha * in0, max(in0, 0),
//        1 / (1 + exp(-in0)), in1 > 0 ? in0 : 0 (RELU_GRAD; in0 / 2 where
//        in1 is within its tolerance of 0, see below) or in0 * in1 * (1 -
//        in1) (SIGMOID_GRAD), element by element in the operands' row-major
//        order;
//      OP_COMPUTE gather: Y element e is row i = e / row, column c = e %
//        row: sum over j < k of w(i, j) * X[index[i * k + j], c] (w = 1
//        without W, index -1 adding nothing), X's row r column c being
//        element r * row + c of its box and w(i, j) element i * k + j of
//        W's; k = 1 without W is a copy, exact, with X's own tolerance;
//      OP_COMPUTE row dot: D element i (row-major over D's box) = sum over
//        c < row of A[index[2 i], c] * B[index[2 i + 1], c], A's row r
//        column c being element r * row + c of its box (B's likewise); an
//        exact 0 when either index is -1;
//      OP_COMPUTE attention block (plan.proto AttentionBlockAttrs): S'
//        element e is row r = e / (head_dim + 2) = (b, h, i) of the state,
//        computed from the previous state's row r (S element r * (head_dim
//        + 2) + x, or the empty state o = 0, m = -inf, l = 0 without S),
//        Q's row r and the rows of K and V of kv head h / (heads /
//        kv_heads): m' = max(m, max over kept j of s_j), s_j = scale q . k_j,
//        p_j = exp(s_j - m'), f = exp(m - m') (0 for an empty state), o' = f
//        o + sum p_j v_j, l' = f l + sum p_j; a row with no kept key keeps
//        its previous row as it was (values and bounds);
//      OP_COMPUTE attention finish: O element e is row r = e / head_dim,
//        column c = e % head_dim: o_c / l of S's row r, an exact 0 where l
//        is 0;
//      OP_COMPUTE attention backward (plan.proto AttentionBackwardAttrs):
//        dQ or dK / dV from the definition, P_ij = exp(s_ij - m_i) / l_i
//        with S's m and l (0 where masked or l is 0), dS_ij = P_ij (dO_i .
//        v_j - dO_i . O_i), plus the previous value when accumulate;
//  - otherwise its initializer's value (Plan.tensor_inits, default PATTERN).
// Floating-point values are computed in float64 with no rounding to the
// tensor's dtype on the way (the tolerance accounts for the device's
// roundings); integer values are exact and wrap to each tensor's width, as
// the device arithmetic does. Integer GEMM and weighted integer gather are
// UNIMPLEMENTED, integer RELU / SIGMOID / RELU_GRAD / SIGMOID_GRAD, row
// dot and attention INVALID_ARGUMENT (as in compute.h, attention.h).
//
// Tolerance bookkeeping (Expected.scale / terms) of the compute ops: GEMM
// and weighted gather add k + 1 terms (row dot row + 1) to the largest of
// their operands' summed terms, over a scale of sum |a| |b| (of the
// operands' scales); a row dot of a -1 index is an exact 0; RELU keeps its
// input's bound (exact, 1-Lipschitz); SIGMOID scales the input's bound by
// its largest slope, 1/4, and adds 4 terms for its own roundings;
// SIGMOID_GRAD (g = in0, s = in1) has scale |out| + max(1/4, |s (1 - s)|)
// scale_g + max(1, |1 - 2 s|) scale_g scale_s and terms max(terms_g,
// terms_s) + 3 (its slopes in g and s, and its three roundings); RELU_GRAD
// is exact where in1's value is farther from 0 than in1's own tolerance
// (ToleranceFor(dtype, terms_in1): abs + rel * scale_in1; for a RELU output
// of 0, the value RELU clamped, Expected.clamped_from, is what is measured,
// since 0 itself is within any tolerance): in0's bound where in1 > 0, an
// exact 0 elsewhere. Where in1 is within that tolerance of 0 (exactly 0
// included) the device may have taken either branch: the element
// is expected at in0 / 2 with terms max(terms_in0, 1) and scale scale_in0 +
// |in0| / (2 rel) (rel of those terms), a bound that accepts in0 (within
// its own bound) and 0 alike, and that the steps reading it carry on
// (reference.cc says why for each op).
//
// Attention (attention.h). The device's scores s_j err by its roundings
// of the dot product, the scale's product and the operands' own errors:
// T = head_dim + 2 + terms(Q) + terms(K) terms over e_j = |scale| sum_c
// scale(q_c) scale(k_jc) (>= |s_j|). Its m' is the maximum of such scores
// (and of the previous m), rounded to the dtype once, so it errs by as
// much plus one rounding: m' has scale E = max(e_s, scale(m), |m'|), e_s
// the largest e_j of the row's kept keys, and terms max(T, terms(m) - 1) +
// 1 (max is 1-Lipschitz, so this bounds |m'_device - m'|; a scale of |m'|
// alone would fail a maximum near 0 whose dot product cancelled). Each
// exponential exp(s_j - m') then errs, relatively, by |ds_j| + |dm'| plus
// the subtraction's rounding: at most the amplification A = ceil((2
// terms(m') + 1) E) = ceil((2 T + 3) E) units of 1.125 u (twice T E, not
// once: both s_j and m' carry the score's error; the 3 covers m's
// rounding to the dtype and the subtraction). So
//  - o elements: scale f scale(o) + sum_j p_j scale(v_j), terms A + max(
//    terms(o) - A_prev + 4, terms(V) + kv_rows + 8), with A_prev the
//    previous m's amplification: the previous o's error relative to its
//    own m cancels against the new f (the device's o and l are exactly
//    relative to its stored m), so what it carries on is its terms beyond
//    its amplification, plus this block's multiply by f, add and store (4);
//    this block's sum adds kv_rows roundings, the products, exp's own
//    error and the store (8) over V's terms; the amplification is taken
//    once, for the largest scores of the chain so far, rather than once
//    per block, so a ring of many blocks does not inflate it;
//  - l elements: the same with scale(v) = 1 and no V terms;
//  - m elements: as above;
//  - a row with no kept key: the previous row's values and bounds (the
//    device copies it), the empty state's o = 0, m = -inf, l = 0 exact.
// The backward: P_ij errs relatively by at most A = ceil(T e_i +
// terms(m) scale(m) + terms(l) scale(l) / |l|) + 4 units (T and e as
// above, e_i the row's largest e_j; the 4: the subtraction, exponential,
// division and rounding); dP_ij = dO_i . v_j and D_i = dO_i . O_i are dot
// products (head_dim + 1 terms over the operands'); dS_ij has scale P_ij
// (|dP_ij - D_i| + scale(dP_ij) + scale(D_i)) and terms max(A, terms(dP),
// terms(D)) + 2. dQ_ic sums |scale| scale(dS_ij) scale(k_jc) over the kept
// keys, terms max(terms(dS), terms(K)) + kv_rows + 2; dK_jc likewise over
// the query rows of the kv head's heads (scale(q_ic)), terms + their count
// + 2; dV_jc sums P_ij scale(dO_ic), terms max(A, terms(dO)) + the count +
// 2. An accumulate adds the previous value's scale and one term.
//
// The finish O = o / l has scale max(scale(o), |o| scale(l) / |l|) / |l|
// (scale(o) / l for an attention state, whose l is its own scale) and
// terms terms(o) + terms(l) + 2 (the division and the store); an l of 0
// gives an exact 0. VerifyComputed passes a value equal to the expected
// one, so the -inf of an empty state's m verifies exactly.
//
// Cost: an element costs one evaluation per reduced rank / moved element,
// k evaluations of X (and of W) per gather element, row evaluations of A
// and of B per row dot element, two lookups per attention finish element,
// and one lookup per GEMM or attention block element: an attention
// block's K and V of each (batch, kv head) are evaluated once, on first
// use, into float64 arrays (16 bytes per element of K and of V), and each
// row of its output state once, on first use, at O(kv_rows * head_dim)
// arithmetic plus head_dim evaluations of Q and head_dim + 2 of the
// previous state, kept (24 bytes per element) for the rest of the
// reference's life; a GEMM
// element: a GEMM step's op(A) and op(B) are evaluated once, on first use,
// into float64 arrays (when they hold at most 2^24 elements together), and
// its whole output is then computed once (when it holds at most 2^24
// elements) with the BLAS, in row blocks on a few threads; bigger operands are
// evaluated element by element, which suits SAMPLE verification.
//
// Thread safety: after Create, every const method may run on many threads at
// once (the GEMM operand arrays and the attention memos are built under
// std::call_once).
#ifndef MESHCAST_WORKER_KERNELS_REFERENCE_H_
#define MESHCAST_WORKER_KERNELS_REFERENCE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"
#include "worker/cancellation.h"

namespace meshcast::worker {

// An element's expected value with what bounds the device's error on it.
struct Expected {
  double value = 0;     // float64 value (integers: `integer` as a double)
  int64_t integer = 0;  // integer dtypes: the exact value, wrapped
  // Sum of the magnitudes of every term that went into the value (>=
  // |value|): rounding errors scale with it, not with |value|, which a
  // cancelling sum can make tiny.
  double scale = 0;
  // Roundings the device may make on the way (0: an initial or moved value,
  // exact): the `terms` of ToleranceFor.
  int64_t terms = 0;
  // A RELU output of 0 from a negative input: that input's value (< 0),
  // with the input's error bound still in scale / terms, so that RELU_GRAD
  // can tell a 0 the device surely holds (its input farther below 0 than
  // its tolerance) from one it may not. 0 otherwise. Copies and moves carry
  // it; arithmetic starts afresh.
  double clamped_from = 0;
};

// |found - expected| <= abs + rel * Expected.scale passes.
struct Tolerance {
  double abs = 0;
  double rel = 0;
};

// The tolerance for a value that went through `terms` roundings in `dtype`:
//  - integer dtypes: exact (0, 0): the arithmetic wraps identically;
//  - floats: rel = terms * u * 1.125 with u the unit roundoff of the dtype
//    (fp16 2^-11, bf16 2^-8, fp32 2^-24, fp64 2^-53): the classic bound on a
//    recursive sum or dot product of `terms` roundings is terms * u * sum
//    |x_i| to first order, and the 1/8 margin covers the second-order terms
//    while terms * u stays small; abs = terms * the dtype's smallest
//    subnormal (fp16 2^-24, bf16 2^-133, fp32 2^-149, fp64 2^-1074): one
//    rounding of a result that underflows errs by up to half of it. The bound holds for any summation order (ring, tree,
//    blocked BLAS, FMA), and for fp16/bf16 whether the device accumulates in
//    the dtype or in float.
Tolerance ToleranceFor(DType dtype, int64_t terms);

// The result of VerifyComputed.
struct ComputedCheck {
  int64_t elements = 0;    // elements checked
  int64_t mismatches = 0;  // elements outside their tolerance
  double max_abs_error = 0;
  // "tensor 2 element [3,7]: expected 1.5, found 0.25 (tolerance 1e-06)"
  // for the first mismatch in row-major order; empty if none.
  std::string first_mismatch;
};

// True for an OP_SEND_RECV in the operand form (plan.proto): no `slice`,
// inputs[0] on the sender and outputs[0] on the receiver, which may be
// regions of different tensors. Unlike the tensor form (a move within one
// tensor), it defines its output's values as a copy of its input's.
bool IsOperandCopy(const v1::Step& step);

class Reference {
 public:
  // INVALID_ARGUMENT naming the step / buffer / tensor for a plan whose
  // value-defining steps are malformed (unknown buffers or tensors, operands
  // outside their buffers, sizes that do not match GEMM's m, n, k, the
  // all-to-all counts or a gather's row, k and index (compute.h
  // CheckGather) or a row dot's row and index (CheckRowDot) or an
  // attention block's or finish's attributes (attention.h
  // CheckAttentionBlock, CheckAttentionFinish), IN not [n] + OUT's shape,
  // unknown kinds or reductions, RELU / SIGMOID / RELU_GRAD / SIGMOID_GRAD,
  // a row dot or attention on an integer dtype, a dependency cycle);
  // UNIMPLEMENTED for integer GEMM and weighted integer gather.
  static absl::StatusOr<std::unique_ptr<Reference>> Create(
      const v1::Plan& plan);

  // The expected value of element `coord` of `tensor` (see the top of the
  // file). INVALID_ARGUMENT for an unknown tensor or a coordinate outside
  // it.
  absl::StatusOr<double> Value(int tensor,
                               absl::Span<const int64_t> coord) const;
  absl::StatusOr<Expected> Expect(int tensor,
                                  absl::Span<const int64_t> coord) const;

  // True if some step defines part of `tensor` (its buffers hold computed
  // values, to be checked with VerifyComputed rather than bit for bit).
  bool IsComputed(int tensor) const;

  int num_tensors() const { return static_cast<int>(tensors_.size()); }
  const TensorSpec& spec(int tensor) const { return tensors_[tensor]; }

  Reference(const Reference&) = delete;
  Reference& operator=(const Reference&) = delete;
  ~Reference();

 private:
  struct StepInfo;
  struct Definition;
  struct GemmCache;
  struct GemmVector;
  struct AttentionCache;
  struct BackwardCache;
  friend absl::StatusOr<ComputedCheck> VerifyComputed(
      absl::Span<const uint8_t>, const Box&, const TensorSpec&, int,
      const Reference&, v1::VerifyMode, const Cancellation&);

  Reference();
  absl::Status Build(const v1::Plan& plan);

  // The element's value as of before step number `limit` (in dependency
  // order); coordinates already validated.
  Expected Eval(int tensor, const int64_t* coord, int limit) const;
  Expected Initial(int tensor, const int64_t* coord) const;
  Expected EvalStep(const StepInfo& step, const Definition& def, int tensor,
                    const int64_t* coord) const;
  Expected EvalGemm(const StepInfo& step, int64_t i, int64_t j) const;
  // Element e of a gather's output operand (row-major over its box).
  Expected EvalGather(const StepInfo& step, int64_t e) const;
  // Element e of a row dot's output operand (row-major over its box).
  Expected EvalRowDot(const StepInfo& step, int64_t e) const;
  // Element e of an attention block's S' / an attention finish's O operand
  // (row-major over its box).
  Expected EvalAttentionBlock(const StepInfo& step, int64_t e) const;
  Expected EvalAttentionFinish(const StepInfo& step, int64_t e) const;
  // Fill an attention block's memos (AttentionCache): K and V of (b, kv
  // head), and output state row `row`; each run once, under its
  // std::once_flag.
  void BuildAttentionKv(const StepInfo& step, int64_t b, int64_t kvh) const;
  void BuildAttentionRow(const StepInfo& step, int64_t row) const;
  const GemmCache& Operands(const StepInfo& step) const;
  // False when no step before `step` writes an element of its input
  // operand `operand` and the dtype is a float: Operands may then fill it
  // from the initializer in bulk.
  bool WrittenBefore(const StepInfo& step, int operand) const;
  // Row `index` of op(A) (operand 0) or column `index` of op(B) (operand
  // 1) of a GEMM step, evaluated on its first use (GemmCache).
  const GemmVector& OperandVector(const StepInfo& step, int operand,
                                  int64_t index) const;
  // alpha * sum with its scale and terms: a GEMM element from its dot
  // product over k.
  static Expected GemmResult(double alpha, double sum, double scale,
                             int64_t terms, int64_t k);
  // Element e of an attention backward's output operand (row-major over
  // its box), without the previous value accumulate adds; the part of the
  // output of the element's (batch, kv head) is built on its first call
  // (BackwardCache).
  Expected EvalAttentionBackward(const StepInfo& step, int64_t e) const;
  void BuildAttentionBackward(const StepInfo& step, int64_t b,
                              int64_t kvh) const;
  // Elements [first, first + count) of the step's input operand `input`
  // (row-major over its box) as of before the step, converted to the
  // output's dtype: values, scales and the largest terms into `terms`.
  void LoadOperand(const StepInfo& step, int input, int64_t first,
                   int64_t count, std::vector<double>* value,
                   std::vector<double>* scale, int64_t* terms) const;

  std::vector<TensorSpec> tensors_;
  // Set by a full check of a large buffer (VerifyComputed): GEMMs are then
  // built whole (operands and output with the BLAS) from their first
  // element, rather than from rows and columns on demand.
  mutable std::atomic<bool> whole_gemms_{false};
  std::vector<v1::Initializer> inits_;
  std::vector<StepInfo> steps_;  // value-defining steps, dependency order
  // Per tensor: the regions defined by steps, latest step first.
  std::vector<std::vector<Definition>> defs_;
};

// The most elements a SAMPLE check reads.
inline constexpr int64_t kSamples = 4096;

// The offsets (row-major in `box`) a SAMPLE check of `tensor`'s `box` reads:
// every element of a box of at most kSamples, else a grid of rows x columns
// (the last dimension the columns, the others flattened into rows), 64 x 64
// where both have room, one row and one column per stratum at a hashed
// position: spread over the whole box, no repeats, the same on every run,
// and few rows and columns, so that a GEMM's reference evaluates few rows
// of A and columns of B.
std::vector<int64_t> SampleOffsets(const Box& box, int tensor);

// Checks the elements of `data`, which holds `box` of tensor `tensor`
// (row-major, DTypeSize(spec.dtype) bytes each), against `ref`:
// FULL every element, SAMPLE a fixed pseudo-random subset of at most
// kSamples elements (SampleOffsets), OFF none. Floats pass when equal to the
// expected value (infinities included) or within ToleranceFor(dtype, terms) of
// it (NaN never passes), integers must be exact. Errors: INVALID_ARGUMENT if
// the box is not inside the tensor, the buffer size does not match, `spec` is
// not the reference's tensor; CANCELLED (checked every 1024 elements). A
// mismatch is a result, not an error.
absl::StatusOr<ComputedCheck> VerifyComputed(absl::Span<const uint8_t> data,
                                             const Box& box,
                                             const TensorSpec& spec, int tensor,
                                             const Reference& ref,
                                             v1::VerifyMode mode,
                                             const Cancellation& cancel);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_KERNELS_REFERENCE_H_
