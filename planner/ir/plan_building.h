// Plan building: the appends every job kind's lowering makes to a
// meshcast.v1.Plan — a tensor with its initializer, a buffer whose id is
// its position, and a communication group shared by the steps over the same
// devices — so the IR's numbering rules live in one place.
//
//   v1::Plan plan;
//   const int a = AddPlanTensor(plan, {m, k}, DType::kFloat32,
//                               v1::Initializer::KIND_RANDOM, /*seed=*/1);
//   const int a0 = AddPlanBuffer(plan, a, /*device=*/0, {{0, m}, {0, k}},
//                                v1::Buffer::ROLE_SOURCE);
//   PlanGroups groups;
//   step.set_group(groups.Find(plan, {0, 4, 5}));          // chain / group
//   step.set_group(groups.Find(plan, {0, 4, 5}, {-1, 0, 0}));  // relay tree
//
// Contract: Plan.tensors and Plan.tensor_inits stay parallel; a buffer's
// id equals its index in Plan.buffers. Nothing is validated here (the
// lowering owns its shapes); the worker and VerifyPlan check the result.
// Thread safety: pure functions over the plan they are given.
#ifndef MESHCAST_PLANNER_IR_PLAN_BUILDING_H_
#define MESHCAST_PLANNER_IR_PLAN_BUILDING_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/types/span.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/plan.h"
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

// The CommGroups of one plan, appended on first use: steps over the same
// devices (and, for relay trees, the same parents) share one group.
class PlanGroups {
 public:
  // The id of the group of `devices` with CommGroup.parents `parents`
  // (empty: a chain or a collective group), appended to `plan` with id =
  // its position if new. Use one PlanGroups per plan.
  int Find(v1::Plan& plan, absl::Span<const int> devices,
           absl::Span<const int> parents = {});
  // The group of a planner transfer: src then dst devices, and the tree's
  // parents in the IR's form (rank 0's -1 first) when it has them.
  int FindRelay(v1::Plan& plan, const Transfer& transfer);

 private:
  // devices, then (a tree) -1 and the parents.
  std::map<std::vector<int>, int> ids_;
};

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_IR_PLAN_BUILDING_H_
