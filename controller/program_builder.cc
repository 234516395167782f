#include "controller/program_builder.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "proto/dtype_convert.h"

namespace meshcast {
namespace {

// Ops whose devices are given by a CommGroup. OP_COMPUTE runs on `device`
// and OP_LOCAL_COPY on its operands' device; their `group` (0 when unset) is
// ignored, since group 0 may well exist.
bool UsesGroup(v1::Step::Op op) {
  return op != v1::Step::OP_COMPUTE && op != v1::Step::OP_LOCAL_COPY;
}

std::string OpName(v1::Step::Op op) { return v1::Step::Op_Name(op); }

// The plan's groups and buffers by id, checked once for the lookups below.
struct PlanIndex {
  absl::flat_hash_map<int, const v1::CommGroup*> groups;
  absl::flat_hash_map<int, const v1::Buffer*> buffers;
};

// Devices `step` touches (group, compute device, operand buffers), in a
// stable order, without duplicates.
absl::StatusOr<std::vector<int>> StepDevices(const v1::Step& step,
                                             const PlanIndex& index) {
  std::vector<int> devices;
  const auto add = [&](int d) {
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) {
      devices.push_back(d);
    }
  };
  auto group = index.groups.find(step.group());
  if (UsesGroup(step.op())) {
    if (group == index.groups.end()) {
      return absl::InternalError(
          absl::StrCat("step ", step.id(), " (", OpName(step.op()),
                       ") uses unknown group ", step.group()));
    }
  }
  if (step.op() == v1::Step::OP_COMPUTE) {
    add(step.device());
  } else if (UsesGroup(step.op())) {
    for (int d : group->second->devices()) add(d);
  }
  for (const auto* operands : {&step.inputs(), &step.outputs()}) {
    for (const v1::Operand& operand : *operands) {
      auto buffer = index.buffers.find(operand.buffer());
      if (buffer == index.buffers.end()) {
        return absl::InternalError(
            absl::StrCat("step ", step.id(), " (", OpName(step.op()),
                         ") names unknown buffer ", operand.buffer()));
      }
      add(buffer->second->device());
    }
  }
  if (devices.empty()) {
    return absl::InternalError(absl::StrCat(
        "step ", step.id(), " (", OpName(step.op()), ") touches no device"));
  }
  return devices;
}

int64_t ElementsOf(
    const google::protobuf::RepeatedPtrField<v1::Interval>& box) {
  int64_t n = 1;
  for (const v1::Interval& i : box) {
    n *= std::max<int64_t>(0, i.end() - i.begin());
  }
  return n;
}

// Element size of tensor `t` of the plan; 1 when unknown (a malformed plan
// still gets a figure rather than a crash).
int64_t ElementSize(const v1::Plan& plan, int t) {
  if (t < 0 || t >= plan.tensors_size()) return 1;
  absl::StatusOr<DType> dtype =
      DTypeFromProto(plan.tensors(t).dtype(), "tensor.dtype");
  return dtype.ok() ? DTypeSize(*dtype) : 1;
}

}  // namespace

bool DefinesValues(v1::Step::Op op) {
  return op == v1::Step::OP_ALL_REDUCE || op == v1::Step::OP_REDUCE_SCATTER ||
         op == v1::Step::OP_ALL_TO_ALL || op == v1::Step::OP_COMPUTE;
}

bool DefinesValues(const v1::Step& step) {
  // An OP_SEND_RECV without a slice copies between two operands that may
  // be of different tensors (plan.proto): it defines its output's values.
  const bool operand_copy = step.op() == v1::Step::OP_SEND_RECV &&
                            step.slice().empty() &&
                            (step.inputs_size() > 0 || step.outputs_size() > 0);
  return DefinesValues(step.op()) || operand_copy;
}

absl::StatusOr<std::vector<v1::WorkerProgram>> ProjectPlan(
    const v1::Plan& plan, absl::string_view job_id,
    const std::vector<WorkerSlot>& workers) {
  // Device -> index into `workers`.
  absl::flat_hash_map<int, int> owner;
  for (size_t w = 0; w < workers.size(); ++w) {
    for (int d : workers[w].devices) {
      if (!owner.emplace(d, static_cast<int>(w)).second) {
        return absl::InternalError(
            absl::StrCat("device ", d, " is owned by two workers"));
      }
    }
  }
  PlanIndex index;
  for (const v1::CommGroup& group : plan.groups()) {
    index.groups[group.id()] = &group;
  }
  for (const v1::Buffer& buffer : plan.buffers()) {
    index.buffers[buffer.id()] = &buffer;
  }
  // Every device the job touches, and the devices of each step.
  absl::flat_hash_set<int> job_devices;
  for (const v1::Buffer& buffer : plan.buffers()) {
    job_devices.insert(buffer.device());
  }
  std::vector<std::vector<int>> step_devices;
  step_devices.reserve(plan.steps_size());
  for (const v1::Step& step : plan.steps()) {
    absl::StatusOr<std::vector<int>> devices = StepDevices(step, index);
    if (!devices.ok()) return devices.status();
    job_devices.insert(devices->begin(), devices->end());
    step_devices.push_back(*std::move(devices));
  }
  std::vector<int> job_workers;  // indices into `workers`
  {
    std::vector<int> sorted_devices(job_devices.begin(), job_devices.end());
    std::sort(sorted_devices.begin(), sorted_devices.end());
    absl::flat_hash_set<int> seen;
    for (int d : sorted_devices) {
      auto it = owner.find(d);
      if (it == owner.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("device ", d, " has no worker"));
      }
      if (seen.insert(it->second).second) job_workers.push_back(it->second);
    }
  }
  std::sort(job_workers.begin(), job_workers.end(), [&](int a, int b) {
    if (workers[a].host_index != workers[b].host_index) {
      return workers[a].host_index < workers[b].host_index;
    }
    return workers[a].name < workers[b].name;
  });
  absl::flat_hash_map<int, int> worker_rank;  // index into workers -> rank
  for (size_t r = 0; r < job_workers.size(); ++r) {
    worker_rank[job_workers[r]] = static_cast<int>(r);
  }
  std::vector<int> sorted_job_devices(job_devices.begin(), job_devices.end());
  std::sort(sorted_job_devices.begin(), sorted_job_devices.end());

  // The reference closure, the same for every program.
  absl::flat_hash_set<int> reference_buffers;
  for (const v1::Step& step : plan.steps()) {
    if (!DefinesValues(step)) continue;
    for (const v1::Operand& operand : step.inputs()) {
      reference_buffers.insert(operand.buffer());
    }
    for (const v1::Operand& operand : step.outputs()) {
      reference_buffers.insert(operand.buffer());
    }
  }

  std::vector<v1::WorkerProgram> programs;
  programs.reserve(job_workers.size());
  for (size_t r = 0; r < job_workers.size(); ++r) {
    const int w = job_workers[r];
    v1::WorkerProgram program;
    program.set_job_id(std::string(job_id));
    program.set_worker(workers[w].name);
    program.set_world_size(static_cast<int>(job_workers.size()));
    program.set_rank(static_cast<int>(r));
    for (int peer : job_workers) program.add_rank_workers(workers[peer].name);
    std::vector<int> local;
    for (int d : workers[w].devices) {
      if (job_devices.contains(d)) local.push_back(d);
    }
    std::sort(local.begin(), local.end());
    for (int d : local) program.add_local_devices(d);
    for (int d : sorted_job_devices) {
      (*program.mutable_device_rank())[d] = worker_rank[owner[d]];
    }

    v1::Plan* mine = program.mutable_plan();
    mine->set_strategy(plan.strategy());
    mine->set_kind(plan.kind());
    mine->set_predicted_seconds(plan.predicted_seconds());
    mine->set_lower_bound_seconds(plan.lower_bound_seconds());
    *mine->mutable_tensors() = plan.tensors();
    *mine->mutable_tensor_inits() = plan.tensor_inits();
    const absl::flat_hash_set<int> local_set(local.begin(), local.end());
    for (const v1::Buffer& buffer : plan.buffers()) {
      if (local_set.contains(buffer.device()) ||
          reference_buffers.contains(buffer.id())) {
        *mine->add_buffers() = buffer;
      }
    }
    absl::flat_hash_set<int> used_groups;
    for (int s = 0; s < plan.steps_size(); ++s) {
      const v1::Step& step = plan.steps(s);
      const bool touches =
          std::any_of(step_devices[s].begin(), step_devices[s].end(),
                      [&](int d) { return local_set.contains(d); });
      if (!touches && !DefinesValues(step)) continue;
      *mine->add_steps() = step;
      if (UsesGroup(step.op())) used_groups.insert(step.group());
    }
    for (const v1::CommGroup& group : plan.groups()) {
      if (used_groups.contains(group.id())) *mine->add_groups() = group;
    }
    programs.push_back(std::move(program));
  }
  return programs;
}

int64_t DestinationElements(const v1::Plan& plan) {
  int64_t total = 0;
  for (const v1::Buffer& buffer : plan.buffers()) {
    // A user buffer holds the user's values, which no worker checks.
    if (buffer.role() != v1::Buffer::ROLE_DESTINATION ||
        !buffer.user_buffer().empty()) {
      continue;
    }
    total += ElementsOf(buffer.box());
  }
  return total;
}

int64_t DeliveredBytes(const v1::Plan& plan) {
  absl::flat_hash_map<int32_t, int> group_sizes;
  for (const v1::CommGroup& group : plan.groups()) {
    group_sizes[group.id()] = group.devices_size();
  }
  absl::flat_hash_map<int32_t, int> buffer_tensor;
  for (const v1::Buffer& buffer : plan.buffers()) {
    buffer_tensor[buffer.id()] = buffer.tensor();
  }
  int64_t total = 0;
  for (const v1::Step& step : plan.steps()) {
    auto it = group_sizes.find(step.group());
    const int64_t n = it == group_sizes.end() ? 1 : it->second;
    switch (step.op()) {
      case v1::Step::OP_BROADCAST:
        total += step.bytes() * std::max<int64_t>(1, n - 1);
        break;
      case v1::Step::OP_ALL_GATHER:
      case v1::Step::OP_REDUCE_SCATTER:
        total += step.bytes() * std::max<int64_t>(0, n - 1);
        break;
      case v1::Step::OP_ALL_REDUCE:
        total += 2 * step.bytes() * std::max<int64_t>(0, n - 1);
        break;
      case v1::Step::OP_ALL_TO_ALL: {
        if (step.counts_size() == n * n && n > 0) {
          int tensor = step.tensor();
          if (step.inputs_size() > 0) {
            auto bt = buffer_tensor.find(step.inputs(0).buffer());
            if (bt != buffer_tensor.end()) tensor = bt->second;
          }
          int64_t elements = 0;
          for (int64_t r = 0; r < n; ++r) {
            for (int64_t s = 0; s < n; ++s) {
              if (r != s) elements += step.counts(r * n + s);
            }
          }
          total += elements * ElementSize(plan, tensor);
        } else {
          total += n > 0 ? step.bytes() * (n - 1) / n : 0;
        }
        break;
      }
      case v1::Step::OP_COMPUTE:
        break;
      default:  // OP_SEND_RECV, OP_LOCAL_COPY, and anything newer: once
        total += step.bytes();
        break;
    }
  }
  return total;
}

}  // namespace meshcast
