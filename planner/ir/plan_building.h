// Plan building: the two appends every job kind's lowering makes to a
// meshcast.v1.Plan — a tensor with its initializer, and a buffer whose id
// is its position — so the IR's numbering rules live in one place.
//
//   v1::Plan plan;
//   const int a = AddPlanTensor(plan, {m, k}, DType::kFloat32,
//                               v1::Initializer::KIND_RANDOM, /*seed=*/1);
//   const int a0 = AddPlanBuffer(plan, a, /*device=*/0, {{0, m}, {0, k}},
//                                v1::Buffer::ROLE_SOURCE);
//
// Contract: Plan.tensors and Plan.tensor_inits stay parallel; a buffer's
// id equals its index in Plan.buffers. Nothing is validated here (the
// lowering owns its shapes); the worker and VerifyPlan check the result.
// Thread safety: pure functions over the plan they are given.
#ifndef MESHCAST_PLANNER_IR_PLAN_BUILDING_H_
#define MESHCAST_PLANNER_IR_PLAN_BUILDING_H_

#include <cstdint>
#include <vector>

#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"

namespace meshcast {

// Appends a tensor of `shape` and `dtype` initialized by `init` (`seed` for
// KIND_RANDOM); returns its index.
int AddPlanTensor(v1::Plan& plan, const std::vector<int64_t>& shape,
                  DType dtype, v1::Initializer::Kind init, uint64_t seed = 0);

// Appends the buffer of `tensor` covering `box` on global `device`;
// returns its id.
int AddPlanBuffer(v1::Plan& plan, int tensor, int device, const Box& box,
                  v1::Buffer::Role role);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_IR_PLAN_BUILDING_H_
