#include "worker/program.h"

#include <deque>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshcast/v1/types.pb.h"
#include "proto/dtype_convert.h"
#include "util/status_macros.h"
#include "worker/box_runs.h"

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

}  // namespace

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

  absl::flat_hash_set<std::tuple<int, int, int>> seen_buffers;
  for (const v1::Buffer& buffer : plan.buffers()) {
    const std::string what = absl::StrCat("plan.buffers id ", buffer.id());
    if (!local.contains(buffer.device())) continue;  // another worker's
    if (buffer.role() == v1::Buffer::ROLE_SCRATCH) continue;  // unused yet
    if (buffer.role() != v1::Buffer::ROLE_SOURCE &&
        buffer.role() != v1::Buffer::ROLE_DESTINATION) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": role must be ROLE_SOURCE or ROLE_DESTINATION"));
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
    desc.role = buffer.role() == v1::Buffer::ROLE_SOURCE
                    ? BufferRole::kSource
                    : BufferRole::kDestination;
    RETURN_IF_ERROR(CheckBoxInTensor(desc.box, program.tensors[desc.tensor],
                                     what + " box"));
    if (!seen_buffers.insert({desc.device, desc.tensor, buffer.role()})
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
    if (step.op() != v1::Step::OP_BROADCAST &&
        step.op() != v1::Step::OP_SEND_RECV) {
      return absl::UnimplementedError(absl::StrCat(
          what, ": op ", v1::Step::Op_Name(step.op()),
          " is not supported by the worker (supported: OP_BROADCAST, "
          "OP_SEND_RECV)"));
    }
    auto group = groups.find(step.group());
    if (group == groups.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": group ", step.group(), " is not in plan.groups"));
    }
    StepDesc desc;
    desc.id = step.id();
    desc.tensor = step.tensor();
    desc.stage = step.stage();
    desc.op = step.op();
    desc.chain.assign(group->second->devices().begin(),
                      group->second->devices().end());
    if (desc.chain.size() < 2 ||
        desc.chain.size() > static_cast<size_t>(kMaxChainLength)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": group ", step.group(), " has ", desc.chain.size(),
          " devices; need 2 to ", kMaxChainLength));
    }
    absl::flat_hash_set<int> in_chain;
    bool touches_this_worker = false;
    for (int device : desc.chain) {
      if (!in_chain.insert(device).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": group ", step.group(), " lists device ",
                         device, " twice"));
      }
      if (!program.device_rank.contains(device)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": device ", device, " of group ", step.group(),
                         " has no entry in program.device_rank"));
      }
      touches_this_worker |= program.IsLocal(device);
    }
    // The controller only sends steps that touch this worker; tolerate
    // others by leaving them out (deps on them are then external).
    if (!touches_this_worker) continue;
    if (desc.tensor < 0 ||
        desc.tensor >= static_cast<int>(program.tensors.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": tensor ", desc.tensor, " is not in [0, ",
                       program.tensors.size(), ")"));
    }
    desc.slice = BoxFromProto(step.slice());
    RETURN_IF_ERROR(CheckBoxInTensor(desc.slice, program.tensors[desc.tensor],
                                     what + " slice"));
    desc.bytes =
        NumElements(desc.slice) * DTypeSize(program.tensors[desc.tensor].dtype);
    desc.deps.assign(step.deps().begin(), step.deps().end());
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

}  // namespace meshcast::worker
