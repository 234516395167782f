#include "planner/plan.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/sharding.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

ReshardProblem MakeProblem(const Topology& topology, std::vector<int64_t> shape,
                           const std::string& src_mesh,
                           const std::string& src_spec,
                           const std::string& dst_mesh,
                           const std::string& dst_spec) {
  ReshardProblem problem;
  problem.tensor = TensorSpec{std::move(shape), DType::kInt32};
  problem.src_mesh = *ParseMesh(src_mesh, topology);
  problem.dst_mesh = *ParseMesh(dst_mesh, topology);
  problem.src_spec = *ShardingSpec::Parse(src_spec);
  problem.dst_spec = *ShardingSpec::Parse(dst_spec);
  return problem;
}

Transfer MakeTransfer(const ReshardProblem& problem, int tensor, Box slice,
                      int src, absl::Span<const int> dst,
                      std::vector<int> deps = {}, int stage = 0) {
  Transfer transfer;
  transfer.tensor = tensor;
  transfer.bytes = NumElements(slice) * DTypeSize(problem.tensor.dtype);
  transfer.slice = std::move(slice);
  transfer.src_device = src;
  transfer.dst_devices.assign(dst.begin(), dst.end());
  transfer.deps = std::move(deps);
  transfer.stage = stage;
  return transfer;
}

// One point-to-multipoint transfer per unit task, from its first sender.
ReshardPlan NaivePlan(const std::vector<ReshardProblem>& problems) {
  ReshardPlan plan;
  plan.strategy = "naive";
  plan.problems = problems;
  for (size_t t = 0; t < problems.size(); ++t) {
    auto tasks = ComputeUnitTasks(problems[t], static_cast<int>(t));
    EXPECT_TRUE(tasks.ok()) << tasks.status();
    for (const UnitTask& task : *tasks) {
      plan.transfers.push_back(MakeTransfer(problems[t], task.tensor,
                                            task.slice, task.senders.front(),
                                            task.receivers));
    }
  }
  return plan;
}

class VerifyPlanTest : public ::testing::Test {
 protected:
  Topology topology_ = Topology::FromGbps(5, 4, 10, 1200);
};

TEST_F(VerifyPlanTest, NaivePlansOfPublicCasesPass) {
  const std::vector<std::vector<std::string>> cases = {
      {"2x4@0", "S0RR", "2x4@2", "S0RR"}, {"2x4@0", "RRR", "2x4@2", "S0RR"},
      {"2x4@0", "RS0R", "2x4@2", "S0RR"}, {"2x4@0", "RS01R", "2x4@2", "S01RR"},
      {"2x4@0", "S1RR", "2x4@2", "S0RR"}, {"1x4@0", "S1RR", "2x4@1", "RRR"},
      {"2x4@0", "RS0R", "2x4@2", "RRS0"}, {"2x4@0", "S0RR", "3x4@2", "S0RR"}};
  for (const auto& c : cases) {
    const ReshardPlan plan = NaivePlan(
        {MakeProblem(topology_, {1024, 1024, 512}, c[0], c[1], c[2], c[3])});
    EXPECT_TRUE(VerifyPlan(plan, topology_).ok())
        << c[1] << "->" << c[3] << ": " << VerifyPlan(plan, topology_);
    EXPECT_GT(plan.total_bytes(), 0);
  }
}

TEST_F(VerifyPlanTest, TotalBytesSumsTransfers) {
  const ReshardPlan plan = NaivePlan({MakeProblem(
      topology_, {1024, 1024, 512}, "2x4@0", "RS01R", "2x4@2", "S01RR")});
  EXPECT_EQ(plan.total_bytes(), int64_t{2} << 30);
  EXPECT_EQ(ReshardPlan().total_bytes(), 0);
}

TEST_F(VerifyPlanTest, MissingOrShrunkTransferIsReported) {
  const ReshardPlan full = NaivePlan(
      {MakeProblem(topology_, {16, 8}, "2x4@0", "S1R", "2x4@2", "S0R")});
  ASSERT_TRUE(VerifyPlan(full, topology_).ok());
  ReshardPlan plan = full;
  plan.transfers.erase(plan.transfers.begin() + 1);
  absl::Status status = VerifyPlan(plan, topology_);
  EXPECT_THAT(status.message(), HasSubstr("destination device 8 misses"));

  plan = full;
  // Slice [0:4,0:8] loses its last column: 4 elements.
  ASSERT_EQ(plan.transfers[0].slice, (Box{{0, 4}, {0, 8}}));
  plan.transfers[0].slice[1].end -= 1;
  plan.transfers[0].bytes = NumElements(plan.transfers[0].slice) * 4;
  status = VerifyPlan(plan, topology_);
  EXPECT_THAT(status.message(), HasSubstr("misses 4 element(s)"));

  // Dropping one receiver from a chain.
  plan = full;
  plan.transfers[3].dst_devices.pop_back();
  EXPECT_THAT(VerifyPlan(plan, topology_).message(),
              HasSubstr("destination device 15 misses"));
}

TEST_F(VerifyPlanTest, SenderMustHoldTheSlice) {
  ReshardPlan plan = NaivePlan(
      {MakeProblem(topology_, {16, 8}, "2x4@0", "S0R", "2x4@2", "S0R")});
  plan.transfers[0].src_device = 4;  // holds rows 8..16, not 0..8
  absl::Status status = VerifyPlan(plan, topology_);
  EXPECT_THAT(status.message(), HasSubstr("transfer 0"));
  EXPECT_THAT(status.message(), HasSubstr("does not hold 64 element(s)"));
}

TEST_F(VerifyPlanTest, RelaysNeedDependencies) {
  // Device 0 holds the tensor; hosts 1 and 2 need it.
  const ReshardProblem problem =
      MakeProblem(topology_, {8, 8}, "1x1@0", "RR", "2x2@1", "RR");
  const Box all = problem.tensor.full_box();
  ReshardPlan plan;
  plan.problems = {problem};
  plan.transfers = {MakeTransfer(problem, 0, all, 0, {4, 5}),
                    MakeTransfer(problem, 0, all, 5, {8, 9}, {0}, 1)};
  EXPECT_TRUE(VerifyPlan(plan, topology_).ok()) << VerifyPlan(plan, topology_);

  // Without the dependency device 5 might send before it has the data.
  ReshardPlan no_dep = plan;
  no_dep.transfers[1].deps.clear();
  no_dep.transfers[1].stage = 0;
  EXPECT_THAT(VerifyPlan(no_dep, topology_).message(), HasSubstr("transfer 1"));

  // Stage must be the dependency depth.
  ReshardPlan bad_stage = plan;
  bad_stage.transfers[1].stage = 2;
  EXPECT_THAT(VerifyPlan(bad_stage, topology_).message(),
              HasSubstr("dependency depth is 1"));

  // Dependencies must point backwards.
  ReshardPlan forward = plan;
  forward.transfers[0].deps = {1};
  forward.transfers[0].stage = 2;
  EXPECT_THAT(VerifyPlan(forward, topology_).message(),
              HasSubstr("earlier transfer"));
  ReshardPlan self = plan;
  self.transfers[1].deps = {1};
  EXPECT_THAT(VerifyPlan(self, topology_).message(),
              HasSubstr("earlier transfer"));
}

TEST_F(VerifyPlanTest, TransitiveAndPartialRelays) {
  const ReshardProblem problem =
      MakeProblem(topology_, {8, 8}, "1x2@0", "S1R", "2x2@1", "RR");
  const Box top = {{0, 4}, {0, 8}};
  const Box bottom = {{4, 8}, {0, 8}};
  const Box all = problem.tensor.full_box();
  ReshardPlan plan;
  plan.problems = {problem};
  // Device 4 gathers both halves, then forwards the whole tensor; the second
  // half arrives through a chain of dependencies (1 depends on 0).
  plan.transfers = {MakeTransfer(problem, 0, top, 0, {4, 5}),
                    MakeTransfer(problem, 0, bottom, 1, {4, 5}, {0}, 1),
                    MakeTransfer(problem, 0, all, 4, {8, 9}, {1}, 2)};
  EXPECT_TRUE(VerifyPlan(plan, topology_).ok()) << VerifyPlan(plan, topology_);

  // Depending on only the first half is not enough.
  ReshardPlan partial = plan;
  partial.transfers[1].deps.clear();
  partial.transfers[1].stage = 0;
  partial.transfers[2].deps = {0};
  partial.transfers[2].stage = 1;
  absl::Status status = VerifyPlan(partial, topology_);
  EXPECT_THAT(status.message(), HasSubstr("transfer 2"));
  EXPECT_THAT(status.message(), HasSubstr("does not hold 32 element(s)"));
}

TEST_F(VerifyPlanTest, MalformedTransfersAreNamed) {
  const ReshardPlan good = NaivePlan(
      {MakeProblem(topology_, {16, 8}, "2x4@0", "S0R", "2x4@2", "S0R")});
  ASSERT_TRUE(VerifyPlan(good, topology_).ok());
  struct Mutation {
    const char* expect;
    void (*apply)(Transfer&);
  };
  const Mutation mutations[] = {
      {"tensor index", [](Transfer& t) { t.tensor = 1; }},
      {"rank", [](Transfer& t) { t.slice.pop_back(); }},
      {"empty", [](Transfer& t) { t.slice[0].end = t.slice[0].begin; }},
      {"outside the tensor", [](Transfer& t) { t.slice[1].end = 9; }},
      {"bytes is", [](Transfer& t) { t.bytes += 1; }},
      {"src device is outside", [](Transfer& t) { t.src_device = 20; }},
      {"no dst devices", [](Transfer& t) { t.dst_devices.clear(); }},
      {"dst device 99", [](Transfer& t) { t.dst_devices.push_back(99); }},
      {"appears twice",
       [](Transfer& t) { t.dst_devices.push_back(t.dst_devices[0]); }},
      {"appears twice",
       [](Transfer& t) { t.dst_devices.push_back(t.src_device); }},
  };
  for (const Mutation& mutation : mutations) {
    ReshardPlan plan = good;
    mutation.apply(plan.transfers[1]);
    absl::Status status = VerifyPlan(plan, topology_);
    EXPECT_THAT(status.message(), HasSubstr("transfer 1")) << mutation.expect;
    EXPECT_THAT(status.message(), HasSubstr(mutation.expect));
  }
  ReshardPlan bad_problem = good;
  bad_problem.problems[0].dst_spec = *ShardingSpec::Parse("S0");
  EXPECT_THAT(VerifyPlan(bad_problem, topology_).message(),
              HasSubstr("problem 0"));
}

TEST_F(VerifyPlanTest, TensorsAreCheckedSeparately) {
  const ReshardProblem a =
      MakeProblem(topology_, {8, 8}, "1x4@0", "S1R", "1x4@1", "RR");
  const ReshardProblem b =
      MakeProblem(topology_, {8, 8}, "1x4@0", "RS1", "1x4@1", "RR");
  ReshardPlan plan = NaivePlan({a, b});
  ASSERT_TRUE(VerifyPlan(plan, topology_).ok()) << VerifyPlan(plan, topology_);
  // Relabel a transfer of tensor 1 as tensor 0: tensor 1 then misses data,
  // and the relabelled slice is not held by its sender in tensor 0's layout.
  for (Transfer& transfer : plan.transfers) {
    if (transfer.tensor == 1) {
      transfer.tensor = 0;
      break;
    }
  }
  EXPECT_FALSE(VerifyPlan(plan, topology_).ok());
}

TEST_F(VerifyPlanTest, OverlappingMeshesNeedOnlyWhatIsMissing) {
  const ReshardProblem problem =
      MakeProblem(topology_, {8, 8}, "2x4@0", "S0R", "2x4@1", "RR");
  const ReshardPlan plan = NaivePlan({problem});
  EXPECT_TRUE(VerifyPlan(plan, topology_).ok()) << VerifyPlan(plan, topology_);
  // Host 1 (devices 4..7) already holds rows 4..8 and needs rows 0..4 only.
  for (const Transfer& transfer : plan.transfers) {
    for (int device : transfer.dst_devices) {
      if (device >= 4 && device < 8) {
        EXPECT_EQ(transfer.slice, (Box{{0, 4}, {0, 8}}));
      }
    }
  }
}

// Random problems: naive plans, split into pieces and relayed in random
// chain order, pass; dropping any one transfer fails.
TEST_F(VerifyPlanTest, PropertyRandomPlans) {
  std::mt19937 rng(99);
  const Topology topology = Topology::FromGbps(4, 4, 10, 100);
  const auto random_mesh = [&]() {
    DeviceMesh mesh;
    const int rank = 1 + static_cast<int>(rng() % 2);
    int count = 1;
    for (int a = 0; a < rank; ++a) {
      mesh.shape.push_back(1 + static_cast<int>(rng() % 4));
      count *= mesh.shape.back();
    }
    std::vector<int> all(topology.num_devices());
    for (int i = 0; i < topology.num_devices(); ++i) all[i] = i;
    std::shuffle(all.begin(), all.end(), rng);
    mesh.devices.assign(all.begin(), all.begin() + count);
    return mesh;
  };
  const auto random_spec = [&](int rank, const DeviceMesh& mesh) {
    ShardingSpec spec;
    spec.dims.resize(rank);
    for (int axis = 0; axis < mesh.rank(); ++axis) {
      const int d = static_cast<int>(rng() % (rank + 1));
      if (d < rank) spec.dims[d].mesh_axes.push_back(axis);
    }
    return spec;
  };
  int checked_drops = 0;
  for (int trial = 0; trial < 300; ++trial) {
    ReshardProblem problem;
    const int rank = 1 + static_cast<int>(rng() % 3);
    for (int d = 0; d < rank; ++d)
      problem.tensor.shape.push_back(1 + rng() % 9);
    problem.src_mesh = random_mesh();
    problem.dst_mesh = random_mesh();
    problem.src_spec = random_spec(rank, problem.src_mesh);
    problem.dst_spec = random_spec(rank, problem.dst_mesh);
    const std::string trace =
        problem.src_mesh.ToString() + problem.src_spec.ToString() + "->" +
        problem.dst_mesh.ToString() + problem.dst_spec.ToString();
    ReshardPlan naive = NaivePlan({problem});
    ASSERT_TRUE(VerifyPlan(naive, topology).ok())
        << trace << ": " << VerifyPlan(naive, topology);

    // Split each slice in two along its longest dimension, shuffle chains.
    ReshardPlan split;
    split.problems = naive.problems;
    for (const Transfer& transfer : naive.transfers) {
      int longest = 0;
      for (int d = 0; d < rank; ++d) {
        if (transfer.slice[d].size() > transfer.slice[longest].size()) {
          longest = d;
        }
      }
      std::vector<Box> pieces = {transfer.slice};
      if (transfer.slice[longest].size() > 1) {
        Box low = transfer.slice, high = transfer.slice;
        const int64_t mid =
            (transfer.slice[longest].begin + transfer.slice[longest].end) / 2;
        low[longest].end = mid;
        high[longest].begin = mid;
        pieces = {low, high};
      }
      for (const Box& piece : pieces) {
        std::vector<int> chain(transfer.dst_devices.begin(),
                               transfer.dst_devices.end());
        std::shuffle(chain.begin(), chain.end(), rng);
        split.transfers.push_back(
            MakeTransfer(problem, 0, piece, transfer.src_device, chain));
      }
    }
    ASSERT_TRUE(VerifyPlan(split, topology).ok())
        << trace << ": " << VerifyPlan(split, topology);
    if (!split.transfers.empty()) {
      ReshardPlan dropped = split;
      dropped.transfers.erase(dropped.transfers.begin() +
                              rng() % dropped.transfers.size());
      EXPECT_FALSE(VerifyPlan(dropped, topology).ok()) << trace;
      ++checked_drops;
    }
  }
  EXPECT_GT(checked_drops, 100);
}

TEST(VerifyPlanScaleTest, SixteenThousandTransfers) {
  const Topology topology = Topology::FromGbps(256, 8, 100, 2400);
  ReshardProblem problem;
  problem.tensor = TensorSpec{{65536, 65536}, DType::kBFloat16};
  problem.src_mesh = *ParseMesh("128x8@0", topology);
  problem.dst_mesh = *ParseMesh("128x8@128", topology);
  problem.src_spec = *ShardingSpec::Parse("S0,S1");
  problem.dst_spec = *ShardingSpec::Parse("S1,S0");
  const ReshardPlan plan = NaivePlan({problem});
  ASSERT_EQ(plan.transfers.size(), 16384u);
  EXPECT_TRUE(VerifyPlan(plan, topology).ok());
}

}  // namespace
}  // namespace meshcast
