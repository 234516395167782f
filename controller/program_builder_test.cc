#include "controller/program_builder.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/strategy.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// 2 hosts x 2 devices; a 4x4 int32 tensor moves from mesh [0,1] (S0R: rows
// split) to mesh [2,3] (RS0: columns split).
ReshardPlan HandMadePlan() {
  ReshardProblem problem;
  problem.tensor.shape = {4, 4};
  problem.tensor.dtype = DType::kInt32;
  problem.src_mesh.shape = {1, 2};
  problem.src_mesh.devices = {0, 1};
  problem.src_spec = *ShardingSpec::Parse("S1R");
  problem.dst_mesh.shape = {1, 2};
  problem.dst_mesh.devices = {2, 3};
  problem.dst_spec = *ShardingSpec::Parse("RS1");
  ReshardPlan plan;
  plan.strategy = "hand";
  plan.problems = {problem};
  // Device 0 holds rows 0..2, device 1 rows 2..4. Device 2 needs columns
  // 0..2, device 3 columns 2..4.
  plan.transfers.push_back({0, {{0, 2}, {0, 2}}, 0, {2}, 16, 0, {}});  // 0 -> 2
  plan.transfers.push_back({0, {{0, 2}, {2, 4}}, 0, {3}, 16, 0, {}});  // 0 -> 3
  plan.transfers.push_back({0, {{2, 4}, {0, 2}}, 1, {2}, 16, 0, {}});  // 1 -> 2
  // A relay chain 1 -> 3 -> 2 of a slice 2 already has, to exercise groups
  // of three, and a dependency.
  plan.transfers.push_back({0, {{2, 4}, {2, 4}}, 1, {3, 2}, 16, 1, {2}});
  // Same chain as transfer 0: must share its group.
  plan.transfers.push_back({0, {{0, 1}, {0, 1}}, 0, {2}, 4, 1, {0}});
  return plan;
}

std::vector<WorkerSlot> TwoWorkers() {
  // Deliberately listed in reverse host order.
  return {{"beta", 1, {2, 3}}, {"alpha", 0, {0, 1}}};
}

TEST(BuildPlanProtoTest, BuffersFollowTheLayouts) {
  absl::StatusOr<v1::Plan> plan = BuildPlanProto(HandMadePlan(), 1.5, 0.5);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->strategy(), "hand");
  EXPECT_DOUBLE_EQ(plan->predicted_seconds(), 1.5);
  EXPECT_DOUBLE_EQ(plan->lower_bound_seconds(), 0.5);
  ASSERT_EQ(plan->tensors_size(), 1);
  EXPECT_THAT(plan->tensors(0).shape(), ElementsAre(4, 4));
  EXPECT_EQ(plan->tensors(0).dtype(), v1::DTYPE_INT32);
  ASSERT_EQ(plan->buffers_size(), 4);
  for (int i = 0; i < plan->buffers_size(); ++i) {
    EXPECT_EQ(plan->buffers(i).id(), i);
  }
  // Sources: rows split over devices 0 and 1.
  EXPECT_EQ(plan->buffers(0).role(), v1::Buffer::ROLE_SOURCE);
  EXPECT_EQ(plan->buffers(0).device(), 0);
  EXPECT_EQ(plan->buffers(0).box(0).begin(), 0);
  EXPECT_EQ(plan->buffers(0).box(0).end(), 2);
  EXPECT_EQ(plan->buffers(0).box(1).end(), 4);
  EXPECT_EQ(plan->buffers(1).device(), 1);
  EXPECT_EQ(plan->buffers(1).box(0).begin(), 2);
  // Destinations: columns split over devices 2 and 3.
  EXPECT_EQ(plan->buffers(2).role(), v1::Buffer::ROLE_DESTINATION);
  EXPECT_EQ(plan->buffers(2).device(), 2);
  EXPECT_EQ(plan->buffers(2).box(1).end(), 2);
  EXPECT_EQ(plan->buffers(3).device(), 3);
  EXPECT_EQ(plan->buffers(3).box(1).begin(), 2);
  EXPECT_EQ(DestinationElements(*plan), 16);
}

TEST(BuildPlanProtoTest, StepsAndGroups) {
  absl::StatusOr<v1::Plan> plan = BuildPlanProto(HandMadePlan(), 1, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->steps_size(), 5);
  // Distinct chains: [0,2], [0,3], [1,2], [1,3,2].
  ASSERT_EQ(plan->groups_size(), 4);
  EXPECT_THAT(plan->groups(3).devices(), ElementsAre(1, 3, 2));
  EXPECT_EQ(plan->steps(0).group(), plan->steps(4).group());
  EXPECT_NE(plan->steps(0).group(), plan->steps(1).group());
  EXPECT_EQ(plan->steps(0).op(), v1::Step::OP_SEND_RECV);
  EXPECT_EQ(plan->steps(3).op(), v1::Step::OP_BROADCAST);
  EXPECT_THAT(plan->steps(3).deps(), ElementsAre(2));
  EXPECT_EQ(plan->steps(3).stage(), 1);
  EXPECT_EQ(plan->steps(3).bytes(), 16);
  EXPECT_EQ(plan->steps(3).slice(1).begin(), 2);
  for (int i = 0; i < plan->steps_size(); ++i) {
    EXPECT_EQ(plan->steps(i).id(), i);
  }
}

TEST(BuildPlanProtoTest, RejectsForwardDependency) {
  ReshardPlan bad = HandMadePlan();
  bad.transfers[0].deps = {3};
  absl::StatusOr<v1::Plan> plan = BuildPlanProto(bad, 1, 1);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("transfer 0 depends on 3"));
}

TEST(ProjectPlanTest, RanksFollowHostOrder) {
  v1::Plan plan = *BuildPlanProto(HandMadePlan(), 1, 1);
  absl::StatusOr<std::vector<v1::WorkerProgram>> programs =
      ProjectPlan(plan, "job-000007", TwoWorkers());
  ASSERT_TRUE(programs.ok()) << programs.status();
  ASSERT_EQ(programs->size(), 2u);
  const v1::WorkerProgram& alpha = (*programs)[0];
  const v1::WorkerProgram& beta = (*programs)[1];
  EXPECT_EQ(alpha.worker(), "alpha");
  EXPECT_EQ(alpha.rank(), 0);
  EXPECT_EQ(beta.worker(), "beta");
  EXPECT_EQ(beta.rank(), 1);
  for (const v1::WorkerProgram& p : *programs) {
    EXPECT_EQ(p.job_id(), "job-000007");
    EXPECT_EQ(p.world_size(), 2);
    EXPECT_THAT(p.rank_workers(), ElementsAre("alpha", "beta"));
    EXPECT_EQ(p.device_rank().size(), 4u);
    EXPECT_EQ(p.device_rank().at(0), 0);
    EXPECT_EQ(p.device_rank().at(1), 0);
    EXPECT_EQ(p.device_rank().at(2), 1);
    EXPECT_EQ(p.device_rank().at(3), 1);
    EXPECT_EQ(p.plan().tensors_size(), 1);
  }
  EXPECT_THAT(alpha.local_devices(), ElementsAre(0, 1));
  EXPECT_THAT(beta.local_devices(), ElementsAre(2, 3));
}

TEST(ProjectPlanTest, EachProgramHoldsItsBuffersStepsAndGroups) {
  v1::Plan plan = *BuildPlanProto(HandMadePlan(), 1, 1);
  // A third worker whose devices the plan never touches gets no program.
  std::vector<WorkerSlot> slots = TwoWorkers();
  slots.push_back({"idle", 2, {4, 5}});
  std::vector<v1::WorkerProgram> programs =
      *ProjectPlan(plan, "job-000001", slots);
  ASSERT_EQ(programs.size(), 2u);
  std::set<int> all_steps;
  for (const v1::WorkerProgram& p : programs) {
    const std::set<int> local(p.local_devices().begin(),
                              p.local_devices().end());
    for (const v1::Buffer& b : p.plan().buffers()) {
      EXPECT_TRUE(local.count(b.device())) << p.worker() << " " << b.device();
    }
    std::set<int> groups;
    for (const v1::CommGroup& g : p.plan().groups()) groups.insert(g.id());
    for (const v1::Step& s : p.plan().steps()) {
      all_steps.insert(s.id());
      EXPECT_TRUE(groups.count(s.group())) << "step " << s.id();
    }
    // Groups are only those the kept steps use.
    for (const v1::CommGroup& g : p.plan().groups()) {
      bool used = false;
      for (const v1::Step& s : p.plan().steps()) used |= s.group() == g.id();
      EXPECT_TRUE(used) << "group " << g.id();
    }
  }
  EXPECT_EQ(programs[0].plan().buffers_size(), 2);  // two sources
  EXPECT_EQ(programs[1].plan().buffers_size(), 2);  // two destinations
  // Every step touches both hosts here, so both programs have all steps.
  EXPECT_EQ(programs[0].plan().steps_size(), 5);
  EXPECT_EQ(programs[1].plan().steps_size(), 5);
  EXPECT_EQ(all_steps.size(), 5u);
  // Global ids and deps survive the projection.
  EXPECT_THAT(programs[1].plan().steps(3).deps(), ElementsAre(2));
}

TEST(ProjectPlanTest, StepsOnOtherWorkersAreLeftOut) {
  // Intra-host transfer on host 0 only: host 1's worker must not see it.
  ReshardPlan plan = HandMadePlan();
  plan.transfers.push_back({0, {{0, 1}, {0, 1}}, 0, {1}, 4, 0, {}});
  v1::Plan proto = *BuildPlanProto(plan, 1, 1);
  std::vector<v1::WorkerProgram> programs =
      *ProjectPlan(proto, "job-000001", TwoWorkers());
  ASSERT_EQ(programs.size(), 2u);
  EXPECT_EQ(programs[0].plan().steps_size(), 6);
  EXPECT_EQ(programs[1].plan().steps_size(), 5);
  for (const v1::Step& s : programs[1].plan().steps()) EXPECT_NE(s.id(), 5);
}

TEST(ProjectPlanTest, DeviceWithoutWorkerIsAnError) {
  v1::Plan plan = *BuildPlanProto(HandMadePlan(), 1, 1);
  absl::StatusOr<std::vector<v1::WorkerProgram>> programs =
      ProjectPlan(plan, "job-000001", {{"alpha", 0, {0, 1}}});
  ASSERT_FALSE(programs.ok());
  EXPECT_THAT(programs.status().message(), HasSubstr("has no worker"));
}

TEST(ProjectPlanTest, DeviceOwnedTwiceIsAnError) {
  v1::Plan plan = *BuildPlanProto(HandMadePlan(), 1, 1);
  absl::StatusOr<std::vector<v1::WorkerProgram>> programs =
      ProjectPlan(plan, "job-000001", {{"a", 0, {0, 1}}, {"b", 1, {1, 2, 3}}});
  EXPECT_FALSE(programs.ok());
}

// A broadcast counts once per receiver, a send/recv and a local copy once;
// the plain sum of step bytes would be 100 + 10 + 1 = 111.
TEST(DeliveredBytesTest, BroadcastCountsEveryReceiver) {
  v1::Plan plan;
  auto add_group = [&](int id, std::vector<int> devices) {
    v1::CommGroup* group = plan.add_groups();
    group->set_id(id);
    for (int d : devices) group->add_devices(d);
  };
  add_group(0, {0, 2, 4, 6});
  add_group(1, {1, 3});
  add_group(2, {5});
  auto add_step = [&](int group, v1::Step::Op op, int64_t bytes) {
    v1::Step* step = plan.add_steps();
    step->set_id(plan.steps_size() - 1);
    step->set_group(group);
    step->set_op(op);
    step->set_bytes(bytes);
  };
  add_step(0, v1::Step::OP_BROADCAST, 100);
  add_step(1, v1::Step::OP_SEND_RECV, 10);
  add_step(2, v1::Step::OP_LOCAL_COPY, 1);
  EXPECT_EQ(DeliveredBytes(plan), 3 * 100 + 10 + 1);
  EXPECT_EQ(DeliveredBytes(v1::Plan()), 0);
}

// With the real planner: every strategy's plan converts and projects, every
// step lands on the workers of its chain, and destination buffers cover the
// destination mesh.
TEST(ProgramBuilderWithPlannerTest, EveryStrategyProjects) {
  Topology topology;
  topology.num_hosts = 4;
  topology.devices_per_host = 2;
  ReshardProblem problem;
  problem.tensor.shape = {8, 6, 4};
  problem.tensor.dtype = DType::kFloat32;
  problem.src_mesh = {{2, 2}, {0, 1, 2, 3}};
  problem.src_spec = *ShardingSpec::Parse("RS0R");
  problem.dst_mesh = {{2, 2}, {4, 5, 6, 7}};
  problem.dst_spec = *ShardingSpec::Parse("S0RS1");
  std::vector<WorkerSlot> slots;
  for (int h = 0; h < 4; ++h) {
    slots.push_back({"w" + std::to_string(h), h, {2 * h, 2 * h + 1}});
  }
  for (Strategy strategy : ConcreteStrategies()) {
    SCOPED_TRACE(StrategyName(strategy));
    absl::StatusOr<ReshardPlan> plan =
        PlanReshard({problem}, topology, strategy);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<v1::Plan> proto = BuildPlanProto(*plan, 1, 1);
    ASSERT_TRUE(proto.ok()) << proto.status();
    EXPECT_EQ(proto->steps_size(), static_cast<int>(plan->transfers.size()));
    EXPECT_EQ(DestinationElements(*proto), 8 * 6 * 4);
    std::vector<v1::WorkerProgram> programs =
        *ProjectPlan(*proto, "job-000001", slots);
    EXPECT_EQ(programs.size(), 4u);
    for (const v1::Step& step : proto->steps()) {
      const v1::CommGroup& group = proto->groups(step.group());
      // Every worker on the chain has the step; no other worker has it.
      for (const v1::WorkerProgram& p : programs) {
        const bool on_chain = std::any_of(
            group.devices().begin(), group.devices().end(), [&](int d) {
              return std::find(p.local_devices().begin(),
                               p.local_devices().end(),
                               d) != p.local_devices().end();
            });
        const bool has =
            std::any_of(p.plan().steps().begin(), p.plan().steps().end(),
                        [&](const v1::Step& s) { return s.id() == step.id(); });
        EXPECT_EQ(on_chain, has) << p.worker() << " step " << step.id();
      }
    }
  }
}

}  // namespace
}  // namespace meshcast
