#include "controller/program_builder.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "controller/proto_convert.h"
#include "planner/sharding.h"

namespace meshcast {
namespace {

void AddBuffers(const ReshardProblem& problem, int tensor_index,
                v1::Plan* plan) {
  const auto add = [&](const DeviceMesh& mesh, const ShardingSpec& spec,
                       v1::Buffer::Role role) {
    for (int i = 0; i < mesh.num_devices(); ++i) {
      Box box = DeviceBox(problem.tensor, mesh, spec, i);
      if (IsEmpty(box)) continue;
      v1::Buffer* buffer = plan->add_buffers();
      buffer->set_id(plan->buffers_size() - 1);
      buffer->set_tensor(tensor_index);
      buffer->set_device(mesh.devices[i]);
      BoxToProto(box, buffer->mutable_box());
      buffer->set_role(role);
    }
  };
  add(problem.src_mesh, problem.src_spec, v1::Buffer::ROLE_SOURCE);
  add(problem.dst_mesh, problem.dst_spec, v1::Buffer::ROLE_DESTINATION);
}

}  // namespace

absl::StatusOr<v1::Plan> BuildPlanProto(const ReshardPlan& plan,
                                        double predicted_seconds,
                                        double lower_bound_seconds) {
  v1::Plan proto;
  proto.set_strategy(plan.strategy);
  proto.set_predicted_seconds(predicted_seconds);
  proto.set_lower_bound_seconds(lower_bound_seconds);
  for (size_t t = 0; t < plan.problems.size(); ++t) {
    *proto.add_tensors() = TensorToProto(plan.problems[t].tensor);
    AddBuffers(plan.problems[t], static_cast<int>(t), &proto);
  }
  // Ordered device list -> group id; std::map keeps vectors as keys simple.
  std::map<std::vector<int>, int> group_ids;
  for (size_t s = 0; s < plan.transfers.size(); ++s) {
    const Transfer& transfer = plan.transfers[s];
    if (transfer.tensor < 0 ||
        transfer.tensor >= static_cast<int>(plan.problems.size())) {
      return absl::InternalError(absl::StrCat("transfer ", s, " names tensor ",
                                              transfer.tensor, " of ",
                                              plan.problems.size()));
    }
    if (transfer.dst_devices.empty()) {
      return absl::InternalError(
          absl::StrCat("transfer ", s, " has no receiver"));
    }
    std::vector<int> chain;
    chain.push_back(transfer.src_device);
    chain.insert(chain.end(), transfer.dst_devices.begin(),
                 transfer.dst_devices.end());
    auto [it, inserted] =
        group_ids.emplace(chain, static_cast<int>(group_ids.size()));
    if (inserted) {
      v1::CommGroup* group = proto.add_groups();
      group->set_id(it->second);
      for (int d : chain) group->add_devices(d);
    }
    v1::Step* step = proto.add_steps();
    step->set_id(static_cast<int>(s));
    step->set_op(transfer.dst_devices.size() == 1 ? v1::Step::OP_SEND_RECV
                                                  : v1::Step::OP_BROADCAST);
    step->set_group(it->second);
    step->set_tensor(transfer.tensor);
    BoxToProto(transfer.slice, step->mutable_slice());
    step->set_bytes(transfer.bytes);
    step->set_stage(transfer.stage);
    for (int dep : transfer.deps) {
      if (dep < 0 || dep >= static_cast<int>(s)) {
        return absl::InternalError(absl::StrCat(
            "transfer ", s, " depends on ", dep, ", not an earlier transfer"));
      }
      step->add_deps(dep);
    }
  }
  return proto;
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
  absl::flat_hash_map<int, const v1::CommGroup*> groups;
  for (const v1::CommGroup& group : plan.groups()) {
    groups[group.id()] = &group;
  }
  // Every device the job touches, and the workers owning them.
  absl::flat_hash_set<int> job_devices;
  for (const v1::Buffer& buffer : plan.buffers()) {
    job_devices.insert(buffer.device());
  }
  for (const v1::Step& step : plan.steps()) {
    auto it = groups.find(step.group());
    if (it == groups.end()) {
      return absl::InternalError(absl::StrCat(
          "step ", step.id(), " uses unknown group ", step.group()));
    }
    job_devices.insert(it->second->devices().begin(),
                       it->second->devices().end());
  }
  std::vector<int> job_workers;  // indices into `workers`
  {
    absl::flat_hash_set<int> seen;
    for (int d : job_devices) {
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

  std::vector<v1::WorkerProgram> programs;
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
    std::vector<int> sorted_devices(job_devices.begin(), job_devices.end());
    std::sort(sorted_devices.begin(), sorted_devices.end());
    for (int d : sorted_devices) {
      (*program.mutable_device_rank())[d] = worker_rank[owner[d]];
    }

    v1::Plan* mine = program.mutable_plan();
    mine->set_strategy(plan.strategy());
    mine->set_predicted_seconds(plan.predicted_seconds());
    mine->set_lower_bound_seconds(plan.lower_bound_seconds());
    *mine->mutable_tensors() = plan.tensors();
    const absl::flat_hash_set<int> local_set(local.begin(), local.end());
    for (const v1::Buffer& buffer : plan.buffers()) {
      if (local_set.contains(buffer.device())) *mine->add_buffers() = buffer;
    }
    absl::flat_hash_set<int> used_groups;
    for (const v1::Step& step : plan.steps()) {
      const v1::CommGroup& group = *groups[step.group()];
      const bool touches =
          std::any_of(group.devices().begin(), group.devices().end(),
                      [&](int d) { return local_set.contains(d); });
      if (!touches) continue;
      *mine->add_steps() = step;
      used_groups.insert(step.group());
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
    if (buffer.role() != v1::Buffer::ROLE_DESTINATION) continue;
    int64_t n = 1;
    for (const v1::Interval& i : buffer.box()) {
      n *= std::max<int64_t>(0, i.end() - i.begin());
    }
    total += n;
  }
  return total;
}

int64_t DeliveredBytes(const v1::Plan& plan) {
  absl::flat_hash_map<int32_t, int> group_sizes;
  for (const v1::CommGroup& group : plan.groups()) {
    group_sizes[group.id()] = group.devices_size();
  }
  int64_t total = 0;
  for (const v1::Step& step : plan.steps()) {
    int receivers = 1;
    if (step.op() == v1::Step::OP_BROADCAST) {
      auto it = group_sizes.find(step.group());
      receivers = it == group_sizes.end() ? 1 : std::max(1, it->second - 1);
    }
    total += step.bytes() * receivers;
  }
  return total;
}

}  // namespace meshcast
