#include "planner/kinds/reshard/reshard_lowering.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/ir/plan_building.h"
#include "planner/ir/spec_convert.h"
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
      AddPlanBuffer(*plan, tensor_index, mesh.devices[i], box, role);
    }
  };
  add(problem.src_mesh, problem.src_spec, v1::Buffer::ROLE_SOURCE);
  add(problem.dst_mesh, problem.dst_spec, v1::Buffer::ROLE_DESTINATION);
}

}  // namespace

absl::StatusOr<v1::Plan> LowerReshardPlan(const ReshardPlan& plan) {
  v1::Plan proto;
  proto.set_kind("reshard");
  proto.set_strategy(plan.strategy);
  for (size_t t = 0; t < plan.problems.size(); ++t) {
    *proto.add_tensors() = TensorToProto(plan.problems[t].tensor);
    proto.add_tensor_inits()->set_kind(v1::Initializer::KIND_PATTERN);
    AddBuffers(plan.problems[t], static_cast<int>(t), &proto);
  }
  PlanGroups groups;
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
    v1::Step* step = proto.add_steps();
    step->set_id(static_cast<int>(s));
    step->set_op(transfer.dst_devices.size() == 1 ? v1::Step::OP_SEND_RECV
                                                  : v1::Step::OP_BROADCAST);
    step->set_group(groups.FindRelay(proto, transfer));
    step->set_tensor(transfer.tensor);
    BoxToProto(transfer.slice, step->mutable_slice());
    step->set_bytes(transfer.bytes);
    step->set_chunk_bytes(transfer.chunk_bytes);
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

}  // namespace meshcast
