#include "planner/ir/step_order.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Steps with these ids and deps, in this order.
v1::Plan Steps(const std::vector<std::pair<int, std::vector<int>>>& steps) {
  v1::Plan plan;
  for (const auto& [id, deps] : steps) {
    v1::Step& step = *plan.add_steps();
    step.set_id(id);
    step.set_op(v1::Step::OP_COMPUTE);
    for (int dep : deps) step.add_deps(dep);
  }
  return plan;
}

TEST(StepOrderTest, DependenciesFirstThenPlanPosition) {
  // Ids need not be positions; step 7 (position 0) waits for id 3.
  const v1::Plan plan = Steps({{7, {3}}, {3, {}}, {5, {}}, {9, {7, 5}}});
  absl::StatusOr<std::vector<int>> order = StepsInDependencyOrder(plan);
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_THAT(*order, ElementsAre(1, 0, 2, 3));
  // A plan already in order comes back unchanged.
  const v1::Plan sorted = Steps({{0, {}}, {1, {0}}, {2, {}}, {3, {1, 2}}});
  EXPECT_THAT(*StepsInDependencyOrder(sorted), ElementsAre(0, 1, 2, 3));
}

TEST(StepOrderTest, CyclesUnknownDepsAndReusedIdsAreNamed) {
  EXPECT_THAT(StepsInDependencyOrder(Steps({{0, {}}, {1, {2}}, {2, {1}}}))
                  .status()
                  .message(),
              HasSubstr("plan step 1 (OP_COMPUTE): deps form a cycle"));
  EXPECT_THAT(
      StepsInDependencyOrder(Steps({{0, {4}}})).status().message(),
      HasSubstr("plan step 0 (OP_COMPUTE): depends on unknown step 4"));
  EXPECT_THAT(
      StepsInDependencyOrder(Steps({{0, {}}, {0, {}}})).status().message(),
      HasSubstr("id used by an earlier step"));
}

TEST(StepOrderTest, AProjectionSkipsDepsOnOtherWorkersSteps) {
  // Step 8 runs elsewhere: 4's dep on it orders nothing here, 6 still
  // waits for 4, and a cycle is still one.
  const StepOrderOptions projection{.skip_unknown_deps = true};
  absl::StatusOr<std::vector<int>> order =
      StepsInDependencyOrder(Steps({{6, {4}}, {4, {8}}}), projection);
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_THAT(*order, ElementsAre(1, 0));
  EXPECT_THAT(StepsInDependencyOrder(Steps({{1, {2, 8}}, {2, {1}}}), projection)
                  .status()
                  .message(),
              HasSubstr("deps form a cycle"));
}

}  // namespace
}  // namespace meshcast
