#include "worker/cuda/device_collectives.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "worker/cuda/collective_exchange.h"
#include "worker/cuda/compute_kernels.h"
#include "worker/cuda/cuda_handles.h"
#include "worker/cuda/device_copy.h"
#include "worker/cuda/device_pattern.h"
#include "worker/pattern.h"

namespace meshcast::worker::cuda {
namespace {

// The step's group seen from this worker: its layout over workers
// (collective_exchange.h), each worker's leader NCCL rank, this worker's
// index and ranks.
struct Group {
  GroupLayout layout;
  std::vector<int> leaders;  // by worker index; -1 without NCCL
  int me = -1;
  std::vector<int> local_ranks;  // ascending
  int n() const { return layout.n(); }
  int m() const { return layout.m(); }
};

absl::StatusOr<Group> MakeGroup(const StepDesc& step,
                                const DeviceRelayEnvironment& env) {
  const ParsedProgram& program = *env.program;
  std::vector<int> worker_of_rank;
  for (int device : step.chain) worker_of_rank.push_back(program.RankOf(device));
  ASSIGN_OR_RETURN(GroupLayout layout, GroupLayout::Create(worker_of_rank));
  Group group{std::move(layout)};
  group.me = group.layout.IndexOfId(program.rank);
  for (int w = 0; w < group.m(); ++w) {
    int leader = -1;
    if (env.nccl != nullptr) {
      // The leader is the GPU of the worker's first rank in group order,
      // which is that worker's PrimaryGpu for the step.
      ASSIGN_OR_RETURN(leader, env.nccl->RankOfDevice(
                                   step.chain[group.layout.RanksOf(w)[0]]));
    }
    group.leaders.push_back(leader);
  }
  for (int r = 0; r < group.n(); ++r) {
    if (program.IsLocal(step.chain[r])) group.local_ranks.push_back(r);
  }
  if (group.me < 0 || group.local_ranks.empty()) {
    return absl::FailedPreconditionError("no rank of the group is on this worker");
  }
  if (group.m() > 1 && env.nccl == nullptr) {
    return absl::FailedPreconditionError(
        "the group spans workers but the job has no NCCL communicator");
  }
  return group;
}

// One point-to-point operation of a group call.
struct P2p {
  bool send = true;
  void* data = nullptr;
  size_t bytes = 0;
  int peer = 0;  // NCCL rank
};

// Issues `ops` as one NCCL group on the lane's communicator of the step's
// GPU; empty operations are left out (both ends compute the same sizes).
absl::Status RunGroup(const DeviceRelayEnvironment& env, const StepStream& s,
                      const std::vector<P2p>& ops) {
  bool any = false;
  for (const P2p& op : ops) any |= op.bytes > 0;
  if (!any) return absl::OkStatus();
  const int lane = s.lane().index;
  RETURN_IF_ERROR(env.nccl->GroupStart(lane));
  absl::Status status;
  for (const P2p& op : ops) {
    if (op.bytes == 0 || !status.ok()) continue;
    status = op.send ? env.nccl->Send(lane, s.gpu(), op.data, op.bytes,
                                      op.peer, s.stream())
                     : env.nccl->Recv(lane, s.gpu(), op.data, op.bytes,
                                      op.peer, s.stream());
  }
  // Always close the group, even after a failed call.
  const absl::Status ended = env.nccl->GroupEnd(lane);
  RETURN_IF_ERROR(status);
  return ended;
}

absl::Status Reduce(DType dtype, bool max, const void* in, void* inout,
                    int64_t n, const StepStream& s) {
  ScopedCudaDevice on(s.gpu());
  RETURN_IF_ERROR(on.status());
  return CudaStatus(LaunchReduceInto(ToPatternType(dtype), max, in, inout, n,
                                     s.stream()),
                    "launching the reduction kernel");
}

// Where the regions of an Exchange live on the step's GPU.
struct Regions {
  uint8_t* accumulator = nullptr;
  uint8_t* staging = nullptr;
  uint8_t* bundle = nullptr;
  std::vector<uint8_t*> outgoing;  // by peer worker index
  std::vector<uint8_t*> incoming;
};

uint8_t* RegionBase(const Regions& regions, const Transfer& t) {
  switch (t.region) {
    case Region::kAccumulator:
      return regions.accumulator;
    case Region::kStaging:
      return regions.staging;
    case Region::kBundle:
      return regions.bundle;
    case Region::kOutgoing:
      return regions.outgoing[t.peer];
    case Region::kIncoming:
      return regions.incoming[t.peer];
  }
  return nullptr;
}

// Issues the exchange's group calls in order, each followed by its
// reductions, on the step's stream.
// `element_size` scales the exchange's offsets and lengths (the dtype's
// size; moves that never reduce may pass any dtype).
absl::Status RunExchange(const DeviceRelayEnvironment& env,
                         const Group& group, const Exchange& x,
                         const Regions& regions, DType dtype, bool max,
                         const StepStream& s, int element_size) {
  const int size = element_size;
  for (size_t g = 0; g < x.groups.size(); ++g) {
    std::vector<P2p> ops;
    for (const Transfer& t : x.groups[g]) {
      ops.push_back({t.send, RegionBase(regions, t) + t.offset * size,
                     static_cast<size_t>(t.length * size),
                     group.leaders[t.peer]});
    }
    RETURN_IF_ERROR(RunGroup(env, s, ops));
    for (const Reduction& r : x.reductions[g]) {
      if (r.length == 0) continue;
      RETURN_IF_ERROR(Reduce(dtype, max, regions.staging + r.staging_offset * size,
                             regions.accumulator + r.accumulator_offset * size,
                             r.length, s));
    }
  }
  return absl::OkStatus();
}

absl::Status EnqueueReducing(const StepDesc& step,
                             const DeviceRelayEnvironment& env,
                             const DeviceLane& lane,
                             absl::Span<const cudaEvent_t> waits,
                             const StepEvents& events, bool scatter) {
  const ParsedProgram& program = *env.program;
  if (step.reduction != v1::REDUCTION_SUM &&
      step.reduction != v1::REDUCTION_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduction ", static_cast<int>(step.reduction),
        " is unknown; allowed: REDUCTION_SUM, REDUCTION_MAX"));
  }
  const bool max = step.reduction == v1::REDUCTION_MAX;
  ASSIGN_OR_RETURN(const Group group, MakeGroup(step, env));
  const int n = group.n();
  if (static_cast<int>(step.inputs.size()) != n ||
      static_cast<int>(step.outputs.size()) != n) {
    return absl::FailedPreconditionError(absl::StrCat(
        "needs one input and one output per rank (", n, "), has ",
        step.inputs.size(), " and ", step.outputs.size()));
  }
  const OperandDesc& first_out = step.outputs[group.local_ranks[0]];
  if (!first_out.known()) {
    return absl::FailedPreconditionError(
        absl::StrCat("outputs[", group.local_ranks[0], "] has no buffer here"));
  }
  const TensorSpec& out_spec = program.tensors[first_out.tensor];
  const DType dtype = out_spec.dtype;
  const int size = DTypeSize(dtype);
  const Box out_box = out_spec.full_box();
  const int64_t total = NumElements(out_box);
  ASSIGN_OR_RETURN(const int gpu, StepPrimaryGpu(step, env));
  ASSIGN_OR_RETURN(StepStream s, StepStream::Begin(lane, gpu, waits, events));

  // (1) The local ranks' inputs into one accumulator.
  ASSIGN_OR_RETURN(uint8_t* const acc, s.Allocate(total * size));
  uint8_t* scratch = nullptr;
  bool first = true;
  for (int r : group.local_ranks) {
    const OperandDesc& in = step.inputs[r];
    const std::string what = absl::StrCat("inputs[", r, "]");
    ASSIGN_OR_RETURN(const DeviceTile* tile,
                     OperandTile(in, *env.buffers, what));
    if (tile->dtype() != dtype) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " is ", DTypeName(tile->dtype()),
                       " but the output tensor is ", DTypeName(dtype)));
    }
    if (NumElements(in.box) != total) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " ", BoxToString(in.box), " has ", NumElements(in.box),
          " elements; it must be row ", r, " of the input tensor, ", total,
          " elements (the output tensor's size)"));
    }
    if (first) {
      RETURN_IF_ERROR(PackRegion(*tile, in.box, acc, gpu, s));
      first = false;
      continue;
    }
    if (scratch == nullptr) {
      ASSIGN_OR_RETURN(scratch, s.Allocate(total * size));
    }
    RETURN_IF_ERROR(PackRegion(*tile, in.box, scratch, gpu, s));
    RETURN_IF_ERROR(Reduce(dtype, max, scratch, acc, total, s));
  }

  // (2) Between workers.
  const int64_t rows = out_spec.shape[0];
  const int64_t row = total / rows;
  if (group.m() > 1) {
    const Exchange x =
        scatter ? ReduceScatterExchange(group.layout, group.me, rows, row)
                : AllReduceExchange(group.layout, group.me, total);
    Regions regions;
    regions.accumulator = acc;
    ASSIGN_OR_RETURN(regions.staging, s.Allocate(x.staging_elements * size));
    RETURN_IF_ERROR(
        RunExchange(env, group, x, regions, dtype, max, s, DTypeSize(dtype)));
  }

  // (3) Into the local outputs.
  for (int r : group.local_ranks) {
    const OperandDesc& out = step.outputs[r];
    const std::string what = absl::StrCat("outputs[", r, "]");
    ASSIGN_OR_RETURN(const DeviceTile* tile,
                     OperandTile(out, *env.buffers, what));
    if (out.tensor != first_out.tensor) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " is a buffer of tensor ", out.tensor,
                       ", outputs[", group.local_ranks[0], "] of tensor ",
                       first_out.tensor, "; all outputs hold one tensor"));
    }
    if (scatter) {
      Box chunk_box = out_box;
      const ElementRange c = ReduceScatterChunk(rows, row, n, r);
      chunk_box[0].begin = c.begin / row;
      chunk_box[0].end = c.end / row;
      if (!IsEmpty(out.box) && !Contains(chunk_box, out.box)) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, " ", BoxToString(out.box), " is not inside chunk ", r,
            " of the output tensor, ", BoxToString(chunk_box)));
      }
    }
    RETURN_IF_ERROR(CopyFromDense(acc, gpu, out_box, out.box, *tile, s));
  }
  return s.End();
}

// The box of rank r's all-gather input: its operand's, the step's slice for
// another worker's buffer, that buffer's box when the program has it, or
// the box its worker published at set-up (gather_boxes).
absl::StatusOr<Box> GatherInputBox(const StepDesc& step, int r,
                                   const DeviceRelayEnvironment& env) {
  const OperandDesc& in = step.inputs[r];
  if (in.known() || !in.box.empty()) return in.box;
  for (const BufferDesc& buffer : env.program->other_buffers) {
    if (buffer.id == in.buffer) return buffer.box;
  }
  if (env.gather_boxes != nullptr) {
    auto it = env.gather_boxes->find(in.buffer);
    if (it != env.gather_boxes->end()) return it->second;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "inputs[", r, "] names buffer ", in.buffer,
      " of another worker with no slice, and neither the program nor that "
      "worker's published boxes give its extent"));
}

}  // namespace

absl::Status EnqueueAllReduce(const StepDesc& step,
                              const DeviceRelayEnvironment& env,
                              const DeviceLane& lane,
                              absl::Span<const cudaEvent_t> waits,
                              const StepEvents& events) {
  return EnqueueReducing(step, env, lane, waits, events, /*scatter=*/false);
}

absl::Status EnqueueReduceScatter(const StepDesc& step,
                                  const DeviceRelayEnvironment& env,
                                  const DeviceLane& lane,
                                  absl::Span<const cudaEvent_t> waits,
                                  const StepEvents& events) {
  return EnqueueReducing(step, env, lane, waits, events, /*scatter=*/true);
}

absl::Status EnqueueAllGather(const StepDesc& step,
                              const DeviceRelayEnvironment& env,
                              const DeviceLane& lane,
                              absl::Span<const cudaEvent_t> waits,
                              const StepEvents& events) {
  const ParsedProgram& program = *env.program;
  ASSIGN_OR_RETURN(const Group group, MakeGroup(step, env));
  const int n = group.n();
  if (static_cast<int>(step.inputs.size()) != n ||
      static_cast<int>(step.outputs.size()) != n) {
    return absl::FailedPreconditionError(absl::StrCat(
        "needs one input and one output per rank (", n, "), has ",
        step.inputs.size(), " and ", step.outputs.size()));
  }
  std::vector<Box> boxes(n);
  for (int r = 0; r < n; ++r) {
    ASSIGN_OR_RETURN(boxes[r], GatherInputBox(step, r, env));
  }
  const OperandDesc& first_out = step.outputs[group.local_ranks[0]];
  if (!first_out.known()) {
    return absl::FailedPreconditionError(
        absl::StrCat("outputs[", group.local_ranks[0], "] has no buffer here"));
  }
  const int size = DTypeSize(program.tensors[first_out.tensor].dtype);
  std::vector<const DeviceTile*> in_tiles(n, nullptr), out_tiles(n, nullptr);
  for (int r : group.local_ranks) {
    ASSIGN_OR_RETURN(in_tiles[r],
                     OperandTile(step.inputs[r], *env.buffers,
                                 absl::StrCat("inputs[", r, "]")));
    ASSIGN_OR_RETURN(out_tiles[r],
                     OperandTile(step.outputs[r], *env.buffers,
                                 absl::StrCat("outputs[", r, "]")));
    if (step.inputs[r].tensor != first_out.tensor ||
        step.outputs[r].tensor != first_out.tensor) {
      return absl::FailedPreconditionError(absl::StrCat(
          "inputs[", r, "] and outputs[", r, "] must be buffers of tensor ",
          first_out.tensor, " (all of an all-gather's operands hold one "
          "tensor)"));
    }
  }
  ASSIGN_OR_RETURN(const int gpu, StepPrimaryGpu(step, env));
  ASSIGN_OR_RETURN(StepStream s, StepStream::Begin(lane, gpu, waits, events));

  // Local inputs into local outputs.
  for (int i : group.local_ranks) {
    for (int o : group.local_ranks) {
      if (step.inputs[i].buffer == step.outputs[o].buffer) continue;
      const Box region = Intersect(boxes[i], step.outputs[o].box);
      if (IsEmpty(region)) continue;
      ASSIGN_OR_RETURN(const RegionCopy copy,
                       MakeTileCopy(region, out_tiles[o]->box(),
                                    in_tiles[i]->box(), size));
      RETURN_IF_ERROR(EnqueueRegionCopy(
          {out_tiles[o]->data(), out_tiles[o]->gpu()},
          {in_tiles[i]->data(), in_tiles[i]->gpu()}, copy, s.stream(), gpu));
    }
  }
  const int m = group.m();
  if (m > 1) {
    // Bundles: a worker's inputs in ascending rank order, each row-major
    // over its box.
    std::vector<int64_t> offset(n, 0), bundle(m, 0);
    for (int w = 0; w < m; ++w) {
      for (int r : group.layout.RanksOf(w)) {
        offset[r] = bundle[w];
        bundle[w] += NumElements(boxes[r]);
      }
    }
    const int me = group.me;
    ASSIGN_OR_RETURN(uint8_t* const mine, s.Allocate(bundle[me] * size));
    for (int r : group.local_ranks) {
      RETURN_IF_ERROR(PackRegion(*in_tiles[r], boxes[r],
                                 mine + offset[r] * size, gpu, s));
    }
    const Exchange x = AllGatherExchange(group.layout, me, bundle);
    Regions regions;
    regions.bundle = mine;
    regions.incoming.assign(m, nullptr);
    for (int w = 0; w < m; ++w) {
      ASSIGN_OR_RETURN(regions.incoming[w],
                       s.Allocate(x.incoming_elements[w] * size));
    }
    RETURN_IF_ERROR(RunExchange(env, group, x, regions, DType::kUInt8,
                                /*max=*/false, s, size));
    const std::vector<uint8_t*>& received = regions.incoming;
    for (int w = 0; w < m; ++w) {
      if (w == me) continue;
      for (int r : group.layout.RanksOf(w)) {
        for (int o : group.local_ranks) {
          const Box region = Intersect(boxes[r], step.outputs[o].box);
          if (IsEmpty(region)) continue;
          RETURN_IF_ERROR(CopyFromDense(received[w] + offset[r] * size, gpu,
                                        boxes[r], region, *out_tiles[o], s));
        }
      }
    }
  }
  return s.End();
}

absl::Status EnqueueAllToAll(const StepDesc& step,
                             const DeviceRelayEnvironment& env,
                             const DeviceLane& lane,
                             absl::Span<const cudaEvent_t> waits,
                             const StepEvents& events) {
  const ParsedProgram& program = *env.program;
  ASSIGN_OR_RETURN(const Group group, MakeGroup(step, env));
  const int n = group.n();
  if (static_cast<int64_t>(step.counts.size()) != int64_t{n} * n) {
    return absl::InvalidArgumentError(
        absl::StrCat("counts has ", step.counts.size(), " entries; the group of ",
                     n, " ranks needs ", n * n, " (n x n, row-major)"));
  }
  if (static_cast<int>(step.inputs.size()) != n ||
      static_cast<int>(step.outputs.size()) != n) {
    return absl::FailedPreconditionError(absl::StrCat(
        "needs one input and one output per rank (", n, "), has ",
        step.inputs.size(), " and ", step.outputs.size()));
  }
  auto count = [&](int r, int t) { return step.counts[r * n + t]; };
  for (int64_t c : step.counts) {
    if (c < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("counts holds ", c, "; counts must be >= 0"));
    }
  }
  // Offsets of block (r, t) in rank r's input and in rank t's output.
  std::vector<int64_t> in_offset(n * n, 0), out_offset(n * n, 0);
  for (int r = 0; r < n; ++r) {
    for (int t = 1; t < n; ++t) {
      in_offset[r * n + t] = in_offset[r * n + t - 1] + count(r, t - 1);
    }
  }
  for (int t = 0; t < n; ++t) {
    for (int r = 1; r < n; ++r) {
      out_offset[r * n + t] = out_offset[(r - 1) * n + t] + count(r - 1, t);
    }
  }
  // Local operands: contiguous (1-D) regions of their tiles.
  const OperandDesc& first_in = step.inputs[group.local_ranks[0]];
  if (!first_in.known()) {
    return absl::FailedPreconditionError(
        absl::StrCat("inputs[", group.local_ranks[0], "] has no buffer here"));
  }
  const int size = DTypeSize(program.tensors[first_in.tensor].dtype);
  // Rank r's part of IN (sender-major) and of OUT (receiver-major), in
  // tensor coordinates: [in_row[r], in_row[r + 1]) and [out_row[r],
  // out_row[r + 1]). The operands name the buffers; their boxes may cover
  // more than the part (a whole replicated tensor), as on CPU workers.
  std::vector<int64_t> in_row(n + 1, 0), out_row(n + 1, 0);
  for (int r = 0; r < n; ++r) {
    in_row[r + 1] = in_row[r];
    out_row[r + 1] = out_row[r];
    for (int t = 0; t < n; ++t) {
      in_row[r + 1] += count(r, t);
      out_row[r + 1] += count(t, r);
    }
  }
  std::vector<uint8_t*> in_data(n, nullptr), out_data(n, nullptr);
  std::vector<int> rank_gpu(n, -1);
  for (int r : group.local_ranks) {
    for (bool input : {true, false}) {
      const OperandDesc& operand = input ? step.inputs[r] : step.outputs[r];
      const std::string what =
          absl::StrCat(input ? "inputs[" : "outputs[", r, "]");
      ASSIGN_OR_RETURN(const DeviceTile* tile,
                       OperandTile(operand, *env.buffers, what));
      if (tile->element_size() != size) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, " has ", tile->element_size(), "-byte elements, inputs[",
            group.local_ranks[0], "] ", size, "-byte ones"));
      }
      const std::vector<int64_t>& row = input ? in_row : out_row;
      const Box part{{row[r], row[r + 1]}};
      if (tile->box().size() != 1) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, ": all-to-all needs 1-D tensors; buffer ", operand.buffer,
            " is ", BoxToString(tile->box())));
      }
      absl::StatusOr<uint8_t*> data = ContiguousRegion(*tile, part);
      if (!data.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, ": rank ", r, "'s part ", BoxToString(part), " (counts ",
            input ? "sent" : "delivered", ") is not in buffer ",
            operand.buffer, " ", BoxToString(tile->box()), ": ",
            data.status().message()));
      }
      (input ? in_data : out_data)[r] = *data;
      rank_gpu[r] = tile->gpu();
    }
  }
  ASSIGN_OR_RETURN(const int gpu, StepPrimaryGpu(step, env));
  ASSIGN_OR_RETURN(StepStream s, StepStream::Begin(lane, gpu, waits, events));
  // Blocks between local ranks.
  for (int r : group.local_ranks) {
    for (int t : group.local_ranks) {
      RETURN_IF_ERROR(CopyBytes(out_data[t] + out_offset[r * n + t] * size,
                                rank_gpu[t],
                                in_data[r] + in_offset[r * n + t] * size,
                                rank_gpu[r], count(r, t) * size, s));
    }
  }
  const int m = group.m();
  if (m > 1) {
    const int me = group.me;
    const Exchange x = AllToAllExchange(group.layout, me, step.counts);
    Regions regions;
    regions.outgoing.assign(m, nullptr);
    regions.incoming.assign(m, nullptr);
    for (int w = 0; w < m; ++w) {
      if (w == me) continue;
      ASSIGN_OR_RETURN(regions.outgoing[w],
                       s.Allocate(x.outgoing_elements[w] * size));
      ASSIGN_OR_RETURN(regions.incoming[w],
                       s.Allocate(x.incoming_elements[w] * size));
      // Our blocks for w, in the order both ends use.
      int64_t at = 0;
      for (const auto& [r, t] : BundleBlocks(group.layout, me, w)) {
        const int64_t bytes = count(r, t) * size;
        RETURN_IF_ERROR(CopyBytes(regions.outgoing[w] + at, gpu,
                                  in_data[r] + in_offset[r * n + t] * size,
                                  rank_gpu[r], bytes, s));
        at += bytes;
      }
    }
    // Moved bytes: the element size only scales the offsets.
    RETURN_IF_ERROR(RunExchange(env, group, x, regions, DType::kUInt8,
                                /*max=*/false, s, size));
    for (int w = 0; w < m; ++w) {
      if (w == me) continue;
      int64_t at = 0;
      for (const auto& [r, t] : BundleBlocks(group.layout, w, me)) {
        const int64_t bytes = count(r, t) * size;
        RETURN_IF_ERROR(CopyBytes(out_data[t] + out_offset[r * n + t] * size,
                                  rank_gpu[t], regions.incoming[w] + at, gpu,
                                  bytes, s));
        at += bytes;
      }
    }
  }
  return s.End();
}

absl::Status EnqueueLocalCopy(const StepDesc& step,
                              const DeviceRelayEnvironment& env,
                              const DeviceLane& lane,
                              absl::Span<const cudaEvent_t> waits,
                              const StepEvents& events) {
  if (step.inputs.size() != 1 || step.outputs.size() != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "needs 1 input and 1 output, has ", step.inputs.size(), " and ",
        step.outputs.size()));
  }
  ASSIGN_OR_RETURN(const DeviceTile* in,
                   OperandTile(step.inputs[0], *env.buffers, "inputs[0]"));
  ASSIGN_OR_RETURN(const DeviceTile* out,
                   OperandTile(step.outputs[0], *env.buffers, "outputs[0]"));
  ASSIGN_OR_RETURN(const int gpu, StepPrimaryGpu(step, env));
  ASSIGN_OR_RETURN(StepStream s, StepStream::Begin(lane, gpu, waits, events));
  if (step.inputs[0].buffer != step.outputs[0].buffer &&
      !IsEmpty(step.outputs[0].box)) {
    ASSIGN_OR_RETURN(const RegionCopy copy,
                     MakeTileCopy(step.outputs[0].box, out->box(), in->box(),
                                  out->element_size()));
    RETURN_IF_ERROR(EnqueueRegionCopy({out->data(), out->gpu()},
                                      {in->data(), in->gpu()}, copy,
                                      s.stream(), gpu));
  }
  return s.End();
}

}  // namespace meshcast::worker::cuda
