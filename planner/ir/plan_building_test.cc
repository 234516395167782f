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
