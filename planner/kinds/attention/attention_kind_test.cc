#include "planner/kinds/attention/attention_kind.h"

#include <functional>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/ir/plan_hazards.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::JobSpec Spec(int ranks = 4, const std::string& algorithm = "",
                 const std::string& layout = "", bool causal = false) {
  v1::JobSpec spec;
  v1::AttentionSpec* a = spec.mutable_attention();
  a->set_heads(4);
  a->set_kv_heads(2);
  a->set_seq_len(64);
  a->set_head_dim(16);
  a->mutable_mesh()->add_shape(1);
  a->mutable_mesh()->add_shape(ranks);
  a->set_algorithm(algorithm);
  a->set_layout(layout);
  a->set_causal(causal);
  return spec;
}

AttentionShape Shape(int ranks, AttentionLayout layout, bool causal) {
  AttentionShape s;
  s.heads = 4;
  s.kv_heads = 2;
  s.seq_len = 8 * ranks;
  s.head_dim = 4;
  s.ranks = ranks;
  s.layout = layout;
  s.causal = causal;
  return s;
}

std::vector<int> Devices(int n) {
  std::vector<int> d(n);
  for (int i = 0; i < n; ++i) d[i] = i;
  return d;
}

const Topology kTopology = Topology::FromGbps(1, 4, 10, 100);

TEST(AttentionLayoutTest, PositionsOfEachLayout) {
  AttentionShape s = Shape(2, AttentionLayout::kZigzag, true);
  s.seq_len = 8;  // L = 4: chunks of 2
  std::vector<int64_t> zigzag;
  for (int64_t r = 0; r < 8; ++r) zigzag.push_back(s.LayoutPosition(r));
  EXPECT_THAT(zigzag, ElementsAre(0, 1, 6, 7, 2, 3, 4, 5));
  s.layout = AttentionLayout::kStriped;
  std::vector<int64_t> striped;
  for (int64_t r = 0; r < 8; ++r) striped.push_back(s.LayoutPosition(r));
  EXPECT_THAT(striped, ElementsAre(0, 2, 4, 6, 1, 3, 5, 7));
  s.layout = AttentionLayout::kContiguous;
  EXPECT_EQ(s.LayoutPosition(5), 5);
  // Causal and contiguous: device p sees the blocks of devices <= p.
  EXPECT_TRUE(s.BlockVisible(1, 0));
  EXPECT_FALSE(s.BlockVisible(0, 1));
  s.layout = AttentionLayout::kZigzag;
  EXPECT_TRUE(s.BlockVisible(0, 1));
  EXPECT_TRUE(s.BlockVisible(1, 0));
}

TEST(AttentionKindTest, ErrorsNameTheFieldAndTheAllowedValues) {
  struct Case {
    std::function<void(v1::AttentionSpec&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](v1::AttentionSpec& a) { a.set_heads(0); },
       "attention.heads is 0; allowed: 1..1024"},
      {[](v1::AttentionSpec& a) { a.set_kv_heads(3); },
       "attention.kv_heads 3 does not divide heads 4"},
      {[](v1::AttentionSpec& a) { a.set_seq_len(30); },
       "attention.seq_len 30 is not divisible by 4"},
      {[](v1::AttentionSpec& a) {
         a.set_seq_len(36);
         a.set_layout("zigzag");
       },
       "not divisible by 8 (zigzag"},
      {[](v1::AttentionSpec& a) { a.set_layout("spiral"); },
       "attention.layout \"spiral\" is not one of contiguous, zigzag"},
      {[](v1::AttentionSpec& a) { a.set_algorithm("tree"); },
       "attention.algorithm \"tree\" is not one of rsa, ring, ulysses"},
      {[](v1::AttentionSpec& a) {
         a.set_algorithm("ulysses");
         a.set_kv_heads(1);
       },
       "ulysses needs heads (4) and kv_heads (1) divisible by the group "
       "size 4"},
      {[](v1::AttentionSpec& a) { a.set_pass("backward"); },
       "attention.pass \"backward\" is not one of forward, "
       "forward_backward"},
      {[](v1::AttentionSpec& a) { a.clear_mesh(); },
       "attention.mesh is required"},
      {[](v1::AttentionSpec& a) { a.set_dtype(v1::DTYPE_INT8); },
       "not one of float32"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = Spec();
    c.edit(*spec.mutable_attention());
    const absl::Status status = AttentionKind().Validate(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
  EXPECT_TRUE(AttentionKind().Validate(Spec()).ok());
}

int Count(const v1::Plan& plan, v1::Step::Op op) {
  int n = 0;
  for (const v1::Step& s : plan.steps()) n += s.op() == op;
  return n;
}

// Attention FLOPs each device's blocks add up to.
std::map<int, double> BlockFlops(const v1::Plan& plan) {
  std::map<int, double> flops;
  for (const v1::Step& s : plan.steps()) {
    if (s.compute().has_attention_block()) flops[s.device()] += s.flops();
  }
  return flops;
}

TEST(AttentionLoweringTest, TheRingPassesEveryBlockOnceAndSkipsMaskedOnes) {
  for (bool causal : {false, true}) {
    const AttentionShape shape = Shape(4, AttentionLayout::kContiguous, causal);
    absl::StatusOr<v1::Plan> plan =
        LowerAttention(shape, AttentionAlgorithm::kRing, Devices(4));
    ASSERT_TRUE(plan.ok()) << plan.status();
    // P - 1 rounds of one send/recv per device, K and V together.
    EXPECT_EQ(Count(*plan, v1::Step::OP_SEND_RECV), 3 * 4);
    const std::map<int, double> flops = BlockFlops(*plan);
    if (!causal) {
      for (const auto& [device, f] : flops) EXPECT_EQ(f, flops.at(0));
    } else {
      // Device p computes its own block's lower triangle and p whole
      // blocks: the contiguous layout's imbalance. FLOPs count the
      // visible (query, key) pairs: 4 B H D per pair.
      const double l = shape.rows(), per_pair = 4.0 * 4 * shape.head_dim;
      for (const auto& [device, f] : flops) {
        EXPECT_DOUBLE_EQ(f, per_pair * (l * (l + 1) / 2 + device * l * l));
      }
    }
  }
  // Zigzag balances causal work: every device computes P / 2 + 1 blocks'
  // worth... here every device the same.
  const AttentionShape zigzag = Shape(4, AttentionLayout::kZigzag, true);
  absl::StatusOr<v1::Plan> plan =
      LowerAttention(zigzag, AttentionAlgorithm::kRing, Devices(4));
  ASSERT_TRUE(plan.ok());
  const std::map<int, double> flops = BlockFlops(*plan);
  for (const auto& [device, f] : flops) EXPECT_EQ(f, flops.at(0));
}

// The summary's work_balance is the plan's: max / mean of the attention
// FLOPs per rank, 1 for zigzag, the contiguous layout's triangle otherwise.
TEST(AttentionKindTest, SummaryReportsThePlannedWorkBalance) {
  for (AttentionLayout layout :
       {AttentionLayout::kContiguous, AttentionLayout::kZigzag}) {
    absl::StatusOr<v1::Plan> plan =
        LowerAttention(Shape(4, layout, /*causal=*/true),
                       AttentionAlgorithm::kRing, Devices(4));
    ASSERT_TRUE(plan.ok()) << plan.status();
    v1::JobResult result;
    AttentionKind().Summarize(Spec(), *plan, result);
    ASSERT_TRUE(result.metrics().contains("work_balance"));
    const double balance = result.metrics().at("work_balance");
    if (layout == AttentionLayout::kZigzag) {
      EXPECT_DOUBLE_EQ(balance, 1.0);
    } else {
      // Rank p: its own block's triangle and p whole blocks (l rows each):
      // l(l+1)/2 + p l^2 pairs; the last rank the most. The finish steps,
      // the same on every rank and tiny, pull it a little towards 1.
      const double l = 8, last = l * (l + 1) / 2 + 3 * l * l;
      const double mean = l * (l + 1) / 2 + 1.5 * l * l;
      EXPECT_LT(balance, last / mean);
      EXPECT_NEAR(balance, last / mean, 1e-3);
    }
  }
}

// causal_balance is the CPU seconds' max / mean where every attention step
// has them, else the spans'; causal_balance_wall is always the spans'.
TEST(AttentionKindTest, CausalBalanceUsesCpuSecondsWhereMeasured) {
  absl::StatusOr<v1::Plan> plan =
      LowerAttention(Shape(2, AttentionLayout::kZigzag, /*causal=*/true),
                     AttentionAlgorithm::kRing, Devices(2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Each attention step: 1 s of CPU; its span 1 s on device 0 and 2 s on
  // device 1 (a core that also ran something else).
  v1::JobResult measured;
  std::map<int, double> wall, cpu;
  for (int i = 0; i < plan->steps_size(); ++i) {
    const v1::Step& step = plan->steps(i);
    v1::StepResult* r = measured.add_steps();
    r->set_step(i);
    r->set_device(step.device());
    const double span = step.device() == 0 ? 1.0 : 2.0;
    r->set_start_seconds(10.0 * i);
    r->set_end_seconds(10.0 * i + span);
    r->set_cpu_seconds(1.0);
    if (step.op() == v1::Step::OP_COMPUTE &&
        step.compute().has_attention_block()) {
      wall[step.device()] += span;
      cpu[step.device()] += 1.0;
    }
  }
  ASSERT_EQ(wall.size(), 2u);
  ASSERT_EQ(cpu.at(0), cpu.at(1));  // zigzag: the same steps on each rank
  v1::JobResult with_cpu = measured;
  AttentionKind().Summarize(Spec(), *plan, with_cpu);
  const auto& m = with_cpu.metrics();
  EXPECT_NEAR(m.at("causal_balance"), 1.0, 1e-12);
  EXPECT_NEAR(m.at("causal_balance_wall"), 2.0 / 1.5, 1e-12);
  EXPECT_GT(m.at("compute_cpu_mean_seconds"), 0);
  // One step without CPU seconds: the spans decide.
  v1::JobResult partial = measured;
  for (v1::StepResult& r : *partial.mutable_steps()) {
    const v1::Step& step = plan->steps(r.step());
    if (step.op() == v1::Step::OP_COMPUTE &&
        step.compute().has_attention_block()) {
      r.set_cpu_seconds(0);
      break;
    }
  }
  AttentionKind().Summarize(Spec(), *plan, partial);
  EXPECT_NEAR(partial.metrics().at("causal_balance"), 2.0 / 1.5, 1e-12);
  EXPECT_FALSE(partial.metrics().contains("compute_cpu_mean_seconds"));
}

TEST(AttentionLoweringTest, UlyssesExchangesHeadsAndRsaKeepsEveryKeyBlock) {
  const AttentionShape shape = Shape(2, AttentionLayout::kContiguous, false);
  absl::StatusOr<v1::Plan> ulysses =
      LowerAttention(shape, AttentionAlgorithm::kUlysses, Devices(2));
  ASSERT_TRUE(ulysses.ok()) << ulysses.status();
  EXPECT_EQ(Count(*ulysses, v1::Step::OP_ALL_TO_ALL), 4);  // Q, K, V, O
  EXPECT_EQ(Count(*ulysses, v1::Step::OP_SEND_RECV), 0);
  const AttentionShape four = Shape(4, AttentionLayout::kContiguous, false);
  absl::StatusOr<v1::Plan> rsa =
      LowerAttention(four, AttentionAlgorithm::kRsa, Devices(4));
  absl::StatusOr<v1::Plan> ring =
      LowerAttention(four, AttentionAlgorithm::kRing, Devices(4));
  ASSERT_TRUE(rsa.ok() && ring.ok());
  // RSA: the K pass then the V pass (3 rounds of 4 each); every K block
  // kept on every device: more memory than the ring's two slots.
  EXPECT_EQ(Count(*rsa, v1::Step::OP_SEND_RECV), 2 * 3 * 4);
  EXPECT_GT(PlanMemoryPerDevice(*rsa)[0], PlanMemoryPerDevice(*ring)[0]);
  AttentionShape odd = shape;
  odd.kv_heads = 1;
  EXPECT_FALSE(
      LowerAttention(odd, AttentionAlgorithm::kUlysses, Devices(2)).ok());
}

// No two steps touch one region of a buffer unordered (one writing), in
// any algorithm, layout, mask, group size or pass.
TEST(AttentionLoweringTest, EveryPlanIsFreeOfRaces) {
  for (AttentionAlgorithm algorithm :
       {AttentionAlgorithm::kRing, AttentionAlgorithm::kRsa,
        AttentionAlgorithm::kUlysses}) {
    for (AttentionLayout layout :
         {AttentionLayout::kContiguous, AttentionLayout::kZigzag,
          AttentionLayout::kStriped}) {
      for (int ranks : {1, 2, 4}) {
        for (bool causal : {false, true}) {
          for (bool backward : {false, true}) {
            AttentionShape shape = Shape(ranks, layout, causal);
            shape.kv_heads = 4;  // ulysses on 4 ranks
            shape.backward = backward;
            absl::StatusOr<v1::Plan> plan =
                LowerAttention(shape, algorithm, Devices(ranks));
            ASSERT_TRUE(plan.ok()) << plan.status();
            const absl::Status races = CheckPlanHazards(*plan);
            EXPECT_TRUE(races.ok())
                << AttentionAlgorithmName(algorithm) << " "
                << AttentionLayoutName(layout) << " ranks " << ranks
                << (causal ? " causal" : "") << (backward ? " backward" : "")
                << ": " << races;
          }
        }
      }
    }
  }
}

// Steps of an attention backward of `target` on each device.
std::map<int, int> GradSteps(const v1::Plan& plan,
                             v1::AttentionBackwardAttrs::Target target) {
  std::map<int, int> steps;
  for (const v1::Step& s : plan.steps()) {
    if (s.compute().has_attention_backward() &&
        s.compute().attention_backward().target() == target) {
      ++steps[s.device()];
    }
  }
  return steps;
}

TEST(AttentionLoweringTest, BackwardRingBringsEveryAccumulatorHome) {
  for (bool causal : {false, true}) {
    AttentionShape shape = Shape(
        4, causal ? AttentionLayout::kContiguous : AttentionLayout::kZigzag,
        causal);
    shape.backward = true;
    absl::StatusOr<v1::Plan> plan =
        LowerAttention(shape, AttentionAlgorithm::kRing, Devices(4));
    ASSERT_TRUE(plan.ok()) << plan.status();
    // Forward: 3 rounds of 4; backward: 3 rounds of K/V and of the
    // accumulators, and the 4 accumulators home.
    EXPECT_EQ(Count(*plan, v1::Step::OP_SEND_RECV), 3 * 4 + 2 * 3 * 4 + 4);
    // dQ and dKV on every visible block: all 4, or with causal masks on
    // the contiguous layout blocks 0 ... p on device p. The last writers
    // of the job's dKV are transfers.
    const auto dq = GradSteps(*plan, v1::AttentionBackwardAttrs::TARGET_DQ);
    const auto dkv = GradSteps(*plan, v1::AttentionBackwardAttrs::TARGET_DKV);
    ASSERT_EQ(dq.size(), 4u);
    for (const auto& [device, n] : dq) {
      EXPECT_EQ(n, dkv.at(device));
      EXPECT_EQ(n, causal ? device + 1 : 4) << device;
    }
    EXPECT_EQ(plan->tensors(kAttentionDKV).shape_size(), 5);
    int into_dkv = 0;
    for (const v1::Step& s : plan->steps()) {
      for (const v1::Operand& o : s.outputs()) {
        if (plan->buffers(o.buffer()).tensor() == kAttentionDKV) {
          EXPECT_EQ(s.op(), v1::Step::OP_SEND_RECV) << s.id();
          ++into_dkv;
        }
      }
    }
    EXPECT_EQ(into_dkv, 4);
  }
  // One device: no ring; the gradient lands in the job's tensors.
  AttentionShape one = Shape(1, AttentionLayout::kContiguous, true);
  one.backward = true;
  absl::StatusOr<v1::Plan> plan =
      LowerAttention(one, AttentionAlgorithm::kRing, Devices(1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Count(*plan, v1::Step::OP_SEND_RECV), 0);
}

TEST(AttentionLoweringTest, BackwardUlyssesAndRsa) {
  AttentionShape shape = Shape(2, AttentionLayout::kContiguous, false);
  shape.backward = true;
  absl::StatusOr<v1::Plan> ulysses =
      LowerAttention(shape, AttentionAlgorithm::kUlysses, Devices(2));
  ASSERT_TRUE(ulysses.ok()) << ulysses.status();
  // Q, K, V, O; then dO to heads and dQ, dK, dV back.
  EXPECT_EQ(Count(*ulysses, v1::Step::OP_ALL_TO_ALL), 8);
  EXPECT_EQ(Count(*ulysses, v1::Step::OP_SEND_RECV), 0);
  AttentionShape four = Shape(4, AttentionLayout::kContiguous, false);
  four.backward = true;
  absl::StatusOr<v1::Plan> rsa =
      LowerAttention(four, AttentionAlgorithm::kRsa, Devices(4));
  ASSERT_TRUE(rsa.ok()) << rsa.status();
  // Forward: K pass and V pass; backward: V and the accumulators, home.
  EXPECT_EQ(Count(*rsa, v1::Step::OP_SEND_RECV), 2 * 3 * 4 + 2 * 3 * 4 + 4);
}

TEST(AttentionKindTest, AutoPicksThePredictedFastestAndRingBeatsRsa) {
  const std::vector<DeviceMesh> mesh = {{{1, 4}, {0, 1, 2, 3}}};
  v1::JobSpec spec = Spec(4, "auto", "zigzag", true);
  spec.mutable_attention()->set_kv_heads(4);  // ulysses fits
  spec.mutable_attention()->set_seq_len(4096);
  spec.mutable_attention()->set_head_dim(64);
  absl::StatusOr<PlannedJob> job =
      AttentionKind().Plan(spec, mesh, kTopology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->alternatives.size(), 3u);
  std::map<std::string, double> seconds;
  double fastest = 1e300;
  for (const PlanAlternative& a : job->alternatives) {
    seconds[a.name] = a.predicted_seconds;
    fastest = std::min(fastest, a.predicted_seconds);
    EXPECT_GE(a.predicted_seconds, a.lower_bound_seconds);
  }
  for (const PlanAlternative& a : job->alternatives) {
    EXPECT_EQ(a.chosen, a.predicted_seconds == fastest) << a.name;
  }
  EXPECT_LT(seconds["ring"], seconds["rsa"]);
  // With the backward: the ideal counts 14 FLOPs per pair, and the ring
  // still beats RSA.
  spec.mutable_attention()->set_pass("forward_backward");
  absl::StatusOr<PlannedJob> both =
      AttentionKind().Plan(spec, mesh, kTopology, {});
  ASSERT_TRUE(both.ok()) << both.status();
  std::map<std::string, double> with_backward;
  for (const PlanAlternative& a : both->alternatives) {
    with_backward[a.name] = a.predicted_seconds;
    EXPECT_GE(a.predicted_seconds, a.lower_bound_seconds);
    EXPECT_NEAR(a.lower_bound_seconds,
                3.5 * job->alternatives[0].lower_bound_seconds,
                1e-9 * a.lower_bound_seconds);
  }
  EXPECT_LT(with_backward["ring"], with_backward["rsa"]);
  EXPECT_GT(with_backward["ring"], seconds["ring"]);
}

}  // namespace
}  // namespace meshcast
