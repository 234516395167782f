#include "worker/cuda/device_compute.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "worker/cuda/compute_kernels.h"
#include "worker/cuda/cublas_loader.h"
#include "worker/cuda/cuda_handles.h"
#include "worker/cuda/device_pattern.h"
#include "worker/kernels/attention.h"
#include "worker/kernels/compute.h"
#include "worker/kernels/element.h"
#include "worker/pattern.h"

namespace meshcast::worker::cuda {
namespace {

// An operand as the kernels see it: dense, row-major over its box.
struct Dense {
  const DeviceTile* tile = nullptr;
  Box box;
  uint8_t* data = nullptr;
  bool staged = false;  // `data` is a packed copy, not the tile itself
};

// Looks the operand up and makes it dense on the step's GPU: in place when
// it is one contiguous segment of its tile, else a packed copy (filled
// from the tile when `read`).
absl::StatusOr<Dense> MakeDense(const OperandDesc& operand,
                                const DeviceRelayEnvironment& env,
                                const std::string& what, bool read,
                                StepStream& s) {
  Dense dense;
  ASSIGN_OR_RETURN(dense.tile, OperandTile(operand, *env.buffers, what));
  dense.box = operand.box;
  ASSIGN_OR_RETURN(dense.data, ContiguousRegion(*dense.tile, operand.box));
  if (dense.data != nullptr && dense.tile->gpu() == s.gpu()) return dense;
  ASSIGN_OR_RETURN(dense.data,
                   s.Allocate(NumElements(operand.box) *
                              dense.tile->element_size()));
  dense.staged = true;
  if (read) {
    RETURN_IF_ERROR(PackRegion(*dense.tile, operand.box, dense.data, s.gpu(), s));
  }
  return dense;
}

// cublasGemmEx of `g` on dense row-major operands (k > 0, m, n > 0, each
// in [1, 2^31 - 1]) on `handle`'s stream. Row-major C (m x n) is
// column-major C^T (n x m) = op(B)^T op(A)^T.
// cuBLAS's data and compute types for a GEMM in `dtype`.
struct GemmTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
};
absl::StatusOr<GemmTypes> GemmTypesOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return GemmTypes{CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::kFloat64:
      return GemmTypes{CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::kFloat16:
      return GemmTypes{CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case DType::kBFloat16:
      return GemmTypes{CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    default:
      return absl::UnimplementedError(absl::StrCat(
          "gemm in ", DTypeName(dtype),
          " has no kernel (float16, bfloat16, float32, float64 only, as on "
          "the CPU)"));
  }
}

absl::Status CallGemm(cublasHandle_t handle, int gpu, const v1::GemmAttrs& g,
                      DType dtype, const void* a, const void* b, void* c) {
  ASSIGN_OR_RETURN(const GemmTypes types, GemmTypesOf(dtype));
  const cudaDataType_t type = types.data;
  const cublasComputeType_t compute = types.compute;
  const int m = static_cast<int>(g.m()), n = static_cast<int>(g.n()),
            k = static_cast<int>(g.k());
  ScopedCudaDevice on(gpu);
  RETURN_IF_ERROR(on.status());
  const double alpha = GemmAlpha(g);
  const double beta = g.accumulate() ? 1.0 : 0.0;
  const float alpha32 = static_cast<float>(alpha);
  const float beta32 = static_cast<float>(beta);
  const void* alpha_ptr = compute == CUBLAS_COMPUTE_64F
                              ? static_cast<const void*>(&alpha)
                              : static_cast<const void*>(&alpha32);
  const void* beta_ptr = compute == CUBLAS_COMPUTE_64F
                             ? static_cast<const void*>(&beta)
                             : static_cast<const void*>(&beta32);
  const cublasOperation_t op_b = g.trans_b() ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a() ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ldb = g.trans_b() ? k : n;
  const int lda = g.trans_a() ? m : k;
  ASSIGN_OR_RETURN(const CublasApi* blas, LoadCublas());
  return CublasStatus(
      blas->gemm_ex(handle, op_b, op_a, n, m, k, alpha_ptr, b, type, ldb, a,
                    type, lda, beta_ptr, c, type, n, compute,
                    CUBLAS_GEMM_DEFAULT),
      absl::StrCat("cublasGemmEx m=", m, " n=", n, " k=", k, " ",
                   DTypeName(dtype)));
}

absl::Status CheckElements(const Dense& operand, const std::string& what,
                           int64_t expected, const std::string& shape,
                           const v1::GemmAttrs& g) {
  const int64_t found = NumElements(operand.box);
  if (found == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "gemm m=", g.m(), " n=", g.n(), " k=", g.k(), ": ", what, " (", shape,
      ") needs ", expected, " elements, its slice ", BoxToString(operand.box),
      " has ", found));
}

absl::Status EnqueueGemm(const StepDesc& step,
                         const DeviceRelayEnvironment& env,
                         const DeviceLane& lane,
                         absl::Span<const cudaEvent_t> waits,
                         const StepEvents& events) {
  const v1::GemmAttrs& g = step.compute.gemm();
  if (step.inputs.size() != 2 || step.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm needs inputs [A, B] and outputs [C], has ", step.inputs.size(),
        " inputs and ", step.outputs.size(), " outputs"));
  }
  constexpr int64_t kMaxDim = std::numeric_limits<int>::max();
  if (g.m() < 0 || g.n() < 0 || g.k() < 0 || g.m() > kMaxDim ||
      g.n() > kMaxDim || g.k() > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm m=", g.m(), " n=", g.n(), " k=", g.k(),
                     ": every dimension must be in [0, ", kMaxDim, "]"));
  }
  ASSIGN_OR_RETURN(const int gpu, StepPrimaryGpu(step, env));
  if (lane.blas == nullptr) {
    return absl::InternalError("the lane has no cuBLAS handles");
  }
  ASSIGN_OR_RETURN(StepStream s, StepStream::Begin(lane, gpu, waits, events));
  ASSIGN_OR_RETURN(const Dense a,
                   MakeDense(step.inputs[0], env, "inputs[0] (A)", true, s));
  ASSIGN_OR_RETURN(const Dense b,
                   MakeDense(step.inputs[1], env, "inputs[1] (B)", true, s));
  ASSIGN_OR_RETURN(const Dense c, MakeDense(step.outputs[0], env,
                                            "outputs[0] (C)", g.accumulate(),
                                            s));
  const DType dtype = c.tile->dtype();
  if (a.tile->dtype() != dtype || b.tile->dtype() != dtype) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gemm operands must share one dtype: A is ", DTypeName(a.tile->dtype()),
        ", B ", DTypeName(b.tile->dtype()), ", C ", DTypeName(dtype)));
  }
  RETURN_IF_ERROR(CheckElements(a, "A", g.m() * g.k(),
                                g.trans_a() ? "k x m" : "m x k", g));
  RETURN_IF_ERROR(CheckElements(b, "B", g.k() * g.n(),
                                g.trans_b() ? "n x k" : "k x n", g));
  RETURN_IF_ERROR(CheckElements(c, "C", g.m() * g.n(), "m x n", g));
  RETURN_IF_ERROR(GemmTypesOf(dtype).status());

  const int m = static_cast<int>(g.m()), n = static_cast<int>(g.n()),
            k = static_cast<int>(g.k());
  if (m > 0 && n > 0) {
    if (k == 0) {
      // alpha * (empty sum): C stays when accumulating, else zeros.
      if (!g.accumulate()) {
        ScopedCudaDevice on(gpu);
        RETURN_IF_ERROR(on.status());
        RETURN_IF_ERROR(CudaStatus(
            cudaMemsetAsync(c.data, 0,
                            int64_t{m} * n * c.tile->element_size(),
                            s.stream()),
            "zeroing C"));
      }
    } else {
      ASSIGN_OR_RETURN(cublasHandle_t handle, lane.blas->Get(gpu, s.stream()));
      RETURN_IF_ERROR(CallGemm(handle, gpu, g, dtype, a.data, b.data, c.data));
    }
  }
  if (c.staged) {
    RETURN_IF_ERROR(UnpackRegion(c.data, gpu, c.box, *c.tile, s));
  }
  return s.End();
}

absl::Status EnqueueElementwise(const StepDesc& step,
                                const DeviceRelayEnvironment& env,
                                const DeviceLane& lane,
                                absl::Span<const cudaEvent_t> waits,
                                const StepEvents& events) {
  const v1::ElementwiseAttrs& attrs = step.compute.elementwise();
  const size_t inputs = ElementwiseInputs(attrs.kind());
  if (inputs == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("elementwise kind ", static_cast<int>(attrs.kind()),
                     " is unknown; allowed: ", kElementwiseKinds));
  }
  const char* name = ElementwiseName(attrs.kind());
  if (step.inputs.size() != inputs || step.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "elementwise ", name, " needs ", inputs, " inputs and 1 output, has ",
        step.inputs.size(), " and ", step.outputs.size()));
  }
  ASSIGN_OR_RETURN(const int gpu, StepPrimaryGpu(step, env));
  ASSIGN_OR_RETURN(StepStream s, StepStream::Begin(lane, gpu, waits, events));
  std::vector<Dense> in;
  for (size_t i = 0; i < inputs; ++i) {
    ASSIGN_OR_RETURN(Dense operand,
                     MakeDense(step.inputs[i], env,
                               absl::StrCat("inputs[", i, "]"), true, s));
    in.push_back(operand);
  }
  ASSIGN_OR_RETURN(const Dense out,
                   MakeDense(step.outputs[0], env, "outputs[0]", false, s));
  const DType dtype = out.tile->dtype();
  const int64_t count = NumElements(out.box);
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].tile->dtype() != dtype || NumElements(in[i].box) != count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "elementwise ", name, ": inputs[", i, "] is ",
          NumElements(in[i].box), " ", DTypeName(in[i].tile->dtype()),
          " elements, the output ", count, " ", DTypeName(dtype),
          "; operands must match"));
    }
  }
  if (ElementwiseNeedsFloat(attrs.kind()) && IsIntegerDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "elementwise ", name, " on ", DTypeName(dtype),
        " is not defined; allowed dtypes: float16, bfloat16, float32, "
        "float64"));
  }
  {
    ScopedCudaDevice on(gpu);
    RETURN_IF_ERROR(on.status());
    const PatternType type = ToPatternType(dtype);
    cudaError_t launched = cudaSuccess;
    switch (attrs.kind()) {
      case v1::ElementwiseAttrs::KIND_ADD:
        launched = LaunchAdd(type, in[0].data, in[1].data, out.data, count,
                             s.stream());
        break;
      case v1::ElementwiseAttrs::KIND_RELU:
        launched = LaunchRelu(type, in[0].data, out.data, count, s.stream());
        break;
      case v1::ElementwiseAttrs::KIND_SIGMOID:
        launched = LaunchSigmoid(type, in[0].data, out.data, count, s.stream());
        break;
      case v1::ElementwiseAttrs::KIND_RELU_GRAD:
        launched = LaunchReluGrad(type, in[0].data, in[1].data, out.data, count,
                                  s.stream());
        break;
      case v1::ElementwiseAttrs::KIND_SIGMOID_GRAD:
        launched = LaunchSigmoidGrad(type, in[0].data, in[1].data, out.data,
                                     count, s.stream());
        break;
      default:
        launched = LaunchScale(type, attrs.alpha(), in[0].data, out.data, count,
                               s.stream());
        break;
    }
    RETURN_IF_ERROR(CudaStatus(
        launched, absl::StrCat("launching the elementwise ", name, " kernel")));
  }
  if (out.staged) {
    RETURN_IF_ERROR(UnpackRegion(out.data, gpu, out.box, *out.tile, s));
  }
  return s.End();
}

// True if the two operands share bytes of one tile.
// The dtype an attention op runs in: its operands' one dtype (named in
// order, the output last), FAILED_PRECONDITION when they differ ("<op>
// operands must share one dtype: Q is float32, K float16, ..."),
// INVALID_ARGUMENT for an integer dtype.
absl::StatusOr<DType> AttentionDType(
    absl::string_view op,
    const std::vector<std::pair<const char*, const Dense*>>& operands) {
  const DType dtype = operands.back().second->tile->dtype();
  bool same = true;
  for (const auto& [name, dense] : operands) {
    same = same && dense->tile->dtype() == dtype;
  }
  if (!same) {
    std::string listing;
    for (const auto& [name, dense] : operands) {
      absl::StrAppend(&listing, listing.empty() ? "" : ", ", name,
                      listing.empty() ? " is " : " ",
                      DTypeName(dense->tile->dtype()));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        op, " operands must share one dtype: ", listing));
  }
  if (IsIntegerDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, " on ", DTypeName(dtype),
        " is not defined; allowed dtypes: float16, bfloat16, float32, "
        "float64"));
  }
  return dtype;
}

bool SharesBytes(const Dense& a, const Dense& b) {
  return a.tile == b.tile && !IsEmpty(Intersect(a.box, b.box));
}

absl::Status EnqueueGather(const StepDesc& step,
                           const DeviceRelayEnvironment& env,
                           const DeviceLane& lane,
                           absl::Span<const cudaEvent_t> waits,
                           const StepEvents& events) {
  const v1::GatherAttrs& g = step.compute.gather();
  if (step.inputs.empty() || step.inputs.size() > 2 ||
      step.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gather needs inputs [X] or [X, W] and outputs [Y], has ",
        step.inputs.size(), " inputs and ", step.outputs.size(), " outputs"));
  }
  const bool weighted = step.inputs.size() == 2;
  ASSIGN_OR_RETURN(const int gpu, StepPrimaryGpu(step, env));
  ASSIGN_OR_RETURN(StepStream s, StepStream::Begin(lane, gpu, waits, events));
  ASSIGN_OR_RETURN(const Dense x,
                   MakeDense(step.inputs[0], env, "inputs[0] (X)", true, s));
  Dense w;
  if (weighted) {
    ASSIGN_OR_RETURN(w,
                     MakeDense(step.inputs[1], env, "inputs[1] (W)", true, s));
  }
  ASSIGN_OR_RETURN(Dense y,
                   MakeDense(step.outputs[0], env, "outputs[0] (Y)", false, s));
  const DType dtype = y.tile->dtype();
  if (x.tile->dtype() != dtype || (weighted && w.tile->dtype() != dtype)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gather operands must share one dtype: X is ",
        DTypeName(x.tile->dtype()), weighted ? ", W " : "",
        weighted ? DTypeName(w.tile->dtype()) : "", ", Y ", DTypeName(dtype)));
  }
  RETURN_IF_ERROR(CheckGather(g, NumElements(x.box),
                              weighted ? NumElements(w.box) : -1,
                              NumElements(y.box)));
  if (weighted && IsIntegerDType(dtype)) {
    return absl::UnimplementedError(absl::StrCat(
        "gather with weights on ", DTypeName(dtype),
        " is not supported; allowed: float16, bfloat16, float32, float64 "
        "(integer dtypes gather without W)"));
  }
  // Rows are read while others are written: a Y that shares bytes with X or
  // W is gathered into staging and copied over afterwards, so X is read as
  // it was before the step (compute.h).
  if (!y.staged && (SharesBytes(y, x) || (weighted && SharesBytes(y, w)))) {
    ASSIGN_OR_RETURN(y.data,
                     s.Allocate(NumElements(y.box) * y.tile->element_size()));
    y.staged = true;
  }
  const int64_t rows_y = NumElements(y.box) / g.row();
  if (rows_y > 0) {
    // The index list, to the GPU on the step's stream. The host copy is the
    // program's, alive for the whole run; a pageable source is staged by
    // the driver before cudaMemcpyAsync returns.
    const size_t index_bytes = sizeof(int64_t) * g.index_size();
    ASSIGN_OR_RETURN(uint8_t* index, s.Allocate(index_bytes));
    ScopedCudaDevice on(gpu);
    RETURN_IF_ERROR(on.status());
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(index, g.index().data(), index_bytes,
                                   cudaMemcpyHostToDevice, s.stream()),
                   "copying the gather index to the GPU"));
    RETURN_IF_ERROR(CudaStatus(
        LaunchGather(ToPatternType(dtype), x.data, weighted ? w.data : nullptr,
                     reinterpret_cast<const int64_t*>(index), g.row(),
                     GatherK(g), rows_y, y.data, s.stream()),
        "launching the gather kernel"));
  }
  if (y.staged) {
    RETURN_IF_ERROR(UnpackRegion(y.data, gpu, y.box, *y.tile, s));
  }
  return s.End();
}

absl::Status EnqueueRowDot(const StepDesc& step,
                           const DeviceRelayEnvironment& env,
                           const DeviceLane& lane,
                           absl::Span<const cudaEvent_t> waits,
                           const StepEvents& events) {
  const v1::RowDotAttrs& r = step.compute.row_dot();
  if (step.inputs.size() != 2 || step.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row_dot needs inputs [A, B] and outputs [D], has ", step.inputs.size(),
        " inputs and ", step.outputs.size(), " outputs"));
  }
  ASSIGN_OR_RETURN(const int gpu, StepPrimaryGpu(step, env));
  ASSIGN_OR_RETURN(StepStream s, StepStream::Begin(lane, gpu, waits, events));
  ASSIGN_OR_RETURN(const Dense a,
                   MakeDense(step.inputs[0], env, "inputs[0] (A)", true, s));
  ASSIGN_OR_RETURN(const Dense b,
                   MakeDense(step.inputs[1], env, "inputs[1] (B)", true, s));
  ASSIGN_OR_RETURN(Dense d,
                   MakeDense(step.outputs[0], env, "outputs[0] (D)", false, s));
  const DType dtype = d.tile->dtype();
  if (a.tile->dtype() != dtype || b.tile->dtype() != dtype) {
    return absl::FailedPreconditionError(
        absl::StrCat("row_dot operands must share one dtype: A is ",
                     DTypeName(a.tile->dtype()), ", B ",
                     DTypeName(b.tile->dtype()), ", D ", DTypeName(dtype)));
  }
  if (IsIntegerDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row_dot on ", DTypeName(dtype),
        " is not defined; allowed dtypes: float16, bfloat16, float32, "
        "float64"));
  }
  const int64_t count = NumElements(d.box);
  RETURN_IF_ERROR(
      CheckRowDot(r, NumElements(a.box), NumElements(b.box), count));
  // A D that shares bytes with A or B is computed into staging and copied
  // over afterwards, so A and B are read as they were before the step.
  if (!d.staged && (SharesBytes(d, a) || SharesBytes(d, b))) {
    ASSIGN_OR_RETURN(d.data, s.Allocate(count * d.tile->element_size()));
    d.staged = true;
  }
  if (count > 0) {
    // The index list, to the GPU on the step's stream (see EnqueueGather).
    const size_t index_bytes = sizeof(int64_t) * r.index_size();
    ASSIGN_OR_RETURN(uint8_t* index, s.Allocate(index_bytes));
    ScopedCudaDevice on(gpu);
    RETURN_IF_ERROR(on.status());
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(index, r.index().data(), index_bytes,
                                   cudaMemcpyHostToDevice, s.stream()),
                   "copying the row_dot index to the GPU"));
    RETURN_IF_ERROR(
        CudaStatus(LaunchRowDot(ToPatternType(dtype), a.data, b.data,
                                reinterpret_cast<const int64_t*>(index),
                                r.row(), count, d.data, s.stream()),
                   "launching the row_dot kernel"));
  }
  if (d.staged) {
    RETURN_IF_ERROR(UnpackRegion(d.data, gpu, d.box, *d.tile, s));
  }
  return s.End();
}

absl::Status EnqueueAttentionBlock(const StepDesc& step,
                                   const DeviceRelayEnvironment& env,
                                   const DeviceLane& lane,
                                   absl::Span<const cudaEvent_t> waits,
                                   const StepEvents& events) {
  const v1::AttentionBlockAttrs& a = step.compute.attention_block();
  if (step.inputs.size() < 3 || step.inputs.size() > 4 ||
      step.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention_block needs inputs [Q, K, V] or [Q, K, V, S] and outputs "
        "[S'], has ",
        step.inputs.size(), " inputs and ", step.outputs.size(), " outputs"));
  }
  const bool has_state = step.inputs.size() == 4;
  ASSIGN_OR_RETURN(const int gpu, StepPrimaryGpu(step, env));
  ASSIGN_OR_RETURN(StepStream s, StepStream::Begin(lane, gpu, waits, events));
  ASSIGN_OR_RETURN(const Dense q,
                   MakeDense(step.inputs[0], env, "inputs[0] (Q)", true, s));
  ASSIGN_OR_RETURN(const Dense k,
                   MakeDense(step.inputs[1], env, "inputs[1] (K)", true, s));
  ASSIGN_OR_RETURN(const Dense v,
                   MakeDense(step.inputs[2], env, "inputs[2] (V)", true, s));
  Dense state;
  if (has_state) {
    ASSIGN_OR_RETURN(state,
                     MakeDense(step.inputs[3], env, "inputs[3] (S)", true, s));
  }
  ASSIGN_OR_RETURN(Dense out, MakeDense(step.outputs[0], env,
                                        "outputs[0] (S')", false, s));
  std::vector<std::pair<const char*, const Dense*>> operands = {
      {"Q", &q}, {"K", &k}, {"V", &v}};
  if (has_state) operands.push_back({"S", &state});
  operands.push_back({"S'", &out});
  ASSIGN_OR_RETURN(const DType dtype,
                   AttentionDType("attention_block", operands));
  RETURN_IF_ERROR(CheckAttentionBlock(
      a, NumElements(q.box), NumElements(k.box), NumElements(v.box),
      has_state ? NumElements(state.box) : -1, NumElements(out.box)));
  // S' may be S itself (the same bytes: each row's state is read before it
  // is written); an S' that shares bytes with Q, K or V, or with S
  // otherwise, is computed into staging and copied over afterwards.
  const bool exact_alias = has_state && !state.staged &&
                           state.tile == out.tile && state.box == out.box;
  if (!out.staged &&
      (SharesBytes(out, q) || SharesBytes(out, k) || SharesBytes(out, v) ||
       (has_state && !exact_alias && SharesBytes(out, state)))) {
    ASSIGN_OR_RETURN(out.data, s.Allocate(NumElements(out.box) *
                                          out.tile->element_size()));
    out.staged = true;
  }
  AttentionBlockShape shape;
  shape.batch = a.batch();
  shape.heads = a.heads();
  shape.kv_heads = a.kv_heads();
  shape.q_rows = a.q_rows();
  shape.kv_rows = a.kv_rows();
  shape.head_dim = a.head_dim();
  shape.scale = AttentionScale(a);
  shape.causal = a.causal();
  const PatternType type = ToPatternType(dtype);
  ASSIGN_OR_RETURN(uint8_t* scratch,
                   s.Allocate(AttentionBlockScratchBytes(type, shape)));
  {
    ScopedCudaDevice on(gpu);
    RETURN_IF_ERROR(on.status());
    const int64_t* q_pos = nullptr;
    const int64_t* kv_pos = nullptr;
    if (a.causal()) {
      // The positions, to the GPU on the step's stream (see EnqueueGather).
      const size_t q_bytes = sizeof(int64_t) * a.q_position_size();
      const size_t kv_bytes = sizeof(int64_t) * a.kv_position_size();
      ASSIGN_OR_RETURN(uint8_t* positions, s.Allocate(q_bytes + kv_bytes));
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(positions, a.q_position().data(), q_bytes,
                          cudaMemcpyHostToDevice, s.stream()),
          "copying attention_block.q_position to the GPU"));
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(positions + q_bytes, a.kv_position().data(),
                          kv_bytes, cudaMemcpyHostToDevice, s.stream()),
          "copying attention_block.kv_position to the GPU"));
      q_pos = reinterpret_cast<const int64_t*>(positions);
      kv_pos = reinterpret_cast<const int64_t*>(positions + q_bytes);
    }
    RETURN_IF_ERROR(CudaStatus(
        LaunchAttentionBlock(type, shape, q.data, k.data, v.data,
                             has_state ? state.data : nullptr, out.data, q_pos,
                             kv_pos, scratch, s.stream()),
        "launching the attention_block kernel"));
  }
  if (out.staged) {
    RETURN_IF_ERROR(UnpackRegion(out.data, gpu, out.box, *out.tile, s));
  }
  return s.End();
}

absl::Status EnqueueAttentionFinish(const StepDesc& step,
                                    const DeviceRelayEnvironment& env,
                                    const DeviceLane& lane,
                                    absl::Span<const cudaEvent_t> waits,
                                    const StepEvents& events) {
  const v1::AttentionFinishAttrs& f = step.compute.attention_finish();
  if (step.inputs.size() != 1 || step.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention_finish needs inputs [S] and outputs [O], has ",
        step.inputs.size(), " inputs and ", step.outputs.size(), " outputs"));
  }
  ASSIGN_OR_RETURN(const int gpu, StepPrimaryGpu(step, env));
  ASSIGN_OR_RETURN(StepStream s, StepStream::Begin(lane, gpu, waits, events));
  ASSIGN_OR_RETURN(const Dense state,
                   MakeDense(step.inputs[0], env, "inputs[0] (S)", true, s));
  ASSIGN_OR_RETURN(Dense out,
                   MakeDense(step.outputs[0], env, "outputs[0] (O)", false, s));
  ASSIGN_OR_RETURN(const DType dtype,
                   AttentionDType("attention_finish",
                                  {{"S", &state}, {"O", &out}}));
  RETURN_IF_ERROR(CheckAttentionFinish(f, NumElements(state.box),
                                       NumElements(out.box)));
  // An O that shares bytes with S is computed into staging first.
  if (!out.staged && SharesBytes(out, state)) {
    ASSIGN_OR_RETURN(out.data, s.Allocate(NumElements(out.box) *
                                          out.tile->element_size()));
    out.staged = true;
  }
  const int64_t rows = NumElements(state.box) / (f.head_dim() + 2);
  {
    ScopedCudaDevice on(gpu);
    RETURN_IF_ERROR(on.status());
    RETURN_IF_ERROR(CudaStatus(
        LaunchAttentionFinish(ToPatternType(dtype), state.data, out.data, rows,
                              f.head_dim(), s.stream()),
        "launching the attention_finish kernel"));
  }
  if (out.staged) {
    RETURN_IF_ERROR(UnpackRegion(out.data, gpu, out.box, *out.tile, s));
  }
  return s.End();
}

absl::Status EnqueueAttentionBackward(const StepDesc& step,
                                      const DeviceRelayEnvironment& env,
                                      const DeviceLane& lane,
                                      absl::Span<const cudaEvent_t> waits,
                                      const StepEvents& events) {
  const v1::AttentionBackwardAttrs& g = step.compute.attention_backward();
  const v1::AttentionBlockAttrs& a = g.block();
  if (step.inputs.size() != 6 || step.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention_backward needs inputs [Q, K, V, dO, O, S] and outputs [dQ] "
        "or [dKV], has ",
        step.inputs.size(), " inputs and ", step.outputs.size(), " outputs"));
  }
  const bool dkv = g.target() == v1::AttentionBackwardAttrs::TARGET_DKV;
  ASSIGN_OR_RETURN(const int gpu, StepPrimaryGpu(step, env));
  ASSIGN_OR_RETURN(StepStream s, StepStream::Begin(lane, gpu, waits, events));
  ASSIGN_OR_RETURN(const Dense q,
                   MakeDense(step.inputs[0], env, "inputs[0] (Q)", true, s));
  ASSIGN_OR_RETURN(const Dense k,
                   MakeDense(step.inputs[1], env, "inputs[1] (K)", true, s));
  ASSIGN_OR_RETURN(const Dense v,
                   MakeDense(step.inputs[2], env, "inputs[2] (V)", true, s));
  ASSIGN_OR_RETURN(const Dense dout,
                   MakeDense(step.inputs[3], env, "inputs[3] (dO)", true, s));
  ASSIGN_OR_RETURN(const Dense o,
                   MakeDense(step.inputs[4], env, "inputs[4] (O)", true, s));
  ASSIGN_OR_RETURN(const Dense state,
                   MakeDense(step.inputs[5], env, "inputs[5] (S)", true, s));
  // The output is read when accumulating (as a GEMM's C).
  ASSIGN_OR_RETURN(Dense out,
                   MakeDense(step.outputs[0], env,
                             dkv ? "outputs[0] (dKV)" : "outputs[0] (dQ)",
                             g.accumulate(), s));
  ASSIGN_OR_RETURN(
      const DType dtype,
      AttentionDType("attention_backward",
                     {{"Q", &q}, {"K", &k}, {"V", &v}, {"dO", &dout},
                      {"O", &o}, {"S", &state}, {dkv ? "dKV" : "dQ", &out}}));
  RETURN_IF_ERROR(CheckAttentionBackward(
      g, NumElements(q.box), NumElements(k.box), NumElements(v.box),
      NumElements(dout.box), NumElements(o.box), NumElements(state.box),
      NumElements(out.box)));
  // An output that shares bytes with an input is computed into staging
  // (holding its old value when accumulating) and copied over afterwards,
  // so the inputs are read as they were before the step.
  const int64_t out_bytes = NumElements(out.box) * out.tile->element_size();
  if (!out.staged && (SharesBytes(out, q) || SharesBytes(out, k) ||
                      SharesBytes(out, v) || SharesBytes(out, dout) ||
                      SharesBytes(out, o) || SharesBytes(out, state))) {
    ASSIGN_OR_RETURN(uint8_t * staging, s.Allocate(out_bytes));
    if (g.accumulate()) {
      RETURN_IF_ERROR(CopyBytes(staging, gpu, out.data, gpu, out_bytes, s));
    }
    out.data = staging;
    out.staged = true;
  }
  AttentionBackwardShape shape;
  shape.block.batch = a.batch();
  shape.block.heads = a.heads();
  shape.block.kv_heads = a.kv_heads();
  shape.block.q_rows = a.q_rows();
  shape.block.kv_rows = a.kv_rows();
  shape.block.head_dim = a.head_dim();
  shape.block.scale = AttentionScale(a);
  shape.block.causal = a.causal();
  shape.dkv = dkv;
  shape.accumulate = g.accumulate();
  const PatternType type = ToPatternType(dtype);
  ASSIGN_OR_RETURN(uint8_t * scratch,
                   s.Allocate(AttentionBackwardScratchBytes(type, shape)));
  {
    ScopedCudaDevice on(gpu);
    RETURN_IF_ERROR(on.status());
    const int64_t* q_pos = nullptr;
    const int64_t* kv_pos = nullptr;
    if (a.causal()) {
      // The positions, to the GPU on the step's stream (see EnqueueGather).
      const size_t q_bytes = sizeof(int64_t) * a.q_position_size();
      const size_t kv_bytes = sizeof(int64_t) * a.kv_position_size();
      ASSIGN_OR_RETURN(uint8_t * positions, s.Allocate(q_bytes + kv_bytes));
      RETURN_IF_ERROR(
          CudaStatus(cudaMemcpyAsync(positions, a.q_position().data(), q_bytes,
                                     cudaMemcpyHostToDevice, s.stream()),
                     "copying attention_backward.block.q_position to the GPU"));
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(positions + q_bytes, a.kv_position().data(), kv_bytes,
                          cudaMemcpyHostToDevice, s.stream()),
          "copying attention_backward.block.kv_position to the GPU"));
      q_pos = reinterpret_cast<const int64_t*>(positions);
      kv_pos = reinterpret_cast<const int64_t*>(positions + q_bytes);
    }
    RETURN_IF_ERROR(CudaStatus(
        LaunchAttentionBackward(type, shape, q.data, k.data, v.data, dout.data,
                                o.data, state.data, out.data, q_pos, kv_pos,
                                scratch, s.stream()),
        "launching the attention_backward kernel"));
  }
  if (out.staged) {
    RETURN_IF_ERROR(UnpackRegion(out.data, gpu, out.box, *out.tile, s));
  }
  return s.End();
}

}  // namespace

absl::Status WarmUpGemms(const ParsedProgram& program,
                         const DeviceRelayEnvironment& env,
                         std::vector<DeviceLane>& lanes) {
  if (lanes.empty()) return absl::OkStatus();
  // One warm-up per (lane, GPU, dtype, shape, flags): the shape picks the
  // kernel, and each lane has its own handle.
  absl::flat_hash_set<std::string> done;
  std::vector<std::pair<int, cudaStream_t>> used;  // (GPU, stream) to sync
  for (const StepDesc& step : program.steps) {
    if (step.op != v1::Step::OP_COMPUTE || !step.compute.has_gemm() ||
        step.outputs.size() != 1 || !program.IsLocal(step.device)) {
      continue;
    }
    const v1::GemmAttrs& g = step.compute.gemm();
    const DeviceTile* c = env.buffers->ById(step.outputs[0].buffer);
    if (c == nullptr || g.m() <= 0 || g.n() <= 0 || g.k() <= 0) continue;
    const int64_t elements = g.m() * g.k() + g.k() * g.n() + g.m() * g.n();
    const int64_t bytes = elements * c->element_size();
    if (!GemmTypesOf(c->dtype()).ok() || bytes > kMaxGemmWarmUpBytes ||
        g.m() > std::numeric_limits<int>::max() ||
        g.n() > std::numeric_limits<int>::max() ||
        g.k() > std::numeric_limits<int>::max()) {
      continue;  // the step itself reports what is wrong
    }
    DeviceLane& lane = lanes[step.id % lanes.size()];
    const int gpu = env.buffers->GpuOf(step.device);
    auto stream = lane.streams.find(gpu);
    if (stream == lane.streams.end()) continue;
    const std::string key = absl::StrCat(
        lane.index, "/", gpu, "/", DTypeName(c->dtype()), "/", g.m(), "x",
        g.n(), "x", g.k(), "/", g.trans_a(), g.trans_b(), g.accumulate());
    if (!done.insert(key).second) continue;
    ASSIGN_OR_RETURN(cublasHandle_t handle,
                     lane.blas->Get(gpu, stream->second));
    ScopedCudaDevice on(gpu);
    RETURN_IF_ERROR(on.status());
    void* scratch = nullptr;
    RETURN_IF_ERROR(CudaStatus(
        cudaMallocAsync(&scratch, bytes, stream->second),
        absl::StrCat("allocating ", bytes, " bytes to warm a GEMM up")));
    uint8_t* const a = static_cast<uint8_t*>(scratch);
    uint8_t* const b = a + g.m() * g.k() * c->element_size();
    uint8_t* const out = b + g.k() * g.n() * c->element_size();
    absl::Status status = CudaStatus(
        cudaMemsetAsync(scratch, 0, bytes, stream->second), "zeroing");
    if (status.ok()) status = CallGemm(handle, gpu, g, c->dtype(), a, b, out);
    status.Update(CudaStatus(cudaFreeAsync(scratch, stream->second),
                             "freeing the warm-up scratch"));
    RETURN_IF_ERROR(status);
    used.emplace_back(gpu, stream->second);
  }
  for (const auto& [gpu, stream] : used) {
    ScopedCudaDevice on(gpu);
    RETURN_IF_ERROR(on.status());
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream),
                               "waiting for the GEMM warm-ups"));
  }
  return absl::OkStatus();
}

absl::Status EnqueueCompute(const StepDesc& step,
                            const DeviceRelayEnvironment& env,
                            const DeviceLane& lane,
                            absl::Span<const cudaEvent_t> waits,
                            const StepEvents& events) {
  switch (step.compute.op_case()) {
    case v1::ComputeAttrs::kGemm:
      return EnqueueGemm(step, env, lane, waits, events);
    case v1::ComputeAttrs::kElementwise:
      return EnqueueElementwise(step, env, lane, waits, events);
    case v1::ComputeAttrs::kGather:
      return EnqueueGather(step, env, lane, waits, events);
    case v1::ComputeAttrs::kRowDot:
      return EnqueueRowDot(step, env, lane, waits, events);
    case v1::ComputeAttrs::kAttentionBlock:
      return EnqueueAttentionBlock(step, env, lane, waits, events);
    case v1::ComputeAttrs::kAttentionFinish:
      return EnqueueAttentionFinish(step, env, lane, waits, events);
    case v1::ComputeAttrs::kAttentionBackward:
      return EnqueueAttentionBackward(step, env, lane, waits, events);
    default:
      return absl::InvalidArgumentError(
          "compute names no op; allowed: gemm, elementwise, gather, row_dot, "
          "attention_block, attention_finish, attention_backward");
  }
}

}  // namespace meshcast::worker::cuda
