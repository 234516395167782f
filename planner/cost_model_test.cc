#include "planner/cost_model.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/mesh.h"
#include "planner/sharding.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

constexpr double kGiB = 1024.0 * 1024 * 1024;

// Hosts with one NIC of 1 GB/s and fast device ports, no latency and
// negligible pipeline fill, so times are bytes / 1e9 exactly.
Topology PlainTopology(int hosts, int devices_per_host) {
  Topology topology;
  topology.num_hosts = hosts;
  topology.devices_per_host = devices_per_host;
  topology.inter_host_bandwidth = 1e9;
  topology.intra_host_bandwidth = 100e9;
  topology.inter_host_latency = 0;
  topology.intra_host_latency = 0;
  topology.pipeline_chunk_bytes = 1;
  return topology;
}

// A plan over one int8 tensor of `elements` elements; each transfer moves
// `bytes` elements of it (the simulator looks at bytes and devices only).
class PlanMaker {
 public:
  explicit PlanMaker(int64_t elements = int64_t{1} << 40) {
    ReshardProblem problem;
    problem.tensor = TensorSpec{{elements}, DType::kInt8};
    plan_.problems.push_back(problem);
  }
  int Add(int src, std::vector<int> dsts, int64_t bytes,
          std::vector<int> deps = {}) {
    Transfer transfer;
    transfer.slice = {Interval{0, bytes}};
    transfer.bytes = bytes;
    transfer.src_device = src;
    transfer.dst_devices = std::move(dsts);
    transfer.deps = std::move(deps);
    plan_.transfers.push_back(std::move(transfer));
    return static_cast<int>(plan_.transfers.size()) - 1;
  }
  const ReshardPlan& plan() const { return plan_; }

 private:
  ReshardPlan plan_;
};

SimulationResult MustSimulate(const ReshardPlan& plan,
                              const Topology& topology) {
  absl::StatusOr<SimulationResult> result = Simulate(plan, topology);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : SimulationResult{};
}

TEST(SimulateTest, EmptyPlanTakesNoTime) {
  const SimulationResult result =
      MustSimulate(ReshardPlan{}, PlainTopology(2, 1));
  EXPECT_EQ(result.seconds, 0);
  EXPECT_TRUE(result.transfer_finish.empty());
}

TEST(SimulateTest, SingleFlowTakesBytesOverBandwidthPlusLatency) {
  Topology topology = PlainTopology(2, 1);
  topology.inter_host_latency = 10e-6;
  PlanMaker maker;
  maker.Add(0, {1}, 2'000'000'000);
  const SimulationResult result = MustSimulate(maker.plan(), topology);
  EXPECT_NEAR(result.seconds, 2.0 + 10e-6, 1e-12);
  EXPECT_EQ(result.transfer_start[0], 0);
  EXPECT_NEAR(result.transfer_finish[0], result.seconds, 1e-12);
}

TEST(SimulateTest, FlowInsideAHostUsesTheDevicePorts) {
  Topology topology = PlainTopology(1, 2);
  topology.intra_host_latency = 2e-6;
  PlanMaker maker;
  maker.Add(0, {1}, 50'000'000'000);
  EXPECT_NEAR(MustSimulate(maker.plan(), topology).seconds, 0.5 + 2e-6, 1e-12);
}

TEST(SimulateTest, TwoFlowsSharingANicTakeTwiceAsLong) {
  // Two devices of host 0 send to hosts 1 and 2: host 0's NIC egress is
  // shared.
  PlanMaker maker;
  maker.Add(0, {2}, 1'000'000'000);
  maker.Add(1, {4}, 1'000'000'000);
  const SimulationResult result =
      MustSimulate(maker.plan(), PlainTopology(3, 2));
  EXPECT_NEAR(result.seconds, 2.0, 1e-9);
  EXPECT_NEAR(result.transfer_finish[0], 2.0, 1e-9);
  EXPECT_NEAR(result.transfer_finish[1], 2.0, 1e-9);
}

TEST(SimulateTest, TwoFlowsIntoOneHostShareItsIngress) {
  PlanMaker maker;
  maker.Add(0, {4}, 1'000'000'000);
  maker.Add(2, {5}, 1'000'000'000);
  EXPECT_NEAR(MustSimulate(maker.plan(), PlainTopology(3, 2)).seconds, 2.0,
              1e-9);
}

TEST(SimulateTest, HostDisjointFlowsRunInParallel) {
  PlanMaker maker;
  maker.Add(0, {1}, 1'000'000'000);
  maker.Add(2, {3}, 1'000'000'000);
  EXPECT_NEAR(MustSimulate(maker.plan(), PlainTopology(4, 1)).seconds, 1.0,
              1e-9);
}

TEST(SimulateTest, ChainAcrossThreeHostsCostsOneNicTime) {
  Topology topology = PlainTopology(3, 1);
  topology.inter_host_latency = 10e-6;
  topology.pipeline_chunk_bytes = 1'000'000;
  PlanMaker maker;
  maker.Add(0, {1, 2}, 1'000'000'000);
  // One NIC time, plus a latency per hop and one chunk of pipeline fill at
  // the second hop.
  EXPECT_NEAR(MustSimulate(maker.plan(), topology).seconds,
              1.0 + 2 * 10e-6 + 1e-3, 1e-9);
}

TEST(SimulateTest, ChainLeavingAHostTwiceUsesItsNicTwice) {
  // 0 (host 0) -> 2 (host 1) -> 1 (host 0) -> 3 (host 1): host 0's egress
  // carries the flow twice, so it runs at half the NIC rate.
  PlanMaker maker;
  maker.Add(0, {2, 1, 3}, 1'000'000'000);
  EXPECT_NEAR(MustSimulate(maker.plan(), PlainTopology(2, 2)).seconds, 2.0,
              1e-8);
}

TEST(SimulateTest, DepsSerialize) {
  Topology topology = PlainTopology(2, 1);
  topology.inter_host_latency = 1e-3;
  PlanMaker maker;
  const int first = maker.Add(0, {1}, 1'000'000'000);
  maker.Add(1, {0}, 1'000'000'000, {first});
  const SimulationResult result = MustSimulate(maker.plan(), topology);
  EXPECT_NEAR(result.transfer_finish[0], 1.001, 1e-9);
  EXPECT_NEAR(result.transfer_start[1], 1.001, 1e-9);
  EXPECT_NEAR(result.seconds, 2.002, 1e-9);
}

TEST(SimulateTest, MaxMinFairShares) {
  // Host 0 sends a (to host 1) and b (to host 2); hosts 3 and 4 send c and
  // d to host 2. Host 2's ingress is the tightest (three flows: 1/3 each),
  // so b gets 1/3 and a the remaining 2/3 of host 0's egress.
  PlanMaker maker;
  const int a = maker.Add(0, {1}, 1'000'000'000);
  const int b = maker.Add(0, {2}, 1'000'000'000);
  maker.Add(3, {2}, 1'000'000'000);
  maker.Add(4, {2}, 1'000'000'000);
  const SimulationResult result =
      MustSimulate(maker.plan(), PlainTopology(5, 1));
  EXPECT_NEAR(result.transfer_finish[a], 1.5, 1e-9);
  EXPECT_NEAR(result.transfer_finish[b], 3.0, 1e-9);
  EXPECT_NEAR(result.seconds, 3.0, 1e-9);
}

TEST(SimulateTest, FreedBandwidthGoesToTheRemainingFlows) {
  // Two flows share host 0's egress; when the small one ends, the big one
  // speeds up: 0.5 GB at 0.5 GB/s, then 1 GB at 1 GB/s.
  PlanMaker maker;
  maker.Add(0, {2}, 500'000'000);
  maker.Add(1, {4}, 1'500'000'000);
  const SimulationResult result =
      MustSimulate(maker.plan(), PlainTopology(3, 2));
  EXPECT_NEAR(result.transfer_finish[0], 1.0, 1e-9);
  EXPECT_NEAR(result.transfer_finish[1], 2.0, 1e-9);
}

TEST(SimulateTest, SlowDevicePortLimitsTheFlow) {
  Topology topology = PlainTopology(2, 1);
  topology.intra_host_bandwidth = 0.25e9;
  PlanMaker maker;
  maker.Add(0, {1}, 1'000'000'000);
  EXPECT_NEAR(MustSimulate(maker.plan(), topology).seconds, 4.0, 1e-9);
}

TEST(SimulateTest, ZeroByteTransferTakesItsLatencyAndReleasesDependents) {
  Topology topology = PlainTopology(2, 1);
  topology.inter_host_latency = 1e-3;
  PlanMaker maker;
  const int empty = maker.Add(0, {1}, 0);
  maker.Add(0, {1}, 1'000'000'000, {empty});
  const SimulationResult result = MustSimulate(maker.plan(), topology);
  EXPECT_NEAR(result.transfer_finish[0], 1e-3, 1e-12);
  EXPECT_NEAR(result.seconds, 1.002, 1e-9);
}

TEST(SimulateTest, ManyEqualFlowsFinishTogether) {
  // 64 hosts each send 16 flows to the next host: every NIC carries 16
  // flows, so all finish at 16 x bytes / bandwidth.
  const int hosts = 64;
  const int devices = 16;
  PlanMaker maker;
  for (int h = 0; h < hosts; ++h) {
    for (int d = 0; d < devices; ++d) {
      maker.Add(h * devices + d, {((h + 1) % hosts) * devices + d}, 10'000'000);
    }
  }
  const SimulationResult result =
      MustSimulate(maker.plan(), PlainTopology(hosts, devices));
  EXPECT_NEAR(result.seconds, 0.16, 1e-9);
  for (double finish : result.transfer_finish) EXPECT_NEAR(finish, 0.16, 1e-9);
}

TEST(SimulateTest, ThousandsOfUnequalFlowsStayWorkConserving) {
  // 3000 flows of different sizes leave host 0 for three other hosts: its
  // NIC is the only bottleneck, so the makespan is all bytes over its
  // bandwidth. (This many flows exercises the batched completions.)
  PlanMaker maker;
  int64_t total = 0;
  for (int i = 0; i < 3000; ++i) {
    const int64_t bytes = 1'000'000 + 997 * i;
    maker.Add(i % 4, {4 * (1 + i % 3) + i % 4}, bytes);
    total += bytes;
  }
  const SimulationResult result =
      MustSimulate(maker.plan(), PlainTopology(4, 4));
  const double exact = static_cast<double>(total) / 1e9;
  EXPECT_GE(result.seconds, exact * (1 - 1e-9));
  EXPECT_LE(result.seconds, exact * 1.005);
}

TEST(SimulateTest, RejectsMalformedPlans) {
  const Topology topology = PlainTopology(2, 2);
  {
    PlanMaker maker;
    maker.Add(0, {9}, 10);
    EXPECT_THAT(Simulate(maker.plan(), topology).status().message(),
                HasSubstr("transfer 0: dst_devices entry 9"));
  }
  {
    PlanMaker maker;
    maker.Add(-1, {1}, 10);
    EXPECT_THAT(Simulate(maker.plan(), topology).status().message(),
                HasSubstr("src_device -1"));
  }
  {
    PlanMaker maker;
    maker.Add(0, {}, 10);
    EXPECT_THAT(Simulate(maker.plan(), topology).status().message(),
                HasSubstr("dst_devices is empty"));
  }
  {
    PlanMaker maker;
    maker.Add(0, {1}, 10, {0});
    EXPECT_THAT(Simulate(maker.plan(), topology).status().message(),
                HasSubstr("must name an earlier transfer"));
  }
  {
    PlanMaker maker;
    maker.Add(0, {1, 0}, 10);
    EXPECT_THAT(Simulate(maker.plan(), topology).status().message(),
                HasSubstr("appears twice"));
  }
  {
    Topology bad = topology;
    bad.inter_host_bandwidth = 0;
    EXPECT_FALSE(Simulate(PlanMaker().plan(), bad).ok());
  }
}

// ---------------------------------------------------------------------------
// Lower bound.

UnitTask Task(std::vector<int> senders, std::vector<int> receivers,
              int64_t bytes) {
  UnitTask task;
  task.slice = {Interval{0, bytes}};
  task.senders = std::move(senders);
  task.receivers = std::move(receivers);
  task.bytes = bytes;
  return task;
}

TEST(LowerBoundTest, NoTasksNoTime) {
  EXPECT_EQ(LowerBoundSeconds({}, PlainTopology(2, 2)), 0);
}

TEST(LowerBoundTest, HostIngressOfBytesItDoesNotHold) {
  // Host 1 needs two slices; a third slice is already on host 1.
  const std::vector<UnitTask> tasks = {
      Task({0}, {2, 3}, 1'000'000'000),
      Task({1}, {2}, 2'000'000'000),
      Task({0, 3}, {2}, 5'000'000'000),
  };
  Topology topology = PlainTopology(3, 2);
  topology.intra_host_bandwidth = 1e12;
  EXPECT_NEAR(LowerBoundSeconds(tasks, topology), 3.0, 1e-12);
}

TEST(LowerBoundTest, HostSetEgressOfBytesOnlyItHolds) {
  // Three slices held by hosts {0, 1}, each needed by a different host: the
  // 3 GB must leave through two NICs.
  const std::vector<UnitTask> tasks = {
      Task({0, 1}, {2}, 1'000'000'000),
      Task({0, 1}, {3}, 1'000'000'000),
      Task({0, 1}, {4}, 1'000'000'000),
  };
  EXPECT_NEAR(LowerBoundSeconds(tasks, PlainTopology(5, 1)), 1.5, 1e-12);
}

TEST(LowerBoundTest, HostSetEgressCountsSlicesHeldBySubsets) {
  // Host 0 alone holds 1 GB that host 2 needs; hosts {0, 1} both hold 2 GB
  // more that hosts 3 and 4 need. Set {0, 1} must send all 3 GB through two
  // NICs: 1.5 s (without the subset's slice it would be 1 s, like every
  // ingress).
  const std::vector<UnitTask> tasks = {
      Task({0}, {2}, 1'000'000'000),
      Task({0, 1}, {3}, 1'000'000'000),
      Task({0, 1}, {4}, 1'000'000'000),
  };
  EXPECT_NEAR(LowerBoundSeconds(tasks, PlainTopology(5, 1)), 1.5, 1e-12);
}

TEST(LowerBoundTest, DevicePortsCount) {
  Topology topology = PlainTopology(2, 2);
  topology.intra_host_bandwidth = 0.5e9;
  // Device 2 must take in 1 GB through its 0.5 GB/s port.
  EXPECT_NEAR(LowerBoundSeconds({Task({0}, {2}, 1'000'000'000)}, topology), 2.0,
              1e-12);
  // Device 0 alone holds 2 x 1 GB that devices 2 and 3 need.
  EXPECT_NEAR(LowerBoundSeconds({Task({0}, {2}, 1'000'000'000),
                                 Task({0}, {3}, 1'000'000'000)},
                                topology),
              4.0, 1e-12);
}

ReshardProblem Problem(const Topology& topology, std::vector<int64_t> shape,
                       const std::string& src_mesh, const std::string& src_spec,
                       const std::string& dst_mesh,
                       const std::string& dst_spec) {
  ReshardProblem problem;
  problem.tensor = TensorSpec{std::move(shape), DType::kInt32};
  problem.src_mesh = ParseMesh(src_mesh, topology).value();
  problem.dst_mesh = ParseMesh(dst_mesh, topology).value();
  problem.src_spec = ShardingSpec::Parse(src_spec).value();
  problem.dst_spec = ShardingSpec::Parse(dst_spec).value();
  return problem;
}

double PublicLowerBound(const ReshardProblem& problem,
                        const Topology& topology) {
  absl::StatusOr<std::vector<UnitTask>> tasks = ComputeUnitTasks(problem);
  EXPECT_TRUE(tasks.ok()) << tasks.status();
  return LowerBoundSeconds(tasks.value(), topology);
}

TEST(LowerBoundTest, PublicCases) {
  // The paper's testbed: 4 GPUs per host, 10 Gbps NICs (1.25 GB/s).
  const Topology topology = Topology::FromGbps(5, 4, 10, 1200);
  const std::vector<int64_t> shape = {1024, 1024, 512};  // 2 GiB of int32
  const double nic = 1.25e9;
  // case 1: each destination host needs its 1 GiB half.
  EXPECT_NEAR(
      PublicLowerBound(
          Problem(topology, shape, "2x4@0", "S0RR", "2x4@2", "S0RR"), topology),
      kGiB / nic, 1e-9);
  // case 3: host-pair all-to-all, 1 GiB into each destination host.
  EXPECT_NEAR(
      PublicLowerBound(
          Problem(topology, shape, "2x4@0", "RS0R", "2x4@2", "S0RR"), topology),
      kGiB / nic, 1e-9);
  // case 6: each source host holds 1020 MiB the destination needs.
  EXPECT_NEAR(PublicLowerBound(Problem(topology, {3072, 1024, 170}, "2x4@0",
                                       "S0RR", "3x4@2", "S0RR"),
                               topology),
              1536.0 * 1024 * 170 * 4 / nic, 1e-9);
  // case 7: the whole 2 GiB leaves host 0 and enters hosts 1 and 2.
  EXPECT_NEAR(
      PublicLowerBound(
          Problem(topology, shape, "1x4@0", "S1RR", "2x4@1", "RRR"), topology),
      2 * kGiB / nic, 1e-9);
  // RRR on two hosts to three: 2 GiB must leave two NICs.
  EXPECT_NEAR(
      PublicLowerBound(
          Problem(topology, shape, "2x4@0", "RRR", "3x4@2", "S0RR"), topology),
      kGiB / nic, 1e-9);
  // 1-to-m, (1,1) -> (4,2), 1 GiB.
  EXPECT_NEAR(PublicLowerBound(Problem(topology, {int64_t{1} << 28}, "1x1@0",
                                       "R", "4x2@1", "R"),
                               topology),
              kGiB / nic, 1e-9);
}

TEST(LowerBoundTest, SimulatedPlansNeverBeatIt) {
  // Every relay chain through the receivers of each task, from any sender,
  // in either order: the simulator stays at or above the bound.
  const Topology topology = Topology::FromGbps(6, 2, 10, 40);
  const std::vector<UnitTask> tasks = {
      Task({0, 2}, {4, 5, 8}, 300'000'000),
      Task({1}, {6, 9, 10}, 200'000'000),
      Task({3, 7}, {0, 11}, 500'000'000),
  };
  const double bound = LowerBoundSeconds(tasks, topology);
  for (int variant = 0; variant < 8; ++variant) {
    PlanMaker maker;
    for (size_t t = 0; t < tasks.size(); ++t) {
      const UnitTask& task = tasks[t];
      std::vector<int> chain = task.receivers;
      if (variant & (1 << t)) std::reverse(chain.begin(), chain.end());
      maker.Add(task.senders[variant % task.senders.size()], chain, task.bytes);
    }
    EXPECT_GE(MustSimulate(maker.plan(), topology).seconds, bound);
  }
}

}  // namespace
}  // namespace meshcast
