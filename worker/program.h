// ParsedProgram: a WorkerProgram (proto) checked and converted to domain
// types, the input of BufferSet and the executor.
//
// ParseProgram enforces docs/dataplane.md: ranks, device → worker rank map,
// tensors and their initializers, this worker's buffers, and the steps it
// takes part in, of every op of the IR (relay chains, collectives, local
// copies, compute), with their operands resolved to (buffer id, box).
// Buffers of other workers' devices and steps that touch no local device may
// be present (the controller includes the steps that define a tensor's
// values so that the worker can compute verification references): they are
// checked loosely, kept aside (`other_buffers`; the whole plan stays in
// `plan`) and never allocated or run. Deps on steps outside the program are
// dropped (the contract says they are ignored); a dependency cycle is an
// error. Every error names the offending field and id. A compute step of
// this worker has its operand count checked by op (gemm and row_dot 2
// inputs, gather 1 or 2, attention_block 3 or 4, attention_finish 1,
// elementwise by kind), RELU / SIGMOID / RELU_GRAD / SIGMOID_GRAD, row_dot
// and attention a floating-point dtype, and a gather, row dot or attention
// step its attributes against its operands' sizes (kernels/compute.h
// CheckGather, CheckRowDot; kernels/attention.h CheckAttentionBlock,
// CheckAttentionFinish), so that a malformed step fails before the job
// starts.
//
//   ASSIGN_OR_RETURN(ParsedProgram program, ParseProgram(request.program()));
//
// Thread safety: a plain value; share it read-only between threads.
#ifndef MESHCAST_WORKER_PROGRAM_H_
#define MESHCAST_WORKER_PROGRAM_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"

namespace meshcast::worker {

// Bounds that keep (step id, hop, chunk) packable into one 64-bit message
// tag (see relay_step.h).
// Step id (1 << 24) - 1 is reserved for control messages (barriers).
inline constexpr int kMaxStepId = (1 << 24) - 2;
inline constexpr int kMaxChainLength = 1 << 12;

// SOURCE: filled with its tensor's initializer before the job. DESTINATION:
// verified after the job; starts as poison when its tensor is only moved,
// as zeros when a step computes it. SCRATCH: zeros, never verified.
enum class BufferRole { kSource, kDestination, kScratch };

struct BufferDesc {
  int id = 0;
  int tensor = 0;
  int device = 0;
  Box box;
  BufferRole role = BufferRole::kSource;
  // A registered user buffer holding the tile (v1::Buffer.user_buffer);
  // empty: the worker's own memory.
  std::string user_buffer;
};

// A step's operand: a region of one buffer. `box` is the operand's slice in
// global tensor coordinates (the buffer's whole box when the slice is
// empty). An operand of another worker's device whose buffer is not in the
// program has tensor = device = -1 and only the slice it was given (maybe
// empty): collectives that need its extent say so.
struct OperandDesc {
  int buffer = -1;  // v1::Buffer id
  int tensor = -1;
  int device = -1;
  Box box;
  bool local = false;  // a buffer of this worker (allocated)
  // The step gave no slice (the whole buffer): the same on every worker, so
  // a collective can decide alike everywhere whether it must learn the
  // extents of other workers' operands.
  bool whole_buffer = false;
  bool known() const { return tensor >= 0; }
};

// One step of any op. Relay ops (OP_BROADCAST, OP_SEND_RECV): chain[0]
// sends `slice` of `tensor` to chain[1], which forwards it to chain[2], and
// so on. OP_SEND_RECV in the operand form (`operand_form`; plan.proto):
// chain[0] sends the region inputs[0] of its buffer to chain[1], which
// writes it into the region outputs[0] of its buffer, element e of one
// region (row-major) to element e of the other; the operands may be of
// different tensors, `tensor` is -1 and `slice` empty. Collectives:
// `chain` is the group in rank order and inputs[r] / outputs[r] belong to
// rank r (plan.proto). OP_LOCAL_COPY and OP_COMPUTE have no group; `device`
// is the device that runs them.
struct StepDesc {
  int id = 0;
  int tensor = 0;
  Box slice;
  std::vector<int> chain;  // global device ids, rank order of the group
  // Relay steps: parents[p] is the chain position that forwards to position
  // p (parents[0] = -1, parents[p] < p); a chain has parents[p] = p - 1.
  // Always filled for OP_BROADCAST and OP_SEND_RECV; empty for other ops.
  std::vector<int> parents;
  // Relay steps: Step.chunk_bytes (0: the worker's chunk size).
  int64_t chunk_bytes = 0;
  int stage = 0;
  v1::Step::Op op = v1::Step::OP_BROADCAST;
  bool operand_form = false;  // OP_SEND_RECV between two operands
  // Ids of steps of this program that must finish first.
  std::vector<int> deps;
  // Relays: NumElements(slice) * DTypeSize(dtype); other ops: Step.bytes
  // (plan.proto says what each op counts).
  int64_t bytes = 0;
  std::vector<OperandDesc> inputs;
  std::vector<OperandDesc> outputs;
  v1::Reduction reduction = v1::REDUCTION_SUM;
  std::vector<int64_t> counts;  // OP_ALL_TO_ALL: n x n, row-major
  v1::ComputeAttrs compute;     // OP_COMPUTE
  int device = -1;              // OP_COMPUTE, OP_LOCAL_COPY
};

// The chain position that forwards to `position` (>= 1) of a relay step:
// parents[position], or position - 1 when parents is empty (a chain).
inline int RelayParentOf(const StepDesc& step, int position) {
  return step.parents.empty() ? position - 1 : step.parents[position];
}

// The chunk size a relay step moves in: its own, else `worker_default`.
inline int64_t RelayChunkBytes(const StepDesc& step, int64_t worker_default) {
  return step.chunk_bytes > 0 ? step.chunk_bytes : worker_default;
}

// True for the ops that define their outputs' values (the tensors that
// verification checks against a computed reference, not the initializer).
bool DefinesValues(v1::Step::Op op);
// The same for one step: also an OP_SEND_RECV in the operand form, a copy
// that may land in another tensor (worker/kernels/reference.h).
bool DefinesValues(const v1::Step& step);

struct ParsedProgram {
  std::string job_id;
  std::string worker;
  int rank = 0;
  int world_size = 1;
  // Worker name by rank (empty, or world_size names), for messages.
  std::vector<std::string> rank_workers;
  std::vector<TensorSpec> tensors;
  std::vector<int> local_devices;
  absl::flat_hash_map<int, int> device_rank;  // global device -> worker rank
  std::vector<BufferDesc> buffers;            // buffers of local devices only
  std::vector<BufferDesc> other_buffers;      // other workers' (not allocated)
  std::vector<StepDesc> steps;                // steps touching a local device
  // Parallel to tensors: its initializer (plan.tensor_inits, default
  // pattern) and whether a value-defining step of the plan writes it.
  std::vector<v1::Initializer> tensor_inits;
  std::vector<bool> tensor_computed;
  v1::VerifyMode verify = v1::VERIFY_MODE_FULL;
  // The whole plan as received, for the verification reference.
  std::shared_ptr<const v1::Plan> plan;
  double predicted_seconds = 0;
  double lower_bound_seconds = 0;

  bool IsLocal(int device) const {
    auto it = device_rank.find(device);
    return it != device_rank.end() && it->second == rank;
  }
  int RankOf(int device) const { return device_rank.at(device); }
  // Tensor t's initializer and whether a step computes it; a program built
  // by hand (tests) may leave the vectors short: pattern, not computed.
  const v1::Initializer& InitOf(int tensor) const;
  bool IsComputed(int tensor) const {
    return tensor >= 0 && tensor < static_cast<int>(tensor_computed.size()) &&
           tensor_computed[tensor];
  }
  // The first local device of the step (its group's, or `device`), for
  // timelines; -1 if none.
  int FirstLocalDevice(const StepDesc& step) const;
};

absl::StatusOr<ParsedProgram> ParseProgram(const v1::WorkerProgram& program);

// A relay step as errors name it: "step 5 (tensor 0 slice [0:4,0:8] chain
// 1->3)", in the operand form "step 5 (OP_SEND_RECV buffer 2 [0:4] ->
// buffer 7 [0:4] chain 1->3)"; `backend` (e.g. "GPU"), when given, closes
// the parentheses: "... chain 1->3, GPU)".
std::string DescribeRelayStep(const StepDesc& step,
                              absl::string_view backend = "");

// A relay step's elements and element size: its slice of `tensor`, or in
// the operand form its operands' region (whichever this program knows).
int64_t RelayElements(const StepDesc& step);
int RelayElementSize(const StepDesc& step, const ParsedProgram& program);

// Bytes this worker's devices receive in `step` (its share of
// JobResult.bytes_moved), the same on every backend: the slice for every
// local receiver of a relay chain; Step.bytes for every local rank of a
// collective; a local copy's slice; nothing for compute.
int64_t LocalDeliveredBytes(const ParsedProgram& program,
                            const StepDesc& step);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_PROGRAM_H_
