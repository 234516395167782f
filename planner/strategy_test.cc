#include "planner/strategy.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/workloads/public_suite.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/cost_model.h"
#include "planner/mesh.h"
#include "planner/sharding.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

constexpr double kGiB = 1024.0 * 1024 * 1024;

ReshardProblem Problem(const Topology& topology, std::vector<int64_t> shape,
                       const std::string& src_mesh, const std::string& src_spec,
                       const std::string& dst_mesh, const std::string& dst_spec,
                       DType dtype = DType::kInt32) {
  ReshardProblem problem;
  problem.tensor = TensorSpec{std::move(shape), dtype};
  problem.src_mesh = ParseMesh(src_mesh, topology).value();
  problem.dst_mesh = ParseMesh(dst_mesh, topology).value();
  problem.src_spec = ShardingSpec::Parse(src_spec).value();
  problem.dst_spec = ShardingSpec::Parse(dst_spec).value();
  return problem;
}

const StrategyEvaluation& Row(const StrategyComparison& comparison,
                              Strategy strategy) {
  for (const StrategyEvaluation& row : comparison.rows) {
    if (row.strategy == strategy) return row;
  }
  ADD_FAILURE() << "no row for " << StrategyName(strategy);
  return comparison.rows.front();
}

StrategyComparison MustCompare(const std::vector<ReshardProblem>& problems,
                               const Topology& topology,
                               const CompareOptions& options = {}) {
  absl::StatusOr<StrategyComparison> comparison =
      CompareStrategies(problems, topology, options);
  EXPECT_TRUE(comparison.ok()) << comparison.status();
  return comparison.ok() ? *std::move(comparison) : StrategyComparison{};
}

// Structural checks every plan must pass, beyond VerifyPlan.
void ExpectWellFormed(const ReshardPlan& plan, const Topology& topology) {
  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    const Transfer& transfer = plan.transfers[i];
    SCOPED_TRACE(::testing::Message() << plan.strategy << " transfer " << i);
    ASSERT_GE(transfer.tensor, 0);
    ASSERT_LT(transfer.tensor, static_cast<int>(plan.problems.size()));
    EXPECT_EQ(transfer.bytes,
              NumElements(transfer.slice) *
                  DTypeSize(plan.problems[transfer.tensor].tensor.dtype));
    EXPECT_GT(transfer.bytes, 0);
    int stage = 0;
    for (int dep : transfer.deps) {
      ASSERT_GE(dep, 0);
      ASSERT_LT(dep, static_cast<int>(i));
      stage = std::max(stage, plan.transfers[dep].stage + 1);
    }
    EXPECT_EQ(transfer.stage, stage);
  }
}

// Each host appears in one contiguous run of the relay chain, so each byte
// enters and leaves each host once.
void ExpectHostByHostChains(const ReshardPlan& plan, const Topology& topology) {
  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    const Transfer& transfer = plan.transfers[i];
    std::set<int> done;
    int current = topology.HostOf(transfer.src_device);
    for (int device : transfer.dst_devices) {
      const int host = topology.HostOf(device);
      if (host == current) continue;
      done.insert(current);
      EXPECT_EQ(done.count(host), 0u)
          << plan.strategy << " transfer " << i << " re-enters host " << host;
      current = host;
    }
  }
}

// ---------------------------------------------------------------------------
// Names.

TEST(StrategyNamesTest, RoundTrip) {
  std::vector<Strategy> all = ConcreteStrategies();
  all.push_back(Strategy::kAuto);
  for (Strategy strategy : all) {
    absl::StatusOr<Strategy> parsed = ParseStrategy(StrategyName(strategy));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, strategy);
  }
  EXPECT_EQ(ParseStrategy("MeshCast").value(), Strategy::kMeshcast);
}

TEST(StrategyNamesTest, UnknownNameListsTheAllowedOnes) {
  absl::StatusOr<Strategy> parsed = ParseStrategy("fastest");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("strategy"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("fastest"));
  for (const char* name : {"send_recv", "local_allgather", "broadcast",
                           "broadcast_lb", "meshcast", "auto"}) {
    EXPECT_THAT(parsed.status().message(), HasSubstr(name));
  }
}

TEST(StrategyNamesTest, ConcreteStrategiesInTableOrder) {
  EXPECT_EQ(
      ConcreteStrategies(),
      (std::vector<Strategy>{Strategy::kSendRecv, Strategy::kLocalAllGather,
                             Strategy::kBroadcast, Strategy::kBroadcastLb,
                             Strategy::kMeshcast}));
}

// ---------------------------------------------------------------------------
// The public suite (bench/workloads/public_suite.txt, docs/conventions.md):
// source mesh at host 0, destination on the next disjoint hosts.

struct PublicCase {
  std::string name;
  std::vector<ReshardProblem> problems;
  double lower_bound;  // seconds, derived by hand
};

// The bytes that cross the busiest NIC in each case, derived by hand: every
// case here must be in the suite file and the other way round.
const std::map<std::string, double>& NicBytesByCase() {
  static const auto* bytes = new std::map<std::string, double>{
      {"case1", kGiB},
      {"case2", kGiB},
      {"case3", kGiB},
      {"case4", kGiB},
      {"case5", kGiB},
      {"case6", 1536.0 * 1024 * 170 * 4},
      {"case7", 2 * kGiB},
      {"case9", kGiB},
      {"1-to-m(1,1)", kGiB},
      {"1-to-m(1,2)", kGiB},
      {"1-to-m(1,3)", kGiB},
      {"1-to-m(1,4)", kGiB},
      {"1-to-m(2,2)", kGiB},
      {"1-to-m(3,2)", kGiB},
      {"1-to-m(4,2)", kGiB},
  };
  return *bytes;
}

// The cases where every slice goes to more than one host: how many.
const std::map<std::string, int>& HostsPerSliceByCase() {
  static const auto* hosts = new std::map<std::string, int>{
      {"case7", 2},
      {"1-to-m(2,2)", 2},
      {"1-to-m(3,2)", 3},
      {"1-to-m(4,2)", 4},
  };
  return *hosts;
}

// The suite file's cases; empty (and the test below fails) when unreadable.
const std::vector<PublicSuiteCase>& SuiteCases() {
  static const auto* cases = new std::vector<PublicSuiteCase>(
      LoadPublicSuite().value_or(std::vector<PublicSuiteCase>{}));
  return *cases;
}

TEST(PublicSuiteFileTest, EveryCaseHasItsLowerBound) {
  absl::StatusOr<std::vector<PublicSuiteCase>> suite = LoadPublicSuite();
  ASSERT_TRUE(suite.ok()) << suite.status();
  std::set<std::string> names;
  for (const PublicSuiteCase& c : *suite) names.insert(c.name);
  std::set<std::string> expected;
  for (const auto& [name, bytes] : NicBytesByCase()) expected.insert(name);
  EXPECT_EQ(names, expected);
}

// The paper's meshes fill hosts of 4 GPUs; on hosts of `gpus` GPUs they fill
// those (2x4 becomes 2x8). The 1-to-m meshes stay as they are.
std::string MeshOn(const PublicSuiteCase& c, const SuiteMesh& mesh, int gpus,
                   int first_host) {
  SuiteMesh placed = mesh;
  if (c.HasTag("paper")) placed.devices_per_host = gpus;
  return placed.At(first_host);
}

std::vector<PublicCase> PublicCases(const Topology& topology, int gpus) {
  const double nic = topology.inter_host_bandwidth;
  std::vector<PublicCase> cases;
  for (const PublicSuiteCase& c : SuiteCases()) {
    auto bytes = NicBytesByCase().find(c.name);
    cases.push_back(
        {c.name,
         {Problem(topology, c.shape, MeshOn(c, c.src_mesh, gpus, 0),
                  c.src_spec, MeshOn(c, c.dst_mesh, gpus, c.dst_first_host()),
                  c.dst_spec)},
         bytes == NicBytesByCase().end() ? -1 : bytes->second / nic});
  }
  // Every case's bound is its NICs' bytes, so the last byte also pays an
  // inter-host hop's latency (these topologies have no transfer set-up);
  // where every slice goes to K >= 2 hosts, 1 - 1/K of a hop more
  // (cost_model.h).
  for (PublicCase& c : cases) {
    auto hosts = HostsPerSliceByCase().find(c.name);
    const double k = hosts == HostsPerSliceByCase().end() ? 1 : hosts->second;
    c.lower_bound += (2 - 1 / k) * topology.inter_host_latency;
  }
  return cases;
}

// A test name from a case name: "1-to-m(2,2)" -> "1_to_m_2_2".
std::string TestName(const std::string& name) {
  std::string out;
  for (char c : name) {
    out.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

struct SuiteParam {
  std::string model;
  Topology topology;
  int gpus;
  int index;
};

std::vector<SuiteParam> SuiteParams() {
  std::vector<SuiteParam> params;
  // The paper's testbed, and hosts of 8 GPUs with 100 Gbps NICs.
  const std::pair<Topology, int> models[] = {
      {Topology::FromGbps(5, 4, 10, 1200), 4},
      {Topology::FromGbps(5, 8, 100, 2400), 8},
  };
  for (const auto& [topology, gpus] : models) {
    for (size_t i = 0; i < SuiteCases().size(); ++i) {
      params.push_back({gpus == 4 ? "testbed" : "8gpu100g", topology, gpus,
                        static_cast<int>(i)});
    }
  }
  return params;
}

class PublicSuiteTest : public ::testing::TestWithParam<SuiteParam> {};

TEST_P(PublicSuiteTest, MeshcastMatchesTheLowerBound) {
  const SuiteParam& param = GetParam();
  const PublicCase c = PublicCases(param.topology, param.gpus)[param.index];
  const StrategyComparison comparison = MustCompare(c.problems, param.topology);
  ASSERT_EQ(comparison.rows.size(), ConcreteStrategies().size());

  int64_t moved = 0;
  for (const ReshardProblem& problem : c.problems) {
    const std::vector<UnitTask> tasks = ComputeUnitTasks(problem).value();
    for (const UnitTask& task : tasks) {
      moved += task.bytes * static_cast<int64_t>(task.receivers.size());
    }
  }
  for (const StrategyEvaluation& row : comparison.rows) {
    SCOPED_TRACE(StrategyName(row.strategy));
    EXPECT_EQ(row.plan.strategy, StrategyName(row.strategy));
    EXPECT_TRUE(VerifyPlan(row.plan, param.topology).ok())
        << VerifyPlan(row.plan, param.topology);
    ExpectWellFormed(row.plan, param.topology);
    EXPECT_NEAR(row.lower_bound_seconds, c.lower_bound, 1e-9);
    EXPECT_GE(row.predicted_seconds, row.lower_bound_seconds * (1 - 1e-9));
    EXPECT_EQ(row.moved_bytes, moved);
  }
  const StrategyEvaluation& meshcast = Row(comparison, Strategy::kMeshcast);
  const StrategyEvaluation& broadcast_lb =
      Row(comparison, Strategy::kBroadcastLb);
  EXPECT_LE(meshcast.predicted_seconds, 1.02 * c.lower_bound);
  EXPECT_LE(meshcast.predicted_seconds,
            broadcast_lb.predicted_seconds * (1 + 1e-9));
  ExpectHostByHostChains(meshcast.plan, param.topology);
  EXPECT_EQ(comparison.rows[comparison.chosen].strategy, Strategy::kMeshcast);

  absl::StatusOr<ReshardPlan> chosen =
      PlanReshard(c.problems, param.topology, Strategy::kAuto);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->strategy, "meshcast");
}

INSTANTIATE_TEST_SUITE_P(Suite, PublicSuiteTest,
                         ::testing::ValuesIn(SuiteParams()),
                         [](const ::testing::TestParamInfo<SuiteParam>& info) {
                           return info.param.model + "_" +
                                  TestName(SuiteCases()[info.param.index].name);
                         });

// ---------------------------------------------------------------------------
// Known effects of the baselines on the testbed.

class TestbedTest : public ::testing::Test {
 protected:
  const Topology topology_ = Topology::FromGbps(5, 4, 10, 1200);
  const std::vector<int64_t> shape_ = {1024, 1024, 512};
  const double nic_ = 1.25e9;
};

TEST_F(TestbedTest, SendRecvPushesEveryCopyThroughTheSourceNic) {
  // case 7: 8 receivers per slice, all data on host 0.
  const StrategyComparison case7 = MustCompare(
      {Problem(topology_, shape_, "1x4@0", "S1RR", "2x4@1", "RRR")}, topology_);
  EXPECT_NEAR(Row(case7, Strategy::kSendRecv).predicted_seconds,
              16 * kGiB / nic_, 0.01);
  EXPECT_GE(Row(case7, Strategy::kSendRecv).predicted_seconds,
            4 * Row(case7, Strategy::kMeshcast).predicted_seconds);
  // Alpa's local all-gather does not apply (replicated across hosts).
  EXPECT_EQ(Row(case7, Strategy::kLocalAllGather).plan.transfers.size(),
            Row(case7, Strategy::kSendRecv).plan.transfers.size());
  EXPECT_DOUBLE_EQ(Row(case7, Strategy::kLocalAllGather).predicted_seconds,
                   Row(case7, Strategy::kSendRecv).predicted_seconds);

  // 1-to-m, (1,1) -> (4,2): 8 copies of 1 GiB versus one relay chain.
  const StrategyComparison one_to_many = MustCompare(
      {Problem(topology_, {int64_t{1} << 28}, "1x1@0", "R", "4x2@1", "R")},
      topology_);
  EXPECT_NEAR(Row(one_to_many, Strategy::kSendRecv).predicted_seconds,
              8 * kGiB / nic_, 0.01);
  EXPECT_GE(Row(one_to_many, Strategy::kSendRecv).predicted_seconds,
            4 * Row(one_to_many, Strategy::kMeshcast).predicted_seconds);
}

TEST_F(TestbedTest, NaiveBroadcastOrderAndSenderCostWhatThePaperSays) {
  // case 3: the naive order leaves hosts idle (1.5 GiB-times), the
  // load-balanced rounds do not (1 GiB-time).
  const StrategyComparison case3 = MustCompare(
      {Problem(topology_, shape_, "2x4@0", "RS0R", "2x4@2", "S0RR")},
      topology_);
  EXPECT_NEAR(Row(case3, Strategy::kBroadcast).predicted_seconds,
              1.5 * kGiB / nic_, 0.01);
  EXPECT_NEAR(Row(case3, Strategy::kBroadcastLb).predicted_seconds, kGiB / nic_,
              0.01);
  // case 2: the first replica of both slices sits on host 0.
  const StrategyComparison case2 = MustCompare(
      {Problem(topology_, shape_, "2x4@0", "RRR", "2x4@2", "S0RR")}, topology_);
  EXPECT_NEAR(Row(case2, Strategy::kBroadcast).predicted_seconds,
              2 * kGiB / nic_, 0.01);
  EXPECT_NEAR(Row(case2, Strategy::kBroadcastLb).predicted_seconds, kGiB / nic_,
              0.01);
}

// Whether transfer `later` waits, directly or not, for `earlier`.
bool Waits(const ReshardPlan& plan, int later, int earlier) {
  std::vector<int> stack = {later};
  std::vector<char> seen(plan.transfers.size(), 0);
  while (!stack.empty()) {
    const int t = stack.back();
    stack.pop_back();
    for (int dep : plan.transfers[t].deps) {
      if (dep == earlier) return true;
      if (!seen[dep]) {
        seen[dep] = 1;
        stack.push_back(dep);
      }
    }
  }
  return false;
}

TEST_F(TestbedTest, BroadcastsIssueOneAtATimePerHost) {
  const StrategyComparison case4 = MustCompare(
      {Problem(topology_, shape_, "2x4@0", "RS01R", "2x4@2", "S01RR")},
      topology_);
  for (Strategy strategy : {Strategy::kBroadcast, Strategy::kBroadcastLb}) {
    const ReshardPlan& plan = Row(case4, strategy).plan;
    ASSERT_EQ(plan.transfers.size(), 64u);
    const auto hosts = [&](const Transfer& transfer) {
      std::set<int> hosts = {topology_.HostOf(transfer.src_device)};
      for (int d : transfer.dst_devices) hosts.insert(topology_.HostOf(d));
      return hosts;
    };
    for (int i = 0; i < 64; ++i) {
      for (int j = 0; j < i; ++j) {
        const std::set<int> a = hosts(plan.transfers[i]);
        const std::set<int> b = hosts(plan.transfers[j]);
        const bool share = std::any_of(a.begin(), a.end(),
                                       [&](int h) { return b.count(h) > 0; });
        if (share) {
          EXPECT_TRUE(Waits(plan, i, j))
              << plan.strategy << ": " << i << " and " << j
              << " share a host but may overlap";
        }
      }
    }
  }
}

TEST_F(TestbedTest, LocalAllGatherSendsOneCopyPerHostThenGathersInside) {
  const StrategyComparison case1 = MustCompare(
      {Problem(topology_, shape_, "2x4@0", "S0RR", "2x4@2", "S0RR")},
      topology_);
  const ReshardPlan& plan = Row(case1, Strategy::kLocalAllGather).plan;
  int64_t network_bytes = 0;
  for (const Transfer& transfer : plan.transfers) {
    if (transfer.stage == 0) {
      EXPECT_TRUE(transfer.deps.empty());
      ASSERT_EQ(transfer.dst_devices.size(), 1u);
      network_bytes += transfer.bytes;
    } else {
      EXPECT_EQ(transfer.stage, 1);
      ASSERT_EQ(transfer.deps.size(), 1u);
      const Transfer& delivered = plan.transfers[transfer.deps[0]];
      EXPECT_EQ(delivered.dst_devices[0], transfer.src_device);
      EXPECT_EQ(delivered.slice, transfer.slice);
      for (int device : transfer.dst_devices) {
        EXPECT_TRUE(topology_.SameHost(device, transfer.src_device));
      }
    }
  }
  EXPECT_EQ(network_bytes, int64_t{2} << 30);  // each half once
}

TEST_F(TestbedTest, MeshcastSplitsSlicesAcrossReplicaHostsWhenItPays) {
  // Three 2/3 GiB slices held by both source hosts: whole slices leave one
  // NIC with 4/3 GiB; split, both NICs carry 1 GiB.
  const StrategyComparison comparison = MustCompare(
      {Problem(topology_, shape_, "2x4@0", "RRR", "3x4@2", "S0RR")}, topology_);
  const double bound = kGiB / nic_ + topology_.inter_host_latency;
  EXPECT_NEAR(comparison.rows[0].lower_bound_seconds, bound, 1e-9);
  const StrategyEvaluation& meshcast = Row(comparison, Strategy::kMeshcast);
  EXPECT_LE(meshcast.predicted_seconds, 1.02 * bound);
  EXPECT_GE(Row(comparison, Strategy::kBroadcastLb).predicted_seconds,
            1.3 * bound);
  EXPECT_GT(meshcast.plan.transfers.size(), 3u);
  EXPECT_TRUE(VerifyPlan(meshcast.plan, topology_).ok());
}

TEST_F(TestbedTest, MeshcastKeepsSlicesWholeWhenSplittingDoesNotPay) {
  for (const char* src_spec : {"RRR", "S1RR"}) {
    const ReshardProblem problem =
        Problem(topology_, shape_, "2x4@0", src_spec, "2x4@2", "S0RR");
    const absl::StatusOr<ReshardPlan> plan =
        PlanReshard({problem}, topology_, Strategy::kMeshcast);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->transfers.size(), ComputeUnitTasks(problem)->size())
        << src_spec;
  }
}

// One device to every device of `hosts` hosts of 4 (the testbed's links).
struct LongBroadcast {
  Topology topology;
  ReshardProblem problem;
};
LongBroadcast OneToHosts(int hosts, int64_t bytes) {
  LongBroadcast c{Topology::FromGbps(hosts + 1, 4, 10, 1200), {}};
  c.problem = Problem(c.topology, {bytes / 4}, "1x1@0", "R",
                      absl::StrCat(hosts, "x4@1"), "R");
  return c;
}

TEST(MeshcastSplitTest, SplitsLongChainsOfSmallSlices) {
  // 1 MiB to 8 hosts: one chain pipelines nothing (a 1 MiB chunk) and takes
  // 8 hops' time; split, each host gets a piece and sends it on, in rounds
  // so that the forwards of one overlap the scatter of the next.
  const LongBroadcast c = OneToHosts(8, int64_t{1} << 20);
  const StrategyComparison comparison = MustCompare(
      {c.problem}, c.topology, CompareOptions{.only = Strategy::kMeshcast});
  const StrategyEvaluation& row = comparison.rows[0];
  const ReshardPlan& plan = row.plan;
  ASSERT_TRUE(VerifyPlan(plan, c.topology).ok())
      << VerifyPlan(plan, c.topology);
  ExpectWellFormed(plan, c.topology);
  ExpectHostByHostChains(plan, c.topology);
  // Rounds of 8 scatters, each piece to one device of its host, which
  // sends it on to its 3 neighbours and to the 7 other hosts: every byte
  // crosses at most two hops between hosts.
  int scatters = 0;
  for (const Transfer& transfer : plan.transfers) {
    if (transfer.src_device == 0) {
      ++scatters;
      EXPECT_EQ(transfer.dst_devices.size(), 1u);
      for (int dep : transfer.deps) {
        EXPECT_EQ(plan.transfers[dep].src_device, 0);  // the round before
      }
      continue;
    }
    ASSERT_EQ(transfer.deps.size(), 1u);
    const Transfer& scatter = plan.transfers[transfer.deps[0]];
    EXPECT_EQ(scatter.src_device, 0);
    EXPECT_EQ(scatter.slice, transfer.slice);
    EXPECT_EQ(scatter.dst_devices.back(), transfer.src_device);
    if (c.topology.SameHost(transfer.src_device, transfer.dst_devices[0])) {
      EXPECT_EQ(transfer.dst_devices.size(), 3u);  // the host's others
    } else {
      EXPECT_EQ(transfer.dst_devices.size(), 4u);  // a whole other host
    }
  }
  EXPECT_EQ(scatters % 8, 0);
  EXPECT_GT(scatters, 8);  // more than one round
  EXPECT_EQ(plan.transfers.size(), 9u * scatters);
  // Near the bound (which already counts a second hop's latency), a
  // sixth of the chain's time.
  EXPECT_LT(row.predicted_seconds, 1.3 * row.lower_bound_seconds);
  ReshardPlan chain;
  chain.strategy = "meshcast";
  chain.problems = {c.problem};
  Transfer whole;
  whole.slice = {Interval{0, (int64_t{1} << 20) / 4}};
  whole.bytes = int64_t{1} << 20;
  whole.src_device = 0;
  for (int device = 4; device < 36; ++device) {
    whole.dst_devices.push_back(device);
  }
  chain.transfers = {whole};
  EXPECT_LT(row.predicted_seconds, Simulate(chain, c.topology)->seconds / 6);
}

TEST(MeshcastSplitTest, KeepsOneChainWherePipeliningHidesTheHops) {
  // 1 GiB to 4 hosts: the chain's 3 extra hops cost 3 chunks (2.5 ms of
  // 860 ms); a split would double the time.
  const LongBroadcast c = OneToHosts(4, int64_t{1} << 30);
  const absl::StatusOr<ReshardPlan> plan =
      PlanReshard({c.problem}, c.topology, Strategy::kMeshcast);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->transfers.size(), 1u);
}

TEST(MeshcastSplitTest, TransferSetUpsFavourTreesOverRounds) {
  // 4 MiB to 4 hosts over 1 Gbit/s with a 300 us set-up per transfer: 4
  // relay trees (4 set-ups) beat rounds of 20 transfers each, and a chain
  // (3 chunks of 1 MiB of fill, 8 ms each).
  LongBroadcast c = OneToHosts(4, int64_t{4} << 20);
  c.topology.inter_host_bandwidth = 125e6;
  c.topology.transfer_setup_seconds = 300e-6;
  const StrategyComparison comparison = MustCompare(
      {c.problem}, c.topology, CompareOptions{.only = Strategy::kMeshcast});
  const StrategyEvaluation& row = comparison.rows[0];
  EXPECT_TRUE(VerifyPlan(row.plan, c.topology).ok());
  ASSERT_EQ(row.plan.transfers.size(), 4u);
  for (const Transfer& transfer : row.plan.transfers) {
    EXPECT_EQ(transfer.parents.size(), 16u);
  }
  EXPECT_LT(row.predicted_seconds, 1.06 * row.lower_bound_seconds);
}

TEST(MeshcastSplitTest, ChainsLongerThanARelayGroupGoInSeveralPieces) {
  // 64 KiB to 1100 hosts x 4 devices. The broadcast baseline sends it down
  // one chain of 4400 receivers, more than a relay group holds (the worker
  // tags a chunk's position in 12 bits): it goes as two chains, the second
  // sent on by the first one's last receiver once that holds the slice.
  // meshcast splits it; neither emits a group the workers would refuse.
  const LongBroadcast c = OneToHosts(1100, int64_t{64} << 10);
  for (Strategy strategy : {Strategy::kMeshcast, Strategy::kBroadcast}) {
    absl::StatusOr<ReshardPlan> plan =
        PlanReshard({c.problem}, c.topology, strategy);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(VerifyPlan(*plan, c.topology).ok())
        << VerifyPlan(*plan, c.topology);
    size_t longest = 0;
    for (const Transfer& transfer : plan->transfers) {
      longest = std::max(longest, transfer.dst_devices.size());
    }
    EXPECT_LE(longest + 1, static_cast<size_t>(kMaxRelayGroupDevices))
        << StrategyName(strategy);
    if (strategy == Strategy::kBroadcast) {
      // One chain through every receiver, cut in two.
      ASSERT_EQ(plan->transfers.size(), 2u);
      const Transfer& second = plan->transfers[1];
      EXPECT_EQ(second.src_device, plan->transfers[0].dst_devices.back());
      EXPECT_EQ(second.deps, std::vector<int>{0});
      EXPECT_EQ(
          plan->transfers[0].dst_devices.size() + second.dst_devices.size(),
          4400u);
    }
  }
}

// Hosts crossed on the way from the sender to each position of a relay
// tree (position 0 is the sender).
std::vector<int> HostCrossings(const Transfer& transfer,
                               const Topology& topology) {
  std::vector<int> crossings(transfer.dst_devices.size() + 1, 0);
  for (size_t k = 0; k < transfer.dst_devices.size(); ++k) {
    const int parent = transfer.parents[k];
    const int from =
        parent == 0 ? transfer.src_device : transfer.dst_devices[parent - 1];
    crossings[k + 1] =
        crossings[parent] +
        (topology.SameHost(from, transfer.dst_devices[k]) ? 0 : 1);
  }
  return crossings;
}

TEST(MeshcastSplitTest, SmallBroadcastsToHundredsOfHostsGoAsOneTreePerHost) {
  // 1 MiB to 256 hosts: in rounds, 256 pieces of 257 transfers each would
  // pass the budget of 16384 transfers. As relay trees, every host gets
  // one piece and forwards it to one device of every other host: 256
  // transfers, every byte two hops between hosts deep.
  const LongBroadcast c = OneToHosts(256, int64_t{1} << 20);
  const StrategyComparison comparison = MustCompare(
      {c.problem}, c.topology, CompareOptions{.only = Strategy::kMeshcast});
  const StrategyEvaluation& row = comparison.rows[0];
  const ReshardPlan& plan = row.plan;
  ASSERT_TRUE(VerifyPlan(plan, c.topology).ok())
      << VerifyPlan(plan, c.topology);
  ExpectWellFormed(plan, c.topology);
  ASSERT_EQ(plan.transfers.size(), 256u);
  std::set<int> forwarder_hosts;
  for (const Transfer& transfer : plan.transfers) {
    EXPECT_EQ(transfer.src_device, 0);
    EXPECT_TRUE(transfer.deps.empty());
    ASSERT_EQ(transfer.dst_devices.size(), 1024u);
    ASSERT_EQ(transfer.parents.size(), 1024u);
    EXPECT_EQ(transfer.parents[0], 0);  // the forwarder gets it first
    forwarder_hosts.insert(c.topology.HostOf(transfer.dst_devices[0]));
    for (int crossings : HostCrossings(transfer, c.topology)) {
      EXPECT_LE(crossings, 2);
    }
    // Chunks as small as a worker moves well (64 KiB).
    EXPECT_EQ(transfer.chunk_bytes, 64 << 10);
  }
  EXPECT_EQ(forwarder_hosts.size(), 256u);
  // All 256 trees share the sender's NIC, so each forwarder waits for the
  // piece at 1/256 of its rate: about twice the bound, against 256 hops
  // for one chain.
  EXPECT_LT(row.predicted_seconds, 2.1 * row.lower_bound_seconds);
}

TEST(MeshcastSplitTest, LargeBroadcastsToManyHostsGoAsTwoBinaryTrees) {
  // 256 MiB to 64 and 256 hosts: one chain would pay H - 1 chunks of fill
  // (2.04x the bound at 256), and one tree per host H chunks at 1/H of the
  // NIC (1.06x at 256). Two binary trees, each with half of the bytes, pay
  // two chunks per level, about log2(H) levels. (At 16 hosts trees per
  // host, with chunks fitted to their share of the NIC, are as fast.)
  for (int hosts : {64, 256}) {
    SCOPED_TRACE(absl::StrCat(hosts, " hosts"));
    const LongBroadcast c = OneToHosts(hosts, int64_t{256} << 20);
    const StrategyComparison comparison = MustCompare(
        {c.problem}, c.topology, CompareOptions{.only = Strategy::kMeshcast});
    const StrategyEvaluation& row = comparison.rows[0];
    const ReshardPlan& plan = row.plan;
    ASSERT_TRUE(VerifyPlan(plan, c.topology).ok())
        << VerifyPlan(plan, c.topology);
    ExpectWellFormed(plan, c.topology);
    ASSERT_EQ(plan.transfers.size(), 2u);
    // Levels of a binary tree of H hosts, plus the hop into its root.
    int levels = 1;
    while ((2 << (levels - 1)) - 1 < hosts) ++levels;
    std::vector<std::set<int>> forwarders(2);
    int64_t bytes = 0;
    for (size_t tree = 0; tree < 2; ++tree) {
      const Transfer& transfer = plan.transfers[tree];
      bytes += transfer.bytes;
      EXPECT_EQ(transfer.src_device, 0);
      EXPECT_TRUE(transfer.deps.empty());
      ASSERT_EQ(transfer.dst_devices.size(), 4u * hosts);
      ASSERT_EQ(transfer.parents.size(), 4u * hosts);
      // Every host's receivers hang from one entry, which sends to at
      // most two other hosts.
      std::map<int, int> remote_children;
      std::map<int, int> entries;
      for (size_t k = 0; k < transfer.dst_devices.size(); ++k) {
        const int parent = transfer.parents[k];
        const int from = parent == 0 ? 0 : transfer.dst_devices[parent - 1];
        const int to = transfer.dst_devices[k];
        if (c.topology.SameHost(from, to)) continue;
        ++entries[c.topology.HostOf(to)];
        if (parent > 0) ++remote_children[from];
      }
      EXPECT_EQ(entries.size(), static_cast<size_t>(hosts));
      for (const auto& [host, count] : entries) EXPECT_EQ(count, 1);
      for (const auto& [device, children] : remote_children) {
        EXPECT_LE(children, 2);
        forwarders[tree].insert(c.topology.HostOf(device));
      }
      const std::vector<int> crossings = HostCrossings(transfer, c.topology);
      EXPECT_EQ(*std::max_element(crossings.begin(), crossings.end()), levels);
      // 1% of the part over two chunks a level, or the 64 KiB floor.
      EXPECT_NEAR(transfer.chunk_bytes,
                  std::max(0.01 * (256 << 20) / (2 * levels), 65536.0), 1);
    }
    EXPECT_EQ(bytes, int64_t{256} << 20);  // two halves
    // The hosts that forward in one tree are leaves of the other.
    for (int host : forwarders[0]) EXPECT_EQ(forwarders[1].count(host), 0u);
    EXPECT_LE(row.predicted_seconds, 1.02 * row.lower_bound_seconds);
  }
}

TEST(MeshcastSplitTest, SmallSlicesToManyHostsBesideBulkGoAsBinaryTrees) {
  // 64 replicated tensors of 256 KiB from host 0 to the 32 hosts 1-32,
  // beside 4 GiB split over hosts 33-64 that goes to hosts 1-32 (128 MiB
  // into each). Alone, a chain through 32 hosts would end far before the
  // bulk (level), but it is all fill (31 chunks for one chunk of data),
  // and each relay passes its last chunk on beside the bulk at half the
  // NIC: the small tensors go as binary trees (5 levels, not 31 hops).
  const Topology topology = Topology::FromGbps(65, 1, 10, 1200);
  std::vector<ReshardProblem> problems;
  for (int i = 0; i < 64; ++i) {
    problems.push_back(
        Problem(topology, {64 << 10}, "1x1@0", "R", "32x1@1", "R"));
  }
  problems.push_back(
      Problem(topology, {int64_t{1} << 30}, "32x1@33", "S0", "32x1@1", "S0"));
  const StrategyComparison comparison = MustCompare(
      problems, topology, CompareOptions{.only = Strategy::kMeshcast});
  const StrategyEvaluation& row = comparison.rows[0];
  ASSERT_TRUE(VerifyPlan(row.plan, topology).ok());
  int trees = 0;
  for (const Transfer& transfer : row.plan.transfers) {
    if (transfer.tensor < 64) {
      EXPECT_FALSE(transfer.parents.empty());
      ++trees;
    }
  }
  EXPECT_EQ(trees, 2 * 64);
  EXPECT_LE(row.predicted_seconds, 1.02 * row.lower_bound_seconds);
}

TEST(MeshcastSplitTest, ManyTreesGetChunksAtTheirShareOfTheNics) {
  // 128 tensors (64 of 64 MiB sharded over hosts 0-31, 64 of 512 KiB
  // replicated there) for every one of hosts 32-63, on 400 GB/s NICs: a
  // whole model's weights to an inference replica, in small. Every part
  // goes as relay trees over the 32 receiving hosts, thousands of them at
  // once. Alone on its NICs a tree would take the topology's 1 MiB chunks
  // (20 us at the NIC rate is 8 MB), but beside the others it moves at a
  // small share of them, and every level waits for a chunk at that share:
  // with 1 MiB chunks the plan takes 1.5x the bound. The chunks shrink to
  // what keeps each tree's fill at 1% of its own time at its share.
  const Topology topology = Topology::FromGbps(64, 1, 3200, 3200);
  std::vector<ReshardProblem> problems;
  for (int i = 0; i < 64; ++i) {
    problems.push_back(
        Problem(topology, {int64_t{16} << 20}, "32x1@0", "S0", "32x1@32", "R"));
    problems.push_back(
        Problem(topology, {128 << 10}, "32x1@0", "R", "32x1@32", "R"));
  }
  const StrategyComparison comparison = MustCompare(
      problems, topology, CompareOptions{.only = Strategy::kMeshcast});
  const StrategyEvaluation& row = comparison.rows[0];
  ASSERT_TRUE(VerifyPlan(row.plan, topology).ok());
  ReshardPlan topology_chunks = row.plan;
  int trees = 0;
  for (Transfer& transfer : topology_chunks.transfers) {
    ASSERT_FALSE(transfer.parents.empty());
    ++trees;
    EXPECT_GE(transfer.chunk_bytes, 64 << 10);
    EXPECT_LT(transfer.chunk_bytes, 1 << 20);
    transfer.chunk_bytes = 0;
  }
  EXPECT_GE(trees, 64 * 32);
  const absl::StatusOr<SimulationResult> fitted = Simulate(row.plan, topology);
  const absl::StatusOr<SimulationResult> full =
      Simulate(topology_chunks, topology);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_LE(fitted->seconds, 1.01 * row.lower_bound_seconds);
  EXPECT_GT(full->seconds, 1.3 * row.lower_bound_seconds);
}

TEST_F(TestbedTest, MeshcastPlansAllTensorsTogether) {
  // Two 2 GiB tensors replicated on hosts 0 and 1, one for host 2 and one
  // for host 3. Planned one at a time, both would leave host 0 (the least
  // loaded as far as each knows); together, each host sends one.
  const std::vector<ReshardProblem> problems = {
      Problem(topology_, shape_, "2x4@0", "RRR", "1x4@2", "RRR"),
      Problem(topology_, shape_, "2x4@0", "RRR", "1x4@3", "RRR"),
  };
  const absl::StatusOr<ReshardPlan> together =
      PlanReshard(problems, topology_, Strategy::kMeshcast);
  ASSERT_TRUE(together.ok()) << together.status();
  EXPECT_TRUE(VerifyPlan(*together, topology_).ok());
  const double together_seconds = Simulate(*together, topology_)->seconds;
  EXPECT_NEAR(together_seconds, 2 * kGiB / nic_, 0.01);

  ReshardPlan apart;
  apart.strategy = "meshcast";
  apart.problems = problems;
  for (int t = 0; t < 2; ++t) {
    absl::StatusOr<ReshardPlan> alone =
        PlanReshard({problems[t]}, topology_, Strategy::kMeshcast);
    ASSERT_TRUE(alone.ok()) << alone.status();
    for (Transfer transfer : alone->transfers) {
      transfer.tensor = t;
      apart.transfers.push_back(std::move(transfer));
    }
  }
  EXPECT_TRUE(VerifyPlan(apart, topology_).ok());
  EXPECT_GE(Simulate(apart, topology_)->seconds, 1.9 * together_seconds);
}

TEST(StrategyTest, EmptyRequestGivesAnEmptyPlan) {
  const Topology topology = Topology::FromGbps(2, 2, 10, 100);
  for (Strategy strategy : ConcreteStrategies()) {
    absl::StatusOr<ReshardPlan> plan = PlanReshard({}, topology, strategy);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(plan->transfers.empty());
    EXPECT_EQ(plan->strategy, StrategyName(strategy));
  }
}

TEST(StrategyTest, NothingToMoveGivesAnEmptyPlan) {
  const Topology topology = Topology::FromGbps(2, 2, 10, 100);
  const ReshardProblem same =
      Problem(topology, {64, 64}, "2x2@0", "S0R", "2x2@0", "S0R");
  absl::StatusOr<ReshardPlan> plan =
      PlanReshard({same}, topology, Strategy::kAuto);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->transfers.empty());
}

TEST(StrategyTest, InvalidInputNamesTheField) {
  const Topology topology = Topology::FromGbps(2, 2, 10, 100);
  ReshardProblem problem =
      Problem(topology, {64, 64}, "1x2@0", "S0R", "1x2@1", "RS1");
  problem.dst_mesh.devices[1] = 42;
  absl::StatusOr<ReshardPlan> plan =
      PlanReshard({problem}, topology, Strategy::kMeshcast);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("destination mesh"));

  Topology broken = topology;
  broken.inter_host_bandwidth = -1;
  EXPECT_FALSE(CompareStrategies({}, broken).ok());
}

// ---------------------------------------------------------------------------
// Property tests over random requests.

class RandomRequests {
 public:
  explicit RandomRequests(uint64_t seed) : rng_(seed) {}

  // Uniform in [lo, hi], the same on every platform.
  int Uniform(int lo, int hi) {
    return lo + static_cast<int>(rng_() % static_cast<uint64_t>(hi - lo + 1));
  }

  Topology NextTopology() {
    Topology topology;
    topology.num_hosts = Uniform(1, 6);
    topology.devices_per_host = Uniform(1, 4);
    topology.inter_host_bandwidth = 1e9 * Uniform(1, 20);
    // Mostly fast device ports, sometimes slower than the NIC.
    topology.intra_host_bandwidth =
        Uniform(0, 3) == 0 ? 1e8 * Uniform(5, 50) : 1e9 * Uniform(50, 300);
    topology.inter_host_latency = Uniform(0, 1) ? 10e-6 : 0;
    topology.intra_host_latency = topology.inter_host_latency / 5;
    topology.pipeline_chunk_bytes = Uniform(0, 1) ? 64 : 1 << 20;
    return topology;
  }

  // A mesh of rank 1 to 3 over distinct devices: a contiguous block or a
  // random scatter (so meshes may overlap each other).
  DeviceMesh NextMesh(const Topology& topology) {
    const int n = topology.num_devices();
    DeviceMesh mesh;
    int size = 1;
    do {
      mesh.shape.clear();
      size = 1;
      const int rank = Uniform(1, 3);
      for (int i = 0; i < rank; ++i) {
        mesh.shape.push_back(Uniform(1, 4));
        size *= mesh.shape.back();
      }
    } while (size > n);
    std::vector<int> ids(n);
    for (int i = 0; i < n; ++i) ids[i] = i;
    if (Uniform(0, 1)) {
      for (int i = n - 1; i > 0; --i) std::swap(ids[i], ids[Uniform(0, i)]);
    } else {
      std::rotate(ids.begin(), ids.begin() + Uniform(0, n - size), ids.end());
    }
    mesh.devices.assign(ids.begin(), ids.begin() + size);
    return mesh;
  }

  // Each mesh axis goes to one random tensor dimension or to none.
  ShardingSpec NextSpec(int tensor_rank, int mesh_rank) {
    ShardingSpec spec;
    spec.dims.resize(tensor_rank);
    std::vector<int> axes(mesh_rank);
    for (int i = 0; i < mesh_rank; ++i) axes[i] = i;
    for (int i = mesh_rank - 1; i > 0; --i) {
      std::swap(axes[i], axes[Uniform(0, i)]);
    }
    for (int axis : axes) {
      const int dim = Uniform(-1, tensor_rank - 1);
      if (dim >= 0) spec.dims[dim].mesh_axes.push_back(axis);
    }
    return spec;
  }

  std::vector<ReshardProblem> NextRequest(const Topology& topology) {
    std::vector<ReshardProblem> problems(Uniform(0, 2) == 0 ? Uniform(2, 3)
                                                            : 1);
    for (ReshardProblem& problem : problems) {
      const int rank = Uniform(1, 3);
      for (int d = 0; d < rank; ++d) {
        problem.tensor.shape.push_back(Uniform(1, 40));
      }
      problem.tensor.dtype = static_cast<DType>(Uniform(0, 7));
      problem.src_mesh = NextMesh(topology);
      problem.dst_mesh = NextMesh(topology);
      problem.src_spec = NextSpec(rank, problem.src_mesh.rank());
      problem.dst_spec = NextSpec(rank, problem.dst_mesh.rank());
    }
    return problems;
  }

 private:
  std::mt19937_64 rng_;
};

TEST(StrategyPropertyTest, EveryStrategyIsValidAndNeverBeatsTheBound) {
  RandomRequests random(20240501);
  int meshcast_slower = 0;
  int compared = 0;
  for (int round = 0; round < 600; ++round) {
    const Topology topology = random.NextTopology();
    const std::vector<ReshardProblem> problems = random.NextRequest(topology);
    SCOPED_TRACE(::testing::Message() << "round " << round);
    const StrategyComparison comparison = MustCompare(problems, topology);
    ASSERT_EQ(comparison.rows.size(), ConcreteStrategies().size());
    for (const StrategyEvaluation& row : comparison.rows) {
      SCOPED_TRACE(StrategyName(row.strategy));
      const absl::Status verified = VerifyPlan(row.plan, topology);
      ASSERT_TRUE(verified.ok()) << verified;
      ExpectWellFormed(row.plan, topology);
      EXPECT_GE(row.predicted_seconds, row.lower_bound_seconds * (1 - 1e-9));
    }
    ExpectHostByHostChains(Row(comparison, Strategy::kMeshcast).plan, topology);
    const double meshcast =
        Row(comparison, Strategy::kMeshcast).predicted_seconds;
    const double broadcast_lb =
        Row(comparison, Strategy::kBroadcastLb).predicted_seconds;
    if (broadcast_lb > 0) {
      ++compared;
      // Up to 1.3x on a few tiny requests (tens of microseconds), where
      // meshcast's concurrent relays share a NIC and so wait longer for each
      // chunk (the fill) than broadcast_lb's relays, which run one at a time.
      EXPECT_LE(meshcast, 1.3 * broadcast_lb);
      if (meshcast > broadcast_lb * (1 + 1e-9)) ++meshcast_slower;
    }
    // The choice is the fastest row.
    for (const StrategyEvaluation& row : comparison.rows) {
      EXPECT_LE(comparison.rows[comparison.chosen].predicted_seconds,
                row.predicted_seconds * (1 + 1e-9));
    }
  }
  EXPECT_LE(meshcast_slower, compared / 100)
      << "meshcast slower than broadcast_lb in " << meshcast_slower << " of "
      << compared << " random requests";
}

// Pruning is sound: the broadcast strategies' serialized bound never
// exceeds their simulated time, so a pruned comparison picks a plan as fast
// as the full one; and a forced strategy plans that one only.
TEST(StrategyPropertyTest, PruningNeverDropsTheFastestPlan) {
  RandomRequests random(20261127);
  int pruned = 0;
  for (int round = 0; round < 300; ++round) {
    const Topology topology = random.NextTopology();
    const std::vector<ReshardProblem> problems = random.NextRequest(topology);
    SCOPED_TRACE(::testing::Message() << "round " << round);
    const StrategyComparison full = MustCompare(problems, topology);
    std::vector<UnitTask> tasks;
    for (size_t t = 0; t < problems.size(); ++t) {
      absl::StatusOr<std::vector<UnitTask>> more =
          ComputeUnitTasks(problems[t], static_cast<int>(t));
      ASSERT_TRUE(more.ok()) << more.status();
      tasks.insert(tasks.end(), more->begin(), more->end());
    }
    const double bound = SerializedBroadcastBoundSeconds(tasks, topology);
    for (Strategy s : {Strategy::kBroadcast, Strategy::kBroadcastLb}) {
      EXPECT_LE(bound, Row(full, s).predicted_seconds * (1 + 1e-9))
          << StrategyName(s);
    }
    EXPECT_LE(PointToPointBoundSeconds(tasks, topology),
              Row(full, Strategy::kSendRecv).predicted_seconds * (1 + 1e-9));
    CompareOptions prune;
    prune.prune = true;
    absl::StatusOr<StrategyComparison> fast =
        CompareStrategies(problems, topology, prune);
    ASSERT_TRUE(fast.ok()) << fast.status();
    ASSERT_EQ(fast->rows.size(), full.rows.size());
    EXPECT_FALSE(fast->rows[fast->chosen].pruned);
    EXPECT_NEAR(fast->rows[fast->chosen].predicted_seconds,
                full.rows[full.chosen].predicted_seconds,
                1e-9 * full.rows[full.chosen].predicted_seconds);
    for (const StrategyEvaluation& row : fast->rows) {
      if (!row.pruned) continue;
      ++pruned;
      EXPECT_TRUE(row.plan.transfers.empty());
      // The bound it was pruned by is below its real time.
      EXPECT_LE(row.predicted_seconds,
                Row(full, row.strategy).predicted_seconds * (1 + 1e-9));
    }
    CompareOptions only;
    only.only = Strategy::kSendRecv;
    absl::StatusOr<StrategyComparison> one =
        CompareStrategies(problems, topology, only);
    ASSERT_TRUE(one.ok());
    ASSERT_EQ(one->rows.size(), 1u);
    EXPECT_EQ(one->rows[0].strategy, Strategy::kSendRecv);
    EXPECT_EQ(one->rows[0].predicted_seconds,
              Row(full, Strategy::kSendRecv).predicted_seconds);
  }
  EXPECT_GT(pruned, 0) << "no request pruned anything: the test saw nothing";
}

TEST(StrategyPropertyTest, PlansAreDeterministic) {
  RandomRequests random(7);
  for (int round = 0; round < 50; ++round) {
    const Topology topology = random.NextTopology();
    const std::vector<ReshardProblem> problems = random.NextRequest(topology);
    for (Strategy strategy : ConcreteStrategies()) {
      const ReshardPlan first =
          PlanReshard(problems, topology, strategy).value();
      const ReshardPlan second =
          PlanReshard(problems, topology, strategy).value();
      ASSERT_EQ(first.transfers.size(), second.transfers.size());
      for (size_t i = 0; i < first.transfers.size(); ++i) {
        const Transfer& a = first.transfers[i];
        const Transfer& b = second.transfers[i];
        EXPECT_EQ(a.slice, b.slice);
        EXPECT_EQ(a.src_device, b.src_device);
        EXPECT_EQ(a.dst_devices, b.dst_devices);
        EXPECT_EQ(a.deps, b.deps);
      }
    }
  }
}

TEST(StrategyPropertyTest, SimulatedTimeNeverBelowTheBoundOnBigTensors) {
  // Realistic sizes (MiB to GiB) on the testbed, where latency is small
  // next to the bandwidth terms: meshcast stays close to the bound.
  const Topology topology = Topology::FromGbps(6, 4, 10, 1200);
  RandomRequests random(99);
  for (int round = 0; round < 100; ++round) {
    std::vector<ReshardProblem> problems = random.NextRequest(topology);
    for (ReshardProblem& problem : problems) {
      for (int64_t& extent : problem.tensor.shape) extent *= 64;
    }
    const StrategyComparison comparison = MustCompare(problems, topology);
    for (const StrategyEvaluation& row : comparison.rows) {
      EXPECT_GE(row.predicted_seconds, row.lower_bound_seconds * (1 - 1e-9));
    }
  }
}

// ---------------------------------------------------------------------------
// Planning speed: the issue's target (128x8 -> 128x8, 65536^2 bf16,
// S0,S1 -> S1,S0, 16K unit tasks) plans and simulates well under a second
// in Release; the bound here is loose so that slow CI machines pass.

TEST(StrategySpeedTest, SixteenThousandTasksPlanAndSimulateQuickly) {
  const Topology topology = Topology::FromGbps(256, 8, 100, 2400);
  const ReshardProblem problem =
      Problem(topology, {65536, 65536}, "128x8@0", "S0,S1", "128x8@128",
              "S1,S0", DType::kBFloat16);
  const auto start = std::chrono::steady_clock::now();
  const absl::StatusOr<ReshardPlan> plan =
      PlanReshard({problem}, topology, Strategy::kMeshcast);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const absl::StatusOr<SimulationResult> simulated = Simulate(*plan, topology);
  ASSERT_TRUE(simulated.ok()) << simulated.status();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(plan->transfers.size(), 16384u);
  EXPECT_LT(seconds, 5.0);
  // Every source and destination NIC carries 64 MiB.
  EXPECT_NEAR(simulated->seconds, 64.0 * 1024 * 1024 / 12.5e9, 1e-4);
}

}  // namespace
}  // namespace meshcast
