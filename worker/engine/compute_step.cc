#include "worker/engine/compute_step.h"

#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "worker/kernels/attention.h"
#include "worker/kernels/compute.h"

namespace meshcast::worker {
namespace {

// A dense view of one operand: the tile's own bytes when the operand's
// elements are one contiguous run of it (the whole tile, a slab of whole
// rows: a micro-batch's rows, a chunk of a GEMM's output), else a packed
// copy, unpacked into the tile after the step for an output.
struct Dense {
  TileBuffer* tile = nullptr;
  Box box;
  StagingBuffer copy;        // from the worker's staging pool
  absl::Span<uint8_t> view;  // the tile's bytes; empty: `copy` holds them
  bool in_place() const { return view.data() != nullptr; }

  absl::Span<uint8_t> bytes() { return in_place() ? view : copy.span(); }
  // Switches to a packed copy (loaded from the tile when `load`).
  absl::Status UseCopy(StagingPool& pool, bool load) {
    view = {};
    const int64_t elements = NumElements(box);
    copy = pool.Take(elements * tile->element_size());
    if (!load) {
      // Zeros, as a fresh copy had: a kernel may leave elements unwritten.
      std::memset(copy.data(), 0, copy.size());
      return absl::OkStatus();
    }
    return tile->PackSlice(box, 0, elements, copy.span());
  }
};

absl::StatusOr<Dense> DenseOf(const StepEnvironment& env,
                              const OperandDesc& operand,
                              absl::string_view what, int index, DType dtype,
                              bool load) {
  Dense dense;
  dense.tile = env.buffers->ById(operand.buffer);
  if (dense.tile == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, "[", index, "]: buffer ", operand.buffer,
                     " has no tile on this worker"));
  }
  if (dense.tile->dtype() != dtype) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, "[", index, "] (buffer ", operand.buffer, ") is ",
        DTypeName(dense.tile->dtype()), "; the output is ", DTypeName(dtype)));
  }
  dense.box = operand.box;
  if (std::optional<absl::Span<uint8_t>> run =
          dense.tile->ContiguousBytes(operand.box)) {
    dense.view = *run;  // the whole tile included
  } else {
    RETURN_IF_ERROR(dense.UseCopy(env.staging_pool(), load));
  }
  return dense;
}

}  // namespace

absl::Status RunCompute(const StepDesc& step, const StepEnvironment& env) {
  RETURN_IF_ERROR(env.cancellation->status());
  const OperandDesc& output = step.outputs[0];
  TileBuffer* out_tile = env.buffers->ById(output.buffer);
  if (out_tile == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "outputs[0]: buffer ", output.buffer, " has no tile on this worker"));
  }
  const DType dtype = out_tile->dtype();
  std::vector<Dense> inputs;
  for (size_t i = 0; i < step.inputs.size(); ++i) {
    ASSIGN_OR_RETURN(inputs.emplace_back(),
                     DenseOf(env, step.inputs[i], "inputs", i, dtype, true));
  }
  // GEMM and attention backward with accumulate read their output;
  // everything else only writes it.
  const bool reads_output =
      (step.compute.has_gemm() && step.compute.gemm().accumulate()) ||
      (step.compute.has_attention_backward() &&
       step.compute.attention_backward().accumulate());
  ASSIGN_OR_RETURN(Dense out,
                   DenseOf(env, output, "outputs", 0, dtype, reads_output));
  // An output viewed in its tile may overlap an input's view. The GEMM
  // takes no overlap and an elementwise op only an exact alias (in place):
  // those compute into a copy. The other kernels handle overlaps
  // themselves (compute.h, attention.h).
  if (out.in_place() &&
      (step.compute.has_gemm() || step.compute.has_elementwise())) {
    for (Dense& input : inputs) {
      const bool exact = input.bytes().data() == out.bytes().data() &&
                         input.bytes().size() == out.bytes().size();
      if (Overlaps(input.bytes(), out.bytes()) &&
          (step.compute.has_gemm() || !exact)) {
        RETURN_IF_ERROR(out.UseCopy(env.staging_pool(), reads_output));
        break;
      }
    }
  }
  if (step.compute.has_gemm()) {
    RETURN_IF_ERROR(RunGemm(step.compute.gemm(), dtype, inputs[0].bytes(),
                            inputs[1].bytes(), out.bytes()));
  } else if (step.compute.has_gather()) {
    // inputs [X] or [X, W] (ParseProgram checked the count).
    if (inputs.empty() || inputs.size() > 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gather takes inputs [X] or [X, W], got ", inputs.size()));
    }
    const absl::Span<const uint8_t> w =
        inputs.size() == 2 ? absl::Span<const uint8_t>(inputs[1].bytes())
                           : absl::Span<const uint8_t>();
    RETURN_IF_ERROR(RunGather(step.compute.gather(), dtype, inputs[0].bytes(),
                              w, out.bytes()));
  } else if (step.compute.has_row_dot()) {
    // inputs [A, B] (ParseProgram checked the count).
    if (inputs.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("row_dot takes inputs [A, B], got ", inputs.size()));
    }
    RETURN_IF_ERROR(RunRowDot(step.compute.row_dot(), dtype, inputs[0].bytes(),
                              inputs[1].bytes(), out.bytes()));
  } else if (step.compute.has_attention_block()) {
    // inputs [Q, K, V] or [Q, K, V, S] (ParseProgram checked the count). An
    // S that is its whole tile, as S' is, shares its bytes with S': the
    // kernel updates the state in place.
    if (inputs.size() < 3 || inputs.size() > 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attention_block takes inputs [Q, K, V] or [Q, K, V, S], got ",
          inputs.size()));
    }
    const absl::Span<const uint8_t> state =
        inputs.size() == 4 ? absl::Span<const uint8_t>(inputs[3].bytes())
                           : absl::Span<const uint8_t>();
    RETURN_IF_ERROR(RunAttentionBlock(step.compute.attention_block(), dtype,
                                      inputs[0].bytes(), inputs[1].bytes(),
                                      inputs[2].bytes(), state, out.bytes()));
  } else if (step.compute.has_attention_backward()) {
    // inputs [Q, K, V, dO, O, S] (ParseProgram checked the count).
    if (inputs.size() != 6) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attention_backward takes inputs [Q, K, V, dO, O, S], got ",
          inputs.size()));
    }
    RETURN_IF_ERROR(RunAttentionBackward(
        step.compute.attention_backward(), dtype, inputs[0].bytes(),
        inputs[1].bytes(), inputs[2].bytes(), inputs[3].bytes(),
        inputs[4].bytes(), inputs[5].bytes(), out.bytes()));
  } else if (step.compute.has_attention_finish()) {
    // inputs [S] (ParseProgram checked the count).
    if (inputs.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attention_finish takes inputs [S], got ", inputs.size()));
    }
    RETURN_IF_ERROR(RunAttentionFinish(step.compute.attention_finish(), dtype,
                                       inputs[0].bytes(), out.bytes()));
  } else {
    std::vector<absl::Span<const uint8_t>> spans;
    for (Dense& input : inputs) spans.push_back(input.bytes());
    RETURN_IF_ERROR(
        RunElementwise(step.compute.elementwise(), dtype, spans, out.bytes()));
  }
  if (!out.in_place()) {
    RETURN_IF_ERROR(out_tile->UnpackSlice(
        output.box, 0, NumElements(output.box), out.copy.span()));
  }
  return absl::OkStatus();
}

}  // namespace meshcast::worker
