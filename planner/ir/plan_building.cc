#include "planner/ir/plan_building.h"

#include "planner/ir/spec_convert.h"

namespace meshcast {

int AddPlanTensor(v1::Plan& plan, const std::vector<int64_t>& shape,
                  DType dtype, v1::Initializer::Kind init, uint64_t seed) {
  v1::TensorSpec* tensor = plan.add_tensors();
  for (int64_t extent : shape) tensor->add_shape(extent);
  tensor->set_dtype(DTypeToProto(dtype));
  v1::Initializer* initializer = plan.add_tensor_inits();
  initializer->set_kind(init);
  initializer->set_seed(seed);
  return plan.tensors_size() - 1;
}

int AddPlanBuffer(v1::Plan& plan, int tensor, int device, const Box& box,
                  v1::Buffer::Role role) {
  v1::Buffer* buffer = plan.add_buffers();
  buffer->set_id(plan.buffers_size() - 1);
  buffer->set_tensor(tensor);
  buffer->set_device(device);
  BoxToProto(box, buffer->mutable_box());
  buffer->set_role(role);
  return buffer->id();
}

int PlanGroups::Find(v1::Plan& plan, absl::Span<const int> devices,
                     absl::Span<const int> parents) {
  std::vector<int> key(devices.begin(), devices.end());
  if (!parents.empty()) {
    key.push_back(-1);
    key.insert(key.end(), parents.begin(), parents.end());
  }
  auto [it, fresh] = ids_.try_emplace(std::move(key), plan.groups_size());
  if (fresh) {
    v1::CommGroup& group = *plan.add_groups();
    group.set_id(it->second);
    for (int device : devices) group.add_devices(device);
    for (int parent : parents) group.add_parents(parent);
  }
  return it->second;
}

int PlanGroups::FindRelay(v1::Plan& plan, const Transfer& transfer) {
  std::vector<int> devices = {transfer.src_device};
  devices.insert(devices.end(), transfer.dst_devices.begin(),
                 transfer.dst_devices.end());
  std::vector<int> parents;
  if (!transfer.parents.empty()) {
    parents.push_back(-1);
    parents.insert(parents.end(), transfer.parents.begin(),
                   transfer.parents.end());
  }
  return Find(plan, devices, parents);
}

}  // namespace meshcast
