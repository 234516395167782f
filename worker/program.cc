#include "worker/program.h"

#include <deque>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshcast/v1/types.pb.h"
#include "planner/ir/group_parents.h"
#include "proto/dtype_convert.h"
#include "util/status_macros.h"
#include "worker/box_runs.h"
#include "worker/kernels/attention.h"
#include "worker/kernels/compute.h"
#include "worker/kernels/element.h"
#include "worker/kernels/initializer.h"
#include "worker/kernels/reference.h"

namespace meshcast::worker {
namespace {

Box BoxFromProto(
    const google::protobuf::RepeatedPtrField<v1::Interval>& intervals) {
  Box box;
  box.reserve(intervals.size());
  for (const v1::Interval& interval : intervals) {
    box.push_back({interval.begin(), interval.end()});
  }
  return box;
}

absl::Status CheckBoxInTensor(const Box& box, const TensorSpec& spec,
                              const std::string& what) {
  absl::Status status = CheckRegionInBox(box, spec.full_box(), what.c_str());
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(status.message(), " (tensor shape [",
                     absl::StrJoin(spec.shape, ","), "])"));
  }
  return absl::OkStatus();
}

absl::Status CheckAcyclic(const std::vector<StepDesc>& steps) {
  absl::flat_hash_map<int, int> index_of;
  for (size_t i = 0; i < steps.size(); ++i) index_of[steps[i].id] = i;
  std::vector<int> missing(steps.size());
  std::vector<std::vector<int>> dependents(steps.size());
  std::deque<int> ready;
  for (size_t i = 0; i < steps.size(); ++i) {
    missing[i] = steps[i].deps.size();
    for (int dep : steps[i].deps) dependents[index_of.at(dep)].push_back(i);
    if (missing[i] == 0) ready.push_back(i);
  }
  size_t ordered = 0;
  while (!ready.empty()) {
    const int i = ready.front();
    ready.pop_front();
    ++ordered;
    for (int j : dependents[i]) {
      if (--missing[j] == 0) ready.push_back(j);
    }
  }
  if (ordered != steps.size()) {
    std::vector<int> stuck;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (missing[i] > 0) stuck.push_back(steps[i].id);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("plan.steps: dependency cycle among steps ",
                     absl::StrJoin(stuck, ",")));
  }
  return absl::OkStatus();
}

// Operand and attribute counts by op (plan.proto).
// Fills desc.parents of a relay step from its group (a chain when the group
// has none) and checks the tree; other ops' groups must have none.
absl::Status ParseRelayParents(const v1::CommGroup& group, bool relay,
                               const std::string& what, StepDesc& desc) {
  const int n = static_cast<int>(desc.chain.size());
  if (!relay) {
    if (group.parents_size() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": group ", group.id(),
          " has parents, which only relay steps (OP_BROADCAST) use"));
    }
    return absl::OkStatus();
  }
  if (group.parents_size() == 0) {
    desc.parents.resize(n);
    for (int p = 0; p < n; ++p) desc.parents[p] = p - 1;
    return absl::OkStatus();
  }
  if (absl::Status status = CheckGroupParents(group); !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", status.message()));
  }
  desc.parents.assign(group.parents().begin(), group.parents().end());
  return absl::OkStatus();
}

absl::Status CheckOperandCounts(const v1::Step& step, const StepDesc& desc,
                                const std::string& what) {
  const int n = static_cast<int>(desc.chain.size());
  const std::string op = v1::Step::Op_Name(step.op());
  switch (step.op()) {
    case v1::Step::OP_ALL_GATHER:
    case v1::Step::OP_ALL_REDUCE:
    case v1::Step::OP_REDUCE_SCATTER:
    case v1::Step::OP_ALL_TO_ALL:
      if (step.inputs_size() != n || step.outputs_size() != n) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": ", op, " over a group of ", n, " needs ", n,
                         " inputs and ", n, " outputs (one per rank), has ",
                         step.inputs_size(), " and ", step.outputs_size()));
      }
      if (step.op() == v1::Step::OP_ALL_TO_ALL) {
        if (step.counts_size() != n * n) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, ": OP_ALL_TO_ALL counts has ", step.counts_size(),
              " entries; a group of ", n, " needs ", n * n, " (n x n)"));
        }
        for (int i = 0; i < step.counts_size(); ++i) {
          if (step.counts(i) < 0) {
            return absl::InvalidArgumentError(absl::StrCat(
                what, ": counts[", i, "] = ", step.counts(i), " is negative"));
          }
        }
      }
      if (step.reduction() != v1::REDUCTION_SUM &&
          step.reduction() != v1::REDUCTION_MAX) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": reduction ", static_cast<int>(step.reduction()),
            " is not REDUCTION_SUM or REDUCTION_MAX"));
      }
      return absl::OkStatus();
    case v1::Step::OP_LOCAL_COPY:
      return absl::OkStatus();  // checked by the caller
    case v1::Step::OP_COMPUTE: {
      int min_inputs = 0, max_inputs = 0;
      const char* name = "";
      switch (step.compute().op_case()) {
        case v1::ComputeAttrs::kGemm:
          min_inputs = max_inputs = 2;
          name = "gemm";
          break;
        case v1::ComputeAttrs::kElementwise:
          min_inputs = max_inputs =
              ElementwiseInputs(step.compute().elementwise().kind());
          if (min_inputs == 0) {
            return absl::InvalidArgumentError(absl::StrCat(
                what, ": compute.elementwise.kind ",
                static_cast<int>(step.compute().elementwise().kind()),
                " is unknown; allowed: ", kElementwiseKinds));
          }
          name = "elementwise";
          break;
        case v1::ComputeAttrs::kGather:
          // [X] or [X, W].
          min_inputs = 1;
          max_inputs = 2;
          name = "gather";
          break;
        case v1::ComputeAttrs::kRowDot:
          // [A, B].
          min_inputs = max_inputs = 2;
          name = "row_dot";
          break;
        case v1::ComputeAttrs::kAttentionBlock:
          // [Q, K, V] or [Q, K, V, S].
          min_inputs = 3;
          max_inputs = 4;
          name = "attention_block";
          break;
        case v1::ComputeAttrs::kAttentionFinish:
          // [S].
          min_inputs = max_inputs = 1;
          name = "attention_finish";
          break;
        case v1::ComputeAttrs::kAttentionBackward:
          // [Q, K, V, dO, O, S].
          min_inputs = max_inputs = 6;
          name = "attention_backward";
          break;
        default:
          return absl::InvalidArgumentError(absl::StrCat(
              what,
              ": OP_COMPUTE needs compute.gemm, compute.elementwise, "
              "compute.gather, compute.row_dot, compute.attention_block, "
              "compute.attention_finish or compute.attention_backward"));
      }
      if (step.inputs_size() < min_inputs || step.inputs_size() > max_inputs ||
          step.outputs_size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": OP_COMPUTE (", name, ") needs ", min_inputs,
            min_inputs == max_inputs ? "" : absl::StrCat(" or ", max_inputs),
            " inputs and 1 output, has ", step.inputs_size(), " and ",
            step.outputs_size()));
      }
      return absl::OkStatus();
    }
    default:
      return absl::OkStatus();
  }
}

// The operand form of OP_SEND_RECV copies element e of the input's region
// to element e of the output's: both must hold as many elements of one
// dtype (checked where both operands are known: the controller puts them
// into every program, as the step defines values). FAILED_PRECONDITION, as
// a collective's operands without the extents it needs.
absl::Status CheckOperandCopy(const ParsedProgram& program,
                              const std::string& what, const OperandDesc& input,
                              const OperandDesc& output) {
  if (input.known() && output.known()) {
    const DType in = program.tensors[input.tensor].dtype;
    const DType out = program.tensors[output.tensor].dtype;
    const int64_t in_elements = NumElements(input.box);
    const int64_t out_elements = NumElements(output.box);
    if (in != out || in_elements != out_elements) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": OP_SEND_RECV input buffer ", input.buffer, " ",
          BoxToString(input.box), " (", in_elements, " elements of ",
          DTypeName(in), ") and output buffer ", output.buffer, " ",
          BoxToString(output.box), " (", out_elements, " elements of ",
          DTypeName(out), ") must hold as many elements of one dtype"));
    }
  }
  if (input.buffer == output.buffer && input.box != output.box &&
      !IsEmpty(Intersect(input.box, output.box))) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": OP_SEND_RECV input ", BoxToString(input.box), " and output ",
        BoxToString(output.box), " overlap in buffer ", input.buffer));
  }
  return absl::OkStatus();
}

// What OP_COMPUTE needs of its resolved operands beyond their count:
// RELU / SIGMOID / RELU_GRAD / SIGMOID_GRAD a floating-point output; a
// gather, operands whose sizes fit its attributes (CheckGather) and, with
// weights, a floating-point dtype; a row dot, a floating-point output and
// operands whose sizes fit its attributes (CheckRowDot); an attention block
// or finish likewise (CheckAttentionBlock, CheckAttentionFinish).
// INVALID_ARGUMENT naming the step and field; UNIMPLEMENTED for weights on
// an integer dtype (as the kernels).
absl::Status CheckComputeOperands(const ParsedProgram& program,
                                  const v1::Step& step, const StepDesc& desc,
                                  const std::string& what) {
  if (desc.outputs.empty() || !desc.outputs[0].known()) return absl::OkStatus();
  const DType dtype = program.tensors[desc.outputs[0].tensor].dtype;
  if (step.compute().has_elementwise()) {
    const v1::ElementwiseAttrs& e = step.compute().elementwise();
    if (ElementwiseNeedsFloat(e.kind()) && IsIntegerDType(dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": compute.elementwise.kind ",
          v1::ElementwiseAttrs::Kind_Name(e.kind()), " on ", DTypeName(dtype),
          " (output buffer ", desc.outputs[0].buffer,
          ") is not defined; allowed dtypes: float16, bfloat16, float32, "
          "float64"));
    }
    return absl::OkStatus();
  }
  if (step.compute().has_row_dot()) {
    if (IsIntegerDType(dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": compute.row_dot on ", DTypeName(dtype), " (output buffer ",
          desc.outputs[0].buffer,
          ") is not defined; allowed dtypes: float16, bfloat16, float32, "
          "float64"));
    }
    for (const OperandDesc& input : desc.inputs) {
      if (!input.known()) return absl::OkStatus();
    }
    const absl::Status valid = CheckRowDot(
        step.compute().row_dot(), NumElements(desc.inputs[0].box),
        NumElements(desc.inputs[1].box), NumElements(desc.outputs[0].box));
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": compute.", valid.message()));
    }
    return absl::OkStatus();
  }
  if (step.compute().has_attention_backward()) {
    if (IsIntegerDType(dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": compute.attention_backward on ", DTypeName(dtype),
          " (output buffer ", desc.outputs[0].buffer,
          ") is not defined; allowed dtypes: float16, bfloat16, float32, "
          "float64"));
    }
    for (const OperandDesc& input : desc.inputs) {
      if (!input.known()) return absl::OkStatus();
    }
    auto n = [&](int i) { return NumElements(desc.inputs[i].box); };
    const absl::Status valid = CheckAttentionBackward(
        step.compute().attention_backward(), n(0), n(1), n(2), n(3), n(4),
        n(5), NumElements(desc.outputs[0].box));
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": compute.", valid.message()));
    }
    return absl::OkStatus();
  }
  if (step.compute().has_attention_block() ||
      step.compute().has_attention_finish()) {
    const bool block = step.compute().has_attention_block();
    const char* name = block ? "attention_block" : "attention_finish";
    if (IsIntegerDType(dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": compute.", name, " on ", DTypeName(dtype),
          " (output buffer ", desc.outputs[0].buffer,
          ") is not defined; allowed dtypes: float16, bfloat16, float32, "
          "float64"));
    }
    for (const OperandDesc& input : desc.inputs) {
      if (!input.known()) return absl::OkStatus();
    }
    const int64_t out = NumElements(desc.outputs[0].box);
    const absl::Status valid =
        block ? CheckAttentionBlock(
                    step.compute().attention_block(),
                    NumElements(desc.inputs[0].box),
                    NumElements(desc.inputs[1].box),
                    NumElements(desc.inputs[2].box),
                    desc.inputs.size() == 4 ? NumElements(desc.inputs[3].box)
                                            : -1,
                    out)
              : CheckAttentionFinish(step.compute().attention_finish(),
                                     NumElements(desc.inputs[0].box), out);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": compute.", valid.message()));
    }
    return absl::OkStatus();
  }
  if (!step.compute().has_gather()) return absl::OkStatus();
  for (const OperandDesc& input : desc.inputs) {
    if (!input.known()) return absl::OkStatus();
  }
  const int64_t w_elements =
      desc.inputs.size() == 2 ? NumElements(desc.inputs[1].box) : -1;
  absl::Status valid =
      CheckGather(step.compute().gather(), NumElements(desc.inputs[0].box),
                  w_elements, NumElements(desc.outputs[0].box));
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": compute.", valid.message()));
  }
  if (desc.inputs.size() == 2 && IsIntegerDType(dtype)) {
    return absl::UnimplementedError(absl::StrCat(
        what, ": compute.gather with weights (inputs[1]) on ", DTypeName(dtype),
        " is not supported; allowed: float16, bfloat16, float32, float64 "
        "(integer dtypes gather without W)"));
  }
  return absl::OkStatus();
}

}  // namespace

bool DefinesValues(v1::Step::Op op) {
  return op == v1::Step::OP_ALL_REDUCE || op == v1::Step::OP_REDUCE_SCATTER ||
         op == v1::Step::OP_ALL_TO_ALL || op == v1::Step::OP_COMPUTE;
}

bool DefinesValues(const v1::Step& step) {
  return DefinesValues(step.op()) || IsOperandCopy(step);
}

namespace {

// "chain 1->3->6", or for a tree its hops in position order:
// "tree 1->3,1->6,3->7". Parents left empty (a StepDesc built by hand)
// are a chain.
std::string DescribeShape(const StepDesc& step) {
  bool tree = false;
  if (step.parents.size() == step.chain.size()) {
    for (size_t p = 0; p < step.parents.size(); ++p) {
      tree |= step.parents[p] != static_cast<int>(p) - 1;
    }
  }
  if (!tree) return absl::StrCat("chain ", absl::StrJoin(step.chain, "->"));
  std::vector<std::string> hops;
  for (size_t p = 1; p < step.chain.size(); ++p) {
    hops.push_back(
        absl::StrCat(step.chain[step.parents[p]], "->", step.chain[p]));
  }
  return absl::StrCat("tree ", absl::StrJoin(hops, ","));
}

}  // namespace

std::string DescribeRelayStep(const StepDesc& step,
                              absl::string_view backend) {
  const std::string what =
      step.operand_form
          ? absl::StrCat("OP_SEND_RECV buffer ", step.inputs[0].buffer, " ",
                         BoxToString(step.inputs[0].box), " -> buffer ",
                         step.outputs[0].buffer, " ",
                         BoxToString(step.outputs[0].box))
          : absl::StrCat("tensor ", step.tensor, " slice ",
                         BoxToString(step.slice));
  return absl::StrCat("step ", step.id, " (", what, " ", DescribeShape(step),
                      backend.empty() ? "" : ", ", backend, ")");
}

int64_t RelayElements(const StepDesc& step) {
  if (!step.operand_form) return NumElements(step.slice);
  const OperandDesc& known =
      step.inputs[0].known() ? step.inputs[0] : step.outputs[0];
  return NumElements(known.box);
}

int RelayElementSize(const StepDesc& step, const ParsedProgram& program) {
  const int tensor = !step.operand_form       ? step.tensor
                     : step.inputs[0].known() ? step.inputs[0].tensor
                                              : step.outputs[0].tensor;
  return DTypeSize(program.tensors[tensor].dtype);
}

const v1::Initializer& ParsedProgram::InitOf(int tensor) const {
  if (tensor >= 0 && tensor < static_cast<int>(tensor_inits.size())) {
    return tensor_inits[tensor];
  }
  return v1::Initializer::default_instance();
}

int ParsedProgram::FirstLocalDevice(const StepDesc& step) const {
  for (int device : step.chain) {
    if (IsLocal(device)) return device;
  }
  return step.device >= 0 && IsLocal(step.device) ? step.device : -1;
}

absl::StatusOr<ParsedProgram> ParseProgram(const v1::WorkerProgram& proto) {
  ParsedProgram program;
  program.job_id = proto.job_id();
  program.worker = proto.worker();
  program.world_size = proto.world_size() == 0 ? 1 : proto.world_size();
  program.rank = proto.rank();
  program.rank_workers.assign(proto.rank_workers().begin(),
                              proto.rank_workers().end());
  if (program.job_id.empty()) {
    return absl::InvalidArgumentError("program.job_id is empty");
  }
  if (program.world_size < 1 || program.rank < 0 ||
      program.rank >= program.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("program.rank ", program.rank, " is not in [0, ",
                     "world_size=", program.world_size, ")"));
  }
  if (!program.rank_workers.empty() &&
      static_cast<int>(program.rank_workers.size()) != program.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "program.rank_workers has ", program.rank_workers.size(),
        " names but world_size is ", program.world_size,
        " (give one name per rank, or none)"));
  }
  for (const auto& [device, rank] : proto.device_rank()) {
    if (rank < 0 || rank >= program.world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("program.device_rank[", device, "] = ", rank,
                       " is not in [0, world_size=", program.world_size, ")"));
    }
    program.device_rank[device] = rank;
  }
  absl::flat_hash_set<int> local;
  for (int device : proto.local_devices()) {
    if (!local.insert(device).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "program.local_devices lists device ", device, " twice"));
    }
    auto it = program.device_rank.find(device);
    if (it == program.device_rank.end()) {
      program.device_rank[device] = program.rank;
    } else if (it->second != program.rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("program.local_devices has device ", device,
                       " but device_rank maps ", "it to worker rank ",
                       it->second, ", not this worker's rank ", program.rank));
    }
    program.local_devices.push_back(device);
  }
  for (const auto& [device, rank] : program.device_rank) {
    if (rank == program.rank && !local.contains(device)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "program.device_rank maps device ", device, " to this worker (rank ",
          rank, ") but it is not in program.local_devices"));
    }
  }

  const v1::Plan& plan = proto.plan();
  program.predicted_seconds = plan.predicted_seconds();
  program.lower_bound_seconds = plan.lower_bound_seconds();
  for (int t = 0; t < plan.tensors_size(); ++t) {
    const v1::TensorSpec& tensor = plan.tensors(t);
    TensorSpec spec;
    absl::StatusOr<DType> dtype =
        DTypeFromProto(tensor.dtype(), absl::StrCat("plan.tensors[", t, "].dtype"));
    if (!dtype.ok()) return dtype.status();
    spec.dtype = *dtype;
    for (int64_t extent : tensor.shape()) {
      if (extent < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan.tensors[", t, "].shape has extent ", extent,
                         "; every extent must be >= 1"));
      }
      spec.shape.push_back(extent);
    }
    program.tensors.push_back(std::move(spec));
  }

  program.tensor_inits.resize(program.tensors.size());
  for (int t = 0; t < plan.tensor_inits_size() &&
                  t < static_cast<int>(program.tensors.size());
       ++t) {
    absl::Status valid = CheckInitializer(plan.tensor_inits(t), t);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan.", valid.message()));
    }
    program.tensor_inits[t] = plan.tensor_inits(t);
  }
  if (plan.tensor_inits_size() > static_cast<int>(program.tensors.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan.tensor_inits has ", plan.tensor_inits_size(),
                     " entries but plan.tensors has ", program.tensors.size()));
  }
  program.tensor_computed.assign(program.tensors.size(), false);
  program.verify = proto.verify();
  program.plan = std::make_shared<const v1::Plan>(plan);

  absl::flat_hash_set<std::tuple<int, int, int>> seen_buffers;
  absl::flat_hash_map<int, const v1::Buffer*> buffer_by_id;
  for (const v1::Buffer& buffer : plan.buffers()) {
    const std::string what = absl::StrCat("plan.buffers id ", buffer.id());
    if (!buffer_by_id.emplace(buffer.id(), &buffer).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, " appears twice"));
    }
    if (buffer.role() != v1::Buffer::ROLE_SOURCE &&
        buffer.role() != v1::Buffer::ROLE_DESTINATION &&
        buffer.role() != v1::Buffer::ROLE_SCRATCH) {
      return absl::InvalidArgumentError(
          absl::StrCat(what,
                       ": role must be ROLE_SOURCE, ROLE_DESTINATION or "
                       "ROLE_SCRATCH"));
    }
    if (buffer.tensor() < 0 ||
        buffer.tensor() >= static_cast<int>(program.tensors.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": tensor ", buffer.tensor(), " is not in [0, ",
                       program.tensors.size(), ")"));
    }
    BufferDesc desc;
    desc.id = buffer.id();
    desc.tensor = buffer.tensor();
    desc.device = buffer.device();
    desc.box = BoxFromProto(buffer.box());
    desc.role = buffer.role() == v1::Buffer::ROLE_SOURCE ? BufferRole::kSource
                : buffer.role() == v1::Buffer::ROLE_DESTINATION
                    ? BufferRole::kDestination
                    : BufferRole::kScratch;
    desc.user_buffer = buffer.user_buffer();
    if (!desc.user_buffer.empty() && desc.role == BufferRole::kScratch) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": user_buffer '", desc.user_buffer,
          "' on a ROLE_SCRATCH buffer; allowed on ROLE_SOURCE and "
          "ROLE_DESTINATION"));
    }
    RETURN_IF_ERROR(CheckBoxInTensor(desc.box, program.tensors[desc.tensor],
                                     what + " box"));
    if (!local.contains(buffer.device())) {
      program.other_buffers.push_back(std::move(desc));
      continue;
    }
    // Relays find tiles by (device, tensor, role); scratch buffers are
    // found by id only, so a device may have several.
    if (desc.role != BufferRole::kScratch &&
        !seen_buffers.insert({desc.device, desc.tensor, buffer.role()})
             .second) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": device ", desc.device, " already has a ",
                       v1::Buffer::Role_Name(buffer.role()),
                       " buffer of tensor ", desc.tensor));
    }
    program.buffers.push_back(std::move(desc));
  }

  absl::flat_hash_map<int, const v1::CommGroup*> groups;
  for (const v1::CommGroup& group : plan.groups()) {
    if (!groups.emplace(group.id(), &group).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan.groups: group id ", group.id(), " appears twice"));
    }
  }

  // Resolves one operand; `device` is the device it must belong to (-1:
  // any).
  auto resolve = [&](const v1::Operand& operand, const std::string& what,
                     int device) -> absl::StatusOr<OperandDesc> {
    OperandDesc desc;
    desc.buffer = operand.buffer();
    desc.box = BoxFromProto(operand.slice());
    desc.whole_buffer = operand.slice().empty();
    auto it = buffer_by_id.find(operand.buffer());
    if (it == buffer_by_id.end()) {
      if (device >= 0 && !program.IsLocal(device)) {
        desc.device = device;  // another worker's buffer the program omits
        return desc;
      }
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": buffer ", operand.buffer(), " is not in plan.buffers"));
    }
    const v1::Buffer& buffer = *it->second;
    desc.tensor = buffer.tensor();
    desc.device = buffer.device();
    desc.local = local.contains(buffer.device());
    if (device >= 0 && desc.device != device) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": buffer ", desc.buffer, " is on device ", desc.device,
          " but the operand belongs to device ", device));
    }
    const Box buffer_box = BoxFromProto(buffer.box());
    if (desc.box.empty()) {
      desc.box = buffer_box;
    } else {
      absl::Status inside =
          CheckRegionInBox(desc.box, buffer_box, (what + " slice").c_str());
      if (!inside.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(inside.message(), " (buffer ", desc.buffer, ")"));
      }
    }
    return desc;
  };

  absl::flat_hash_set<int> step_ids;
  for (const v1::Step& step : plan.steps()) {
    const std::string what = absl::StrCat("plan.steps id ", step.id());
    if (step.id() < 0 || step.id() > kMaxStepId) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": id must be in [0, ", kMaxStepId, "]"));
    }
    if (!step_ids.insert(step.id()).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, " appears twice"));
    }
    if (step.op() == v1::Step::OP_UNSPECIFIED ||
        !v1::Step::Op_IsValid(step.op())) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": op ", static_cast<int>(step.op()),
                       " is not an op of the IR (OP_BROADCAST .. OP_COMPUTE)"));
    }
    const bool relay = step.op() == v1::Step::OP_BROADCAST ||
                       step.op() == v1::Step::OP_SEND_RECV;
    const bool grouped = step.op() != v1::Step::OP_LOCAL_COPY &&
                         step.op() != v1::Step::OP_COMPUTE;
    StepDesc desc;
    desc.id = step.id();
    desc.tensor = step.tensor();
    desc.stage = step.stage();
    desc.op = step.op();
    desc.operand_form = IsOperandCopy(step);
    desc.reduction = step.reduction();
    desc.counts.assign(step.counts().begin(), step.counts().end());
    desc.compute = step.compute();
    desc.device = step.device();
    if (step.chunk_bytes() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": chunk_bytes is ", step.chunk_bytes(),
                       "; must be >= 0 (0: the worker's chunk size)"));
    }
    desc.chunk_bytes = step.chunk_bytes();
    bool touches_this_worker = false;
    if (grouped) {
      auto group = groups.find(step.group());
      if (group == groups.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": group ", step.group(), " is not in plan.groups"));
      }
      desc.chain.assign(group->second->devices().begin(),
                        group->second->devices().end());
      const size_t min_length = relay ? 2 : 1;
      if (desc.chain.size() < min_length ||
          desc.chain.size() > static_cast<size_t>(kMaxChainLength)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": group ", step.group(), " has ", desc.chain.size(),
            " devices; need ", min_length, " to ", kMaxChainLength));
      }
      absl::flat_hash_set<int> in_chain;
      for (int device : desc.chain) {
        if (!in_chain.insert(device).second) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": group ", step.group(), " lists device ",
                           device, " twice"));
        }
        if (!program.device_rank.contains(device)) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, ": device ", device, " of group ", step.group(),
              " has no entry in program.device_rank"));
        }
        touches_this_worker |= program.IsLocal(device);
      }
      RETURN_IF_ERROR(ParseRelayParents(*group->second, relay, what, desc));
    } else {
      if (step.op() == v1::Step::OP_LOCAL_COPY) {
        // The device is the output's; `device` may be left unset.
        if (step.inputs_size() != 1 || step.outputs_size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, ": OP_LOCAL_COPY needs 1 input and 1 output, has ",
              step.inputs_size(), " and ", step.outputs_size()));
        }
        auto out = buffer_by_id.find(step.outputs(0).buffer());
        if (out == buffer_by_id.end()) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, " outputs[0]: buffer ", step.outputs(0).buffer(),
              " is not in plan.buffers"));
        }
        desc.device = out->second->device();
      }
      if (!program.device_rank.contains(desc.device)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": device ", desc.device,
                         " has no entry in program.device_rank"));
      }
      touches_this_worker = program.IsLocal(desc.device);
    }
    // Value-defining steps mark their outputs' tensors computed, whichever
    // worker runs them.
    if (DefinesValues(step)) {
      for (const v1::Operand& operand : step.outputs()) {
        auto it = buffer_by_id.find(operand.buffer());
        if (it != buffer_by_id.end()) {
          program.tensor_computed[it->second->tensor()] = true;
        }
      }
    }
    // Steps of other workers (verification context) are left out; deps on
    // them are then external.
    if (!touches_this_worker) continue;
    desc.deps.assign(step.deps().begin(), step.deps().end());
    if (desc.operand_form) {
      if (step.inputs_size() != 1 || step.outputs_size() != 1 ||
          desc.chain.size() != 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": OP_SEND_RECV without a slice (the operand form) needs ",
            "a group of 2 [sender, receiver], 1 input and 1 output; has ",
            desc.chain.size(), " devices, ", step.inputs_size(), " and ",
            step.outputs_size()));
      }
      ASSIGN_OR_RETURN(
          OperandDesc input,
          resolve(step.inputs(0), what + " inputs[0]", desc.chain[0]));
      ASSIGN_OR_RETURN(
          OperandDesc output,
          resolve(step.outputs(0), what + " outputs[0]", desc.chain[1]));
      RETURN_IF_ERROR(CheckOperandCopy(program, what, input, output));
      desc.tensor = -1;
      desc.inputs.push_back(std::move(input));
      desc.outputs.push_back(std::move(output));
      desc.bytes = RelayElements(desc) * RelayElementSize(desc, program);
      program.steps.push_back(std::move(desc));
      continue;
    }
    if (relay) {
      if (desc.tensor < 0 ||
          desc.tensor >= static_cast<int>(program.tensors.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": tensor ", desc.tensor, " is not in [0, ",
                         program.tensors.size(), ")"));
      }
      desc.slice = BoxFromProto(step.slice());
      RETURN_IF_ERROR(CheckBoxInTensor(desc.slice, program.tensors[desc.tensor],
                                       what + " slice"));
      desc.bytes = NumElements(desc.slice) *
                   DTypeSize(program.tensors[desc.tensor].dtype);
      program.steps.push_back(std::move(desc));
      continue;
    }
    desc.bytes = step.bytes();
    RETURN_IF_ERROR(CheckOperandCounts(step, desc, what));
    for (int i = 0; i < step.inputs_size(); ++i) {
      // A local copy may read another device of the same worker.
      const int device = grouped                              ? desc.chain[i]
                         : desc.op == v1::Step::OP_LOCAL_COPY ? -1
                                                              : desc.device;
      ASSIGN_OR_RETURN(OperandDesc operand,
                       resolve(step.inputs(i),
                               absl::StrCat(what, " inputs[", i, "]"), device));
      desc.inputs.push_back(std::move(operand));
    }
    for (int i = 0; i < step.outputs_size(); ++i) {
      const int device = grouped ? desc.chain[i] : desc.device;
      ASSIGN_OR_RETURN(
          OperandDesc operand,
          resolve(step.outputs(i), absl::StrCat(what, " outputs[", i, "]"),
                  device));
      desc.outputs.push_back(std::move(operand));
    }
    if (desc.op == v1::Step::OP_LOCAL_COPY &&
        (desc.inputs[0].tensor != desc.outputs[0].tensor ||
         desc.inputs[0].box != desc.outputs[0].box)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": OP_LOCAL_COPY input (tensor ", desc.inputs[0].tensor, " ",
          BoxToString(desc.inputs[0].box), ") and output (tensor ",
          desc.outputs[0].tensor, " ", BoxToString(desc.outputs[0].box),
          ") must be the same tensor and slice"));
    }
    if (desc.op == v1::Step::OP_COMPUTE) {
      RETURN_IF_ERROR(CheckComputeOperands(program, step, desc, what));
    }
    if (desc.op == v1::Step::OP_LOCAL_COPY && !desc.inputs[0].local) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": OP_LOCAL_COPY input buffer ", desc.inputs[0].buffer,
          " is not on this worker (a local copy stays on one worker)"));
    }
    program.steps.push_back(std::move(desc));
  }

  absl::flat_hash_set<int> kept;
  for (const StepDesc& step : program.steps) kept.insert(step.id);
  for (StepDesc& step : program.steps) {
    std::vector<int> deps;
    absl::flat_hash_set<int> unique;
    for (int dep : step.deps) {
      if (dep == step.id) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan.steps id ", step.id, " depends on itself"));
      }
      if (kept.contains(dep) && unique.insert(dep).second) deps.push_back(dep);
    }
    step.deps = std::move(deps);
  }
  RETURN_IF_ERROR(CheckAcyclic(program.steps));
  return program;
}

int64_t LocalDeliveredBytes(const ParsedProgram& program,
                            const StepDesc& step) {
  int64_t bytes = 0;
  switch (step.op) {
    case v1::Step::OP_BROADCAST:
    case v1::Step::OP_SEND_RECV:
      for (size_t p = 1; p < step.chain.size(); ++p) {
        if (program.IsLocal(step.chain[p])) bytes += step.bytes;
      }
      return bytes;
    case v1::Step::OP_ALL_GATHER:
    case v1::Step::OP_ALL_REDUCE:
    case v1::Step::OP_REDUCE_SCATTER:
    case v1::Step::OP_ALL_TO_ALL:
      for (int device : step.chain) {
        if (program.IsLocal(device)) bytes += step.bytes;
      }
      return bytes;
    case v1::Step::OP_LOCAL_COPY:
      return step.outputs.empty() || !step.outputs[0].known()
                 ? 0
                 : NumElements(step.outputs[0].box) *
                       DTypeSize(program.tensors[step.outputs[0].tensor].dtype);
    default:
      return 0;
  }
}

}  // namespace meshcast::worker
