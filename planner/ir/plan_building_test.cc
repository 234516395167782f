#include "planner/ir/plan_building.h"

#include "gtest/gtest.h"

namespace meshcast {
namespace {

TEST(PlanBuildingTest, TensorsAndInitializersStayParallel) {
  v1::Plan plan;
  EXPECT_EQ(AddPlanTensor(plan, {4, 8}, DType::kFloat32,
                          v1::Initializer::KIND_RANDOM, 7),
            0);
  EXPECT_EQ(AddPlanTensor(plan, {3}, DType::kInt32,
                          v1::Initializer::KIND_PATTERN),
            1);
  ASSERT_EQ(plan.tensors_size(), 2);
  ASSERT_EQ(plan.tensor_inits_size(), 2);
  EXPECT_EQ(plan.tensors(0).shape_size(), 2);
  EXPECT_EQ(plan.tensors(0).shape(1), 8);
  EXPECT_EQ(plan.tensors(0).dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(plan.tensor_inits(0).kind(), v1::Initializer::KIND_RANDOM);
  EXPECT_EQ(plan.tensor_inits(0).seed(), 7u);
  EXPECT_EQ(plan.tensors(1).dtype(), v1::DTYPE_INT32);
  EXPECT_EQ(plan.tensor_inits(1).kind(), v1::Initializer::KIND_PATTERN);
}

TEST(PlanBuildingTest, StepsOverTheSameDevicesAndTreeShareAGroup) {
  v1::Plan plan;
  plan.add_groups()->set_id(0);  // a group the table did not append
  PlanGroups groups;
  const int chain = groups.Find(plan, {0, 4, 5});
  EXPECT_EQ(chain, 1);
  EXPECT_EQ(groups.Find(plan, {0, 4, 5}), chain);
  const int tree = groups.Find(plan, {0, 4, 5}, {-1, 0, 0});
  EXPECT_EQ(tree, 2);
  EXPECT_EQ(groups.Find(plan, {0, 4, 5}, {-1, 0, 0}), tree);
  EXPECT_EQ(groups.Find(plan, {0, 4, 5}, {-1, 0, 1}), 3);
  EXPECT_EQ(groups.Find(plan, {0, 5, 4}), 4);
  ASSERT_EQ(plan.groups_size(), 5);
  EXPECT_EQ(plan.groups(2).id(), 2);
  EXPECT_EQ(std::vector<int>(plan.groups(2).devices().begin(),
                             plan.groups(2).devices().end()),
            (std::vector<int>{0, 4, 5}));
  EXPECT_EQ(std::vector<int>(plan.groups(2).parents().begin(),
                             plan.groups(2).parents().end()),
            (std::vector<int>{-1, 0, 0}));
  EXPECT_EQ(plan.groups(1).parents_size(), 0);
}

TEST(PlanBuildingTest, BufferIdsArePositions) {
  v1::Plan plan;
  const int t = AddPlanTensor(plan, {4, 8}, DType::kFloat32,
                              v1::Initializer::KIND_ZEROS);
  EXPECT_EQ(AddPlanBuffer(plan, t, 5, {{0, 2}, {0, 8}},
                          v1::Buffer::ROLE_SOURCE),
            0);
  EXPECT_EQ(AddPlanBuffer(plan, t, 6, {{2, 4}, {0, 8}},
                          v1::Buffer::ROLE_DESTINATION),
            1);
  ASSERT_EQ(plan.buffers_size(), 2);
  EXPECT_EQ(plan.buffers(1).id(), 1);
  EXPECT_EQ(plan.buffers(1).tensor(), t);
  EXPECT_EQ(plan.buffers(1).device(), 6);
  EXPECT_EQ(plan.buffers(1).role(), v1::Buffer::ROLE_DESTINATION);
  ASSERT_EQ(plan.buffers(1).box_size(), 2);
  EXPECT_EQ(plan.buffers(1).box(0).begin(), 2);
  EXPECT_EQ(plan.buffers(1).box(0).end(), 4);
}

}  // namespace
}  // namespace meshcast
