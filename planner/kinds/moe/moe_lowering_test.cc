#include "planner/kinds/moe/moe_lowering.h"

#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/ir/plan_hazards.h"
#include "planner/sim/plan_simulator.h"
#include "planner/topology.h"

namespace meshcast {
namespace {

MoeShape Shape(int ep, int mp, int64_t tokens = 64, int experts = 4,
               int top_k = 2, double capacity = 1.0) {
  MoeShape s;
  s.tokens = tokens;
  s.hidden = 16;
  s.ffn = 32;
  s.experts = experts;
  s.top_k = top_k;
  s.capacity_factor = capacity;
  s.mp = mp;
  s.ep = ep;
  return s;
}

std::vector<int> Devices(int count) {
  std::vector<int> d(count);
  for (int i = 0; i < count; ++i) d[i] = i;
  return d;
}

int Count(const v1::Plan& plan, v1::Step::Op op) {
  int n = 0;
  for (const v1::Step& s : plan.steps()) n += s.op() == op;
  return n;
}

int64_t BytesOf(const v1::Plan& plan, v1::Step::Op op) {
  int64_t n = 0;
  for (const v1::Step& s : plan.steps()) n += s.op() == op ? s.bytes() : 0;
  return n;
}

TEST(MoeRoutingTest, EveryTokenPicksDistinctExpertsAndSlotsFillInPriority) {
  const MoeShape shape = Shape(2, 2, 64, 8, 2, 0.75);
  const MoeRouting routing = RouteTokens(shape);
  const int64_t tokens = shape.total_tokens(), k = shape.top_k;
  ASSERT_EQ(routing.expert.size(), static_cast<size_t>(tokens * k));
  EXPECT_EQ(routing.capacity, 6);  // ceil(0.75 * 2 * 32 / 8)
  // Per (slice, expert): slots 0..filled-1, each once; every first choice
  // that was dropped means the bucket was full of first choices.
  std::map<std::pair<int64_t, int>, std::set<int64_t>> buckets;
  std::map<std::pair<int64_t, int>, int> firsts_dropped;
  int64_t dropped = 0;
  std::vector<int64_t> load(shape.experts, 0);
  for (int64_t t = 0; t < tokens; ++t) {
    EXPECT_NE(routing.expert[t * k], routing.expert[t * k + 1]);
    for (int i = 0; i < k; ++i) {
      const int e = routing.expert[t * k + i];
      ASSERT_GE(e, 0);
      ASSERT_LT(e, shape.experts);
      ++load[e];
      const auto bucket = std::make_pair(t / shape.slice(), e);
      const int64_t slot = routing.slot[t * k + i];
      if (slot < 0) {
        ++dropped;
        if (i == 0) ++firsts_dropped[bucket];
        continue;
      }
      EXPECT_LT(slot, routing.capacity);
      EXPECT_TRUE(buckets[bucket].insert(slot).second) << "slot reused";
    }
  }
  EXPECT_EQ(dropped, routing.dropped);
  EXPECT_GT(dropped, 0);  // capacity 0.75 must drop some
  EXPECT_EQ(load, routing.load);
  for (const auto& [bucket, slots] : buckets) {
    EXPECT_EQ(*slots.rbegin() + 1, static_cast<int64_t>(slots.size()));
  }
  for (const auto& [bucket, count] : firsts_dropped) {
    EXPECT_EQ(static_cast<int64_t>(buckets[bucket].size()), routing.capacity);
  }
}

TEST(MoeRoutingTest, SkewMakesEarlyExpertsPopular) {
  MoeShape shape = Shape(2, 2, 1024, 8, 2, 1.0);
  const MoeRouting even = RouteTokens(shape);
  shape.expert_skew = 1.5;
  const MoeRouting skewed = RouteTokens(shape);
  const double mean = 2.0 * shape.total_tokens() / shape.experts;
  // Uniform: every expert within 15% of the mean; skewed: expert 0 gets
  // several times expert 7's share and drops many more choices.
  for (int64_t load : even.load) EXPECT_NEAR(load, mean, 0.15 * mean);
  EXPECT_GT(skewed.load[0], 3 * skewed.load[7]);
  EXPECT_GT(skewed.dropped, 4 * even.dropped);
  for (int64_t t = 0; t < shape.total_tokens(); ++t) {
    EXPECT_NE(skewed.expert[2 * t], skewed.expert[2 * t + 1]);
  }
}

TEST(MoeRoutingTest, DependsOnTheSeedOnly) {
  MoeShape a = Shape(2, 2);
  MoeShape b = a;
  EXPECT_EQ(RouteTokens(a).expert, RouteTokens(b).expert);
  b.seed = 7;
  EXPECT_NE(RouteTokens(a).expert, RouteTokens(b).expert);
}

TEST(MoeLoweringTest, BaselineRepeatsTheDispatchAcrossTheMpGroup) {
  const MoeShape shape = Shape(2, 2);
  const MoeRouting routing = RouteTokens(shape);
  absl::StatusOr<v1::Plan> base =
      LowerMoe(shape, routing, MoeSchedule::kBaseline, 1, Devices(4));
  absl::StatusOr<v1::Plan> s1 =
      LowerMoe(shape, routing, MoeSchedule::kS1, 1, Devices(4));
  ASSERT_TRUE(base.ok()) << base.status();
  ASSERT_TRUE(s1.ok()) << s1.status();
  // Two all-to-alls each; the baseline's carry mp = 2 times s1's bytes.
  EXPECT_EQ(Count(*base, v1::Step::OP_ALL_TO_ALL), 2);
  EXPECT_EQ(Count(*s1, v1::Step::OP_ALL_TO_ALL), 2);
  EXPECT_EQ(BytesOf(*base, v1::Step::OP_ALL_TO_ALL),
            2 * BytesOf(*s1, v1::Step::OP_ALL_TO_ALL));
  // Baseline: all-reduce per MP group, no all-gather; s1: reduce-scatter,
  // ESP gather and the output's MP gather per group.
  EXPECT_EQ(Count(*base, v1::Step::OP_ALL_REDUCE), 2);
  EXPECT_EQ(Count(*base, v1::Step::OP_ALL_GATHER), 0);
  EXPECT_EQ(Count(*s1, v1::Step::OP_REDUCE_SCATTER), 2);
  EXPECT_EQ(Count(*s1, v1::Step::OP_ALL_GATHER), 4);
  // The gate GEMM of the baseline runs on all B tokens, s1's on B / mp.
  for (const v1::Plan* plan : {&*base, &*s1}) {
    for (const v1::Step& step : plan->steps()) {
      if (step.stage() == kPhaseGate && step.compute().has_gemm()) {
        EXPECT_EQ(step.compute().gemm().m(),
                  plan == &*base ? shape.tokens : shape.slice());
      }
    }
  }
}

TEST(MoeLoweringTest, AllToAllsOnlyMoveWithinAnEpGroup) {
  const MoeShape shape = Shape(2, 2);
  absl::StatusOr<v1::Plan> plan =
      LowerMoe(shape, RouteTokens(shape), MoeSchedule::kS1, 1, Devices(4));
  ASSERT_TRUE(plan.ok());
  for (const v1::Step& step : plan->steps()) {
    if (step.op() != v1::Step::OP_ALL_TO_ALL) continue;
    ASSERT_EQ(step.counts_size(), 16);
    for (int r = 0; r < 4; ++r) {
      for (int s = 0; s < 4; ++s) {
        EXPECT_EQ(step.counts(r * 4 + s) > 0, r % 2 == s % 2) << r << "," << s;
      }
    }
  }
}

TEST(MoeLoweringTest, S2PipelinesEachPieceOfTheCapacity) {
  const MoeShape shape = Shape(2, 2, 64, 4, 2, 2.0);  // C = 16
  absl::StatusOr<v1::Plan> plan =
      LowerMoe(shape, RouteTokens(shape), MoeSchedule::kS2, 4, Devices(4));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Count(*plan, v1::Step::OP_ALL_TO_ALL), 8);
  // Per piece and group: the ESP gather and the combine side's MP gather;
  // plus one gate-weights gather per group.
  EXPECT_EQ(Count(*plan, v1::Step::OP_ALL_GATHER), 2 * 4 * 2 + 2);
  // Dispatch all-to-alls form a chain: each depends on the one before.
  int prev = -1;
  for (const v1::Step& step : plan->steps()) {
    if (step.op() != v1::Step::OP_ALL_TO_ALL ||
        step.stage() != kPhaseDispatch) {
      continue;
    }
    if (prev >= 0) {
      EXPECT_THAT(step.deps(), ::testing::Contains(prev));
    }
    prev = step.id();
  }
}

TEST(MoeLoweringTest, EveryScheduleSimulatesAndPausingMpPaysOffAcrossHosts) {
  // 2 hosts x 4 devices, slow NICs: the baseline's 4-fold all-to-all
  // dominates.
  const Topology topology = Topology::FromGbps(2, 4, 10, 1000);
  MoeShape shape = Shape(2, 4, 512, 8, 2, 1.0);
  shape.hidden = 256;
  shape.ffn = 512;
  const MoeRouting routing = RouteTokens(shape);
  double seconds[3];
  const MoeSchedule schedules[3] = {MoeSchedule::kBaseline, MoeSchedule::kS1,
                                    MoeSchedule::kS2};
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<v1::Plan> plan =
        LowerMoe(shape, routing, schedules[i], 4, Devices(8));
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<PlanSimulation> sim = SimulatePlan(*plan, topology);
    ASSERT_TRUE(sim.ok()) << sim.status();
    seconds[i] = sim->seconds;
  }
  EXPECT_LT(seconds[1], seconds[0]);
  EXPECT_LT(seconds[2], seconds[0]);
}

TEST(MoeLoweringTest, TheBackwardMirrorsEveryScheduleAndCoversEachGradient) {
  const Topology topology = Topology::FromGbps(2, 2, 10, 1000);
  MoeShape shape = Shape(2, 2, 64, 4, 2, 2.0);  // C = 16
  const MoeRouting routing = RouteTokens(shape);
  for (const MoeSchedule schedule :
       {MoeSchedule::kBaseline, MoeSchedule::kS1, MoeSchedule::kS2}) {
    SCOPED_TRACE(MoeScheduleName(schedule));
    const int chunks = schedule == MoeSchedule::kS2 ? 4 : 1;
    shape.backward = false;
    absl::StatusOr<v1::Plan> forward =
        LowerMoe(shape, routing, schedule, chunks, Devices(4));
    shape.backward = true;
    absl::StatusOr<v1::Plan> both =
        LowerMoe(shape, routing, schedule, chunks, Devices(4));
    ASSERT_TRUE(forward.ok()) << forward.status();
    ASSERT_TRUE(both.ok()) << both.status();
    EXPECT_TRUE(CheckPlanHazards(*forward).ok()) << CheckPlanHazards(*forward);
    EXPECT_TRUE(CheckPlanHazards(*both).ok()) << CheckPlanHazards(*both);
    // Twice the all-to-alls (dYE out, dXE back), of the same sizes.
    EXPECT_EQ(Count(*both, v1::Step::OP_ALL_TO_ALL),
              2 * Count(*forward, v1::Step::OP_ALL_TO_ALL));
    EXPECT_EQ(BytesOf(*both, v1::Step::OP_ALL_TO_ALL),
              2 * BytesOf(*forward, v1::Step::OP_ALL_TO_ALL));
    // The forward's steps come first, unchanged in op and phase; every
    // backward step is in a backward phase.
    for (const v1::Step& step : both->steps()) {
      if (step.id() < forward->steps_size()) {
        EXPECT_EQ(step.op(), forward->steps(step.id()).op());
        EXPECT_LT(step.stage(), kPhaseCombineBackward);
      } else {
        EXPECT_GE(step.stage(), kPhaseCombineBackward);
        EXPECT_LT(step.stage(), kMoePhases);
      }
    }
    // The gradients dX, dWg, dW1, dW2 (tensors 9..12) are DESTINATIONs:
    // dW1 and dW2 split over the devices without overlap, dX and dWg
    // whole on every device of a group / of the mesh.
    std::map<int, int64_t> covered;
    for (const v1::Buffer& buffer : both->buffers()) {
      if (buffer.role() != v1::Buffer::ROLE_DESTINATION) continue;
      int64_t elements = 1;
      for (const v1::Interval& i : buffer.box()) {
        elements *= i.end() - i.begin();
      }
      covered[buffer.tensor()] += elements;
    }
    const int64_t m = shape.hidden, e = shape.experts, h = shape.ffn;
    EXPECT_EQ(covered[9], shape.total_tokens() * m * shape.mp);
    EXPECT_EQ(covered[10], m * e * 4);
    EXPECT_EQ(covered[11], e * m * h);
    EXPECT_EQ(covered[12], e * h * m);
    // The backward takes longer than the forward alone, predicted.
    absl::StatusOr<PlanSimulation> f = SimulatePlan(*forward, topology);
    absl::StatusOr<PlanSimulation> b = SimulatePlan(*both, topology);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_GT(b->seconds, 1.5 * f->seconds);
  }
}

TEST(MoeLoweringTest, RefusesShapesThatDoNotFit) {
  MoeShape shape = Shape(2, 2);
  const MoeRouting routing = RouteTokens(shape);
  EXPECT_FALSE(LowerMoe(shape, routing, MoeSchedule::kS1, 1, Devices(3)).ok());
  EXPECT_FALSE(
      LowerMoe(shape, routing, MoeSchedule::kAuto, 1, Devices(4)).ok());
  shape.experts = 3;
  EXPECT_FALSE(LowerMoe(shape, routing, MoeSchedule::kS1, 1, Devices(4)).ok());
}

}  // namespace
}  // namespace meshcast
