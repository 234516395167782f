#include "planner/ir/plan_hazards.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/ir/plan_building.h"
#include "planner/ir/spec_convert.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

// One tensor [8, 8] with a buffer of its whole box on device 0, and a
// second buffer of rows [0, 4) on device 1.
v1::Plan TwoBuffers() {
  v1::Plan plan;
  const int t = AddPlanTensor(plan, {8, 8}, DType::kFloat32,
                              v1::Initializer::KIND_ZEROS);
  AddPlanBuffer(plan, t, 0, {{0, 8}, {0, 8}}, v1::Buffer::ROLE_SCRATCH);
  AddPlanBuffer(plan, t, 1, {{0, 4}, {0, 8}}, v1::Buffer::ROLE_SCRATCH);
  return plan;
}

// A compute step reading `in` and writing `out` (buffer, rows), after
// `deps`.
int Step(v1::Plan& plan, std::pair<int, Box> in, std::pair<int, Box> out,
         std::vector<int> deps = {}) {
  v1::Step& step = *plan.add_steps();
  step.set_id(plan.steps_size() - 1);
  step.set_op(v1::Step::OP_COMPUTE);
  step.mutable_compute()->mutable_elementwise()->set_kind(
      v1::ElementwiseAttrs::KIND_SCALE);
  v1::Operand& i = *step.add_inputs();
  i.set_buffer(in.first);
  if (!in.second.empty()) BoxToProto(in.second, i.mutable_slice());
  v1::Operand& o = *step.add_outputs();
  o.set_buffer(out.first);
  if (!out.second.empty()) BoxToProto(out.second, o.mutable_slice());
  for (int d : deps) step.add_deps(d);
  return step.id();
}

const Box kTop = {{0, 4}, {0, 8}}, kBottom = {{4, 8}, {0, 8}},
          kMiddle = {{2, 6}, {0, 8}};

TEST(PlanHazardsTest, UnorderedWritesOfOneRegionAreARace) {
  v1::Plan plan = TwoBuffers();
  Step(plan, {1, {}}, {0, kTop});
  Step(plan, {1, {}}, {0, kMiddle});
  const absl::Status race = CheckPlanHazards(plan);
  EXPECT_EQ(race.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(race.message(),
              HasSubstr("steps 0 and 1 both touch buffer 0 at [2:4,0:8] "
                        "(step 0 writes, step 1 writes)"));
  // A dependency orders them.
  plan.mutable_steps(1)->add_deps(0);
  EXPECT_TRUE(CheckPlanHazards(plan).ok());
}

TEST(PlanHazardsTest, AReadUnorderedWithAWriteIsARaceButTwoReadsAreNot) {
  v1::Plan plan = TwoBuffers();
  Step(plan, {0, kTop}, {1, {}});       // reads rows 0-4 of buffer 0
  Step(plan, {0, kTop}, {1, {}}, {0});  // reads them again, writes buffer 1
  EXPECT_TRUE(CheckPlanHazards(plan).ok());
  Step(plan, {1, {}}, {0, kMiddle});  // writes rows 2-6: races with both
  const absl::Status race = CheckPlanHazards(plan);
  EXPECT_THAT(race.message(), HasSubstr("step 0 reads, step 2 writes"));
  // Disjoint rows do not race.
  plan.mutable_steps(2)->mutable_outputs(0)->clear_slice();
  BoxToProto(kBottom, plan.mutable_steps(2)->mutable_outputs(0)->mutable_slice());
  plan.mutable_steps(2)->mutable_inputs(0)->set_buffer(0);
  BoxToProto(kBottom, plan.mutable_steps(2)->mutable_inputs(0)->mutable_slice());
  EXPECT_TRUE(CheckPlanHazards(plan).ok()) << CheckPlanHazards(plan);
}

TEST(PlanHazardsTest, OrderThroughAChainCounts) {
  v1::Plan plan = TwoBuffers();
  Step(plan, {1, {}}, {0, {}});
  Step(plan, {0, kBottom}, {0, kTop}, {0});  // in place rows of one buffer
  Step(plan, {0, kTop}, {1, {}}, {1});
  Step(plan, {1, {}}, {0, {}}, {2});  // after 0 through 1 and 2
  EXPECT_TRUE(CheckPlanHazards(plan).ok()) << CheckPlanHazards(plan);
  plan.mutable_steps(3)->clear_deps();
  EXPECT_EQ(CheckPlanHazards(plan).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PlanHazardsTest, MalformedPlans) {
  v1::Plan plan = TwoBuffers();
  Step(plan, {1, {}}, {7, {}});
  EXPECT_THAT(CheckPlanHazards(plan).message(),
              HasSubstr("unknown buffer 7"));
  v1::Plan cycle = TwoBuffers();
  Step(cycle, {1, {}}, {0, {}}, {1});
  Step(cycle, {1, {}}, {0, {}}, {0});
  EXPECT_EQ(CheckPlanHazards(cycle).code(), absl::StatusCode::kInvalidArgument);
  v1::Plan unknown = TwoBuffers();
  Step(unknown, {1, {}}, {0, {}}, {5});
  EXPECT_THAT(CheckPlanHazards(unknown).message(),
              HasSubstr("depends on unknown step 5"));
}

}  // namespace
}  // namespace meshcast
