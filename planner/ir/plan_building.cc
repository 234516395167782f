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

}  // namespace meshcast
