#include "planner/transfer_window.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/cost_model.h"
#include "planner/mesh.h"
#include "planner/sharding.h"
#include "planner/strategy.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

Transfer Send(int src, std::vector<int> dsts, int64_t bytes) {
  Transfer t;
  t.src_device = src;
  t.dst_devices.assign(dsts.begin(), dsts.end());
  t.bytes = bytes;
  return t;
}

TEST(LimitTransfersPerHostTest, EachHostsTransfersFormThatManyChains) {
  const Topology topology = Topology::FromGbps(3, 1, 10, 100);
  ReshardPlan plan;
  for (int i = 0; i < 5; ++i) plan.transfers.push_back(Send(0, {1}, 1000));
  plan.transfers.push_back(Send(2, {1}, 1000));  // host 1's 6th
  ASSERT_TRUE(LimitTransfersPerHost(plan, topology, 2).ok());
  EXPECT_THAT(plan.transfers[0].deps, IsEmpty());
  EXPECT_THAT(plan.transfers[1].deps, IsEmpty());
  EXPECT_THAT(plan.transfers[2].deps, ElementsAre(0));
  EXPECT_THAT(plan.transfers[3].deps, ElementsAre(1));
  EXPECT_THAT(plan.transfers[4].deps, ElementsAre(2));
  // Host 2's first, host 1's sixth: waits in host 1's chain only.
  EXPECT_THAT(plan.transfers[5].deps, ElementsAre(3));
  // Stages are the new dependency depths.
  std::vector<int> stages;
  for (const Transfer& t : plan.transfers) stages.push_back(t.stage);
  EXPECT_THAT(stages, ElementsAre(0, 0, 1, 1, 2, 2));
}

TEST(LimitTransfersPerHostTest, ADepAlreadyThereIsNotRepeated) {
  const Topology topology = Topology::FromGbps(2, 1, 10, 100);
  ReshardPlan plan;
  plan.transfers.push_back(Send(0, {1}, 1000));
  plan.transfers.push_back(Send(1, {0}, 1000));
  plan.transfers.back().deps = {0};
  ASSERT_TRUE(LimitTransfersPerHost(plan, topology, 1).ok());
  EXPECT_THAT(plan.transfers[1].deps, ElementsAre(0));
}

TEST(LimitTransfersPerHostTest, NoLimitLeavesThePlanAlone) {
  const Topology topology = Topology::FromGbps(2, 1, 10, 100);
  ReshardPlan plan;
  for (int i = 0; i < 4; ++i) plan.transfers.push_back(Send(0, {1}, 1000));
  for (int limit : {0, -3}) {
    ASSERT_TRUE(LimitTransfersPerHost(plan, topology, limit).ok());
    for (const Transfer& t : plan.transfers) EXPECT_THAT(t.deps, IsEmpty());
  }
}

TEST(LimitTransfersPerHostTest, ADeviceOutsideTheTopologyIsNamed) {
  const Topology topology = Topology::FromGbps(2, 1, 10, 100);
  ReshardPlan plan;
  plan.transfers.push_back(Send(0, {1}, 1000));
  plan.transfers.push_back(Send(0, {7}, 1000));
  const absl::Status status = LimitTransfersPerHost(plan, topology, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("transfer 1: device 7"));
  plan.transfers[1] = Send(0, {1}, 1000);
  plan.transfers[1].deps = {1};
  EXPECT_THAT(LimitTransfersPerHost(plan, topology, 1).message(),
              HasSubstr("transfer 1: dep 1 is not an earlier transfer"));
}

TEST(MostTransfersAtOnceOnAHostTest, CountsOverlapsPerHost) {
  const Topology topology = Topology::FromGbps(3, 1, 10, 100);
  ReshardPlan plan;
  plan.transfers = {Send(0, {1}, 1), Send(0, {1}, 1), Send(0, {2}, 1),
                    Send(2, {1}, 1)};
  SimulationResult sim;
  // Host 0: [0, 2), [1, 3), [1.5, 4) overlap at 1.5 -> 3; host 1: the
  // first two and [3, 5), which starts as the second ends -> 2.
  sim.transfer_start = {0, 1, 1.5, 3};
  sim.transfer_finish = {2, 3, 4, 5};
  EXPECT_EQ(MostTransfersAtOnceOnAHost(plan, topology, sim), 3);
  plan.transfers[2] = Send(2, {1}, 1);  // off host 0
  sim.transfer_start[3] = 2.5;          // now overlaps the second and third
  EXPECT_EQ(MostTransfersAtOnceOnAHost(plan, topology, sim), 3);
  sim.transfer_start[2] = 3;  // host 1: [0,2) [1,3) [3,4) [2.5,5)
  EXPECT_EQ(MostTransfersAtOnceOnAHost(plan, topology, sim), 2);
}

// A real plan of many tensors: it still verifies, and the simulation never
// runs more than the limit on any host, whatever the limit.
TEST(LimitTransfersPerHostTest, SimulatedPlansStayWithinTheLimit) {
  const Topology topology = Topology::FromGbps(4, 2, 10, 100);
  std::vector<ReshardProblem> problems;
  for (int i = 0; i < 12; ++i) {
    ReshardProblem p;
    p.tensor = TensorSpec{{64, 32 + 8 * i}, DType::kFloat32};
    p.src_mesh = ParseMesh("2x2@0", topology).value();
    p.dst_mesh = ParseMesh(i % 2 ? "2x2@2" : "1x2@3", topology).value();
    p.src_spec = ShardingSpec::Parse(i % 3 ? "S0,S1" : "R,S1").value();
    p.dst_spec = ShardingSpec::Parse(i % 2 ? "S1,R" : "R,R").value();
    problems.push_back(std::move(p));
  }
  const absl::StatusOr<ReshardPlan> planned =
      PlanReshard(problems, topology, Strategy::kMeshcast);
  ASSERT_TRUE(planned.ok()) << planned.status();
  const absl::StatusOr<SimulationResult> free = Simulate(*planned, topology);
  ASSERT_TRUE(free.ok());
  const int unbounded = MostTransfersAtOnceOnAHost(*planned, topology, *free);
  ASSERT_GT(unbounded, 4);  // the case exercises the limit
  for (int limit : {1, 2, 4}) {
    SCOPED_TRACE(absl::StrCat("limit ", limit));
    ReshardPlan plan = *planned;
    ASSERT_TRUE(LimitTransfersPerHost(plan, topology, limit).ok());
    EXPECT_TRUE(VerifyPlan(plan, topology).ok()) << VerifyPlan(plan, topology);
    for (size_t i = 0; i < plan.transfers.size(); ++i) {
      for (int dep : plan.transfers[i].deps) {
        EXPECT_LT(dep, static_cast<int>(i));
      }
    }
    const absl::StatusOr<SimulationResult> sim = Simulate(plan, topology);
    ASSERT_TRUE(sim.ok()) << sim.status();
    EXPECT_LE(MostTransfersAtOnceOnAHost(plan, topology, *sim), limit);
    EXPECT_GE(sim->seconds, free->seconds * (1 - 1e-9));
  }
}

}  // namespace
}  // namespace meshcast
