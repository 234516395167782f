#include "planner/kinds/reshard/reshard_lowering.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/sharding.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;

// 8x4 int32 from 1x2 S0R on devices {0, 1} to 1x2 RR on devices {2, 3}: two
// relay chains, the second depending on the first.
ReshardPlan HandMadePlan() {
  ReshardPlan plan;
  plan.strategy = "hand";
  ReshardProblem problem;
  problem.tensor = {{8, 4}, DType::kInt32};
  problem.src_mesh = {{1, 2}, {0, 1}};
  problem.src_spec = *ShardingSpec::Parse("S1R");
  problem.dst_mesh = {{1, 2}, {2, 3}};
  problem.dst_spec = *ShardingSpec::Parse("RR");
  plan.problems.push_back(problem);
  Transfer first;
  first.slice = {{0, 4}, {0, 4}};
  first.src_device = 0;
  first.dst_devices = {2, 3};
  first.bytes = 64;
  Transfer second;
  second.slice = {{4, 8}, {0, 4}};
  second.src_device = 1;
  second.dst_devices = {3};
  second.bytes = 64;
  second.stage = 1;
  second.deps = {0};
  plan.transfers = {first, second};
  return plan;
}

TEST(ReshardLoweringTest, BuffersFollowTheLayouts) {
  absl::StatusOr<v1::Plan> plan = LowerReshardPlan(HandMadePlan());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kind(), "reshard");
  EXPECT_EQ(plan->strategy(), "hand");
  ASSERT_EQ(plan->tensor_inits_size(), 1);
  EXPECT_EQ(plan->tensor_inits(0).kind(), v1::Initializer::KIND_PATTERN);
  ASSERT_EQ(plan->buffers_size(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(plan->buffers(i).id(), i);
  EXPECT_EQ(plan->buffers(0).role(), v1::Buffer::ROLE_SOURCE);
  EXPECT_EQ(plan->buffers(0).box(0).end(), 4);  // rows 0..4 on device 0
  EXPECT_EQ(plan->buffers(1).box(0).begin(), 4);
  EXPECT_EQ(plan->buffers(2).role(), v1::Buffer::ROLE_DESTINATION);
  EXPECT_EQ(plan->buffers(2).box(0).end(), 8);  // everything on device 2
}

TEST(ReshardLoweringTest, StepsAndGroups) {
  absl::StatusOr<v1::Plan> plan = LowerReshardPlan(HandMadePlan());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->groups_size(), 2);
  EXPECT_THAT(plan->groups(0).devices(), ElementsAre(0, 2, 3));
  EXPECT_THAT(plan->groups(1).devices(), ElementsAre(1, 3));
  ASSERT_EQ(plan->steps_size(), 2);
  EXPECT_EQ(plan->steps(0).op(), v1::Step::OP_BROADCAST);
  EXPECT_EQ(plan->steps(1).op(), v1::Step::OP_SEND_RECV);
  EXPECT_THAT(plan->steps(1).deps(), ElementsAre(0));
  EXPECT_EQ(plan->steps(1).stage(), 1);
  EXPECT_EQ(plan->steps(1).bytes(), 64);
  EXPECT_EQ(plan->steps(1).slice(0).begin(), 4);
}

TEST(ReshardLoweringTest, RejectsAForwardDependency) {
  ReshardPlan bad = HandMadePlan();
  bad.transfers[0].deps = {1};
  absl::StatusOr<v1::Plan> plan = LowerReshardPlan(bad);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace meshcast
