// The `moe` kind's plans on the CPU engine: every schedule, run by several
// workers over real Gloo, verified element by element against the plan's
// float64 reference; and that reference checked against an independent
// oracle, the MoE layer computed directly from its definition
// (planner/kinds/moe/moe_lowering.h) in float64. Together they show that
// the engine computes the plan and that the plan computes the layer.
#include <cmath>

#include "gtest/gtest.h"
#include "planner/kinds/moe/moe_lowering.h"
#include "worker/kernels/initializer.h"
#include "worker/kernels/reference.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker {
namespace {

using testing::RunTestJob;
using testing::TestJob;
using testing::TestJobOutcome;

MoeShape Shape(int ep, int mp, double capacity, int top_k, double skew) {
  MoeShape s;
  s.tokens = 24;
  s.hidden = 8;
  s.ffn = 12;
  s.experts = 4;
  s.top_k = top_k;
  s.capacity_factor = capacity;
  s.mp = mp;
  s.ep = ep;
  s.seed = 5;
  s.expert_skew = skew;
  return s;
}

// Copies a lowered plan into a TestJob (same tensor, buffer and step ids).
TestJob JobOf(const v1::Plan& plan, int workers, int devices_per_worker) {
  TestJob job(workers, devices_per_worker);
  for (int t = 0; t < plan.tensors_size(); ++t) {
    TensorSpec spec;
    spec.shape.assign(plan.tensors(t).shape().begin(),
                      plan.tensors(t).shape().end());
    spec.dtype = DType::kFloat32;
    EXPECT_EQ(job.AddTensor(spec), t);
    job.SetInitializer(t, plan.tensor_inits(t));
  }
  for (const v1::Buffer& b : plan.buffers()) {
    Box box;
    for (const v1::Interval& i : b.box()) box.push_back({i.begin(), i.end()});
    const BufferRole role =
        b.role() == v1::Buffer::ROLE_SOURCE        ? BufferRole::kSource
        : b.role() == v1::Buffer::ROLE_DESTINATION ? BufferRole::kDestination
                                                   : BufferRole::kScratch;
    EXPECT_EQ(job.AddBuffer(b.device(), b.tensor(), box, role), b.id());
  }
  for (const v1::Step& step : plan.steps()) {
    std::vector<int> group;
    if (step.op() != v1::Step::OP_COMPUTE) {
      const v1::CommGroup& g = plan.groups(step.group());
      group.assign(g.devices().begin(), g.devices().end());
    }
    v1::Step copy = step;
    copy.clear_group();
    EXPECT_EQ(job.AddStep(copy, group), step.id());
  }
  return job;
}

// Y[t, c] by the definition, in float64.
class Oracle {
 public:
  Oracle(const MoeShape& shape, const v1::Plan& plan)
      : s_(shape), routing_(RouteTokens(shape)) {
    for (int t = 0; t < 4; ++t) {
      spec_[t].shape.assign(plan.tensors(t).shape().begin(),
                            plan.tensors(t).shape().end());
      spec_[t].dtype = DType::kFloat32;
      init_[t] = plan.tensor_inits(t);
    }
  }

  double Y(int64_t t, int64_t c) const {
    const int64_t m = s_.hidden, h = s_.ffn, e_count = s_.experts;
    double y = 0;
    for (int i = 0; i < s_.top_k; ++i) {
      if (routing_.slot[t * s_.top_k + i] < 0) continue;  // dropped
      const int64_t e = routing_.expert[t * s_.top_k + i];
      double logit = 0;
      for (int64_t p = 0; p < m; ++p) {
        logit += V(0, t * m + p) * V(1, p * e_count + e);
      }
      logit /= std::sqrt(double(m));
      const double w = 1 / (1 + std::exp(-logit));
      double out = 0;
      for (int64_t q = 0; q < h; ++q) {
        double hidden = 0;
        for (int64_t p = 0; p < m; ++p) {
          hidden += V(0, t * m + p) * V(2, (e * m + p) * h + q);
        }
        hidden = std::max(0.0, hidden / std::sqrt(double(m)));
        out += hidden * V(3, (e * h + q) * m + c);
      }
      y += w * out / std::sqrt(double(h));
    }
    return y;
  }

 private:
  // Tensors 0..3 of the plan: X, Wg, W1, W2.
  double V(int tensor, int64_t index) const {
    return InitialValue(spec_[tensor], tensor, init_[tensor], index);
  }
  const MoeShape s_;
  const MoeRouting routing_;
  TensorSpec spec_[4];
  v1::Initializer init_[4];
};

struct Case {
  MoeSchedule schedule;
  int chunks;
  int ep, mp;
  double capacity;  // 0.75 drops choices, 4 keeps them all
  int top_k = 2;
  double skew = 0;  // > 0: uneven expert loads
};

class MoePlanTest : public ::testing::TestWithParam<Case> {};

TEST_P(MoePlanTest, ReferenceIsTheLayerAndTheEngineMatchesIt) {
  const Case& c = GetParam();
  const MoeShape shape = Shape(c.ep, c.mp, c.capacity, c.top_k, c.skew);
  const MoeRouting routing = RouteTokens(shape);
  std::vector<int> devices(c.ep * c.mp);
  for (int d = 0; d < c.ep * c.mp; ++d) devices[d] = d;
  absl::StatusOr<v1::Plan> plan =
      LowerMoe(shape, routing, c.schedule, c.chunks, devices);
  ASSERT_TRUE(plan.ok()) << plan.status();
  if (c.capacity < 1) {
    EXPECT_GT(routing.dropped, 0);
  }

  // 1. The reference of Y is the layer (an independent oracle).
  absl::StatusOr<std::unique_ptr<Reference>> ref = Reference::Create(*plan);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const int y = 7;  // X, Wg, W1, W2, logits, chosen, weights, Y
  ASSERT_EQ(plan->tensors(y).shape(0), shape.total_tokens());
  Oracle oracle(shape, *plan);
  for (int64_t t = 0; t < shape.total_tokens(); ++t) {
    for (int64_t col = 0; col < shape.hidden; ++col) {
      absl::StatusOr<double> value = (*ref)->Value(y, {t, col});
      ASSERT_TRUE(value.ok()) << value.status();
      ASSERT_NEAR(*value, oracle.Y(t, col), 1e-9)
          << "token " << t << " column " << col;
    }
  }

  // 2. The engine (one worker per EP rank, real Gloo) matches the
  // reference on every destination element.
  TestJob job = JobOf(*plan, c.ep, c.mp);
  const TestJobOutcome outcome = RunTestJob(job, ExecutorOptions{});
  for (const auto& result : outcome.results) {
    ASSERT_TRUE(result.ok()) << result.status();
  }
  EXPECT_TRUE(outcome.all_ok);
  EXPECT_EQ(outcome.mismatches, 0);
  // Every device holds all Y rows of its MP group.
  EXPECT_EQ(outcome.elements_verified,
            shape.total_tokens() * shape.hidden * shape.mp);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, MoePlanTest,
    ::testing::Values(Case{MoeSchedule::kBaseline, 1, 2, 2, 4.0},
                      Case{MoeSchedule::kBaseline, 1, 2, 2, 0.75},
                      Case{MoeSchedule::kS1, 1, 2, 2, 4.0},
                      Case{MoeSchedule::kS1, 1, 2, 2, 0.75},
                      Case{MoeSchedule::kS2, 2, 2, 2, 0.75},
                      Case{MoeSchedule::kS2, 3, 2, 2, 4.0},
                      Case{MoeSchedule::kS1, 1, 1, 2, 0.75},
                      Case{MoeSchedule::kS2, 2, 2, 1, 0.75},
                      Case{MoeSchedule::kBaseline, 1, 2, 4, 1.2, 1},
                      Case{MoeSchedule::kS1, 1, 2, 4, 1.2, 1},
                      Case{MoeSchedule::kBaseline, 1, 2, 2, 1.0, 2, 1.5},
                      Case{MoeSchedule::kS1, 1, 2, 2, 1.0, 2, 1.5},
                      Case{MoeSchedule::kS2, 2, 2, 2, 1.0, 2, 1.5}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(
          MoeScheduleName(info.param.schedule), "_c", info.param.chunks, "_ep",
          info.param.ep, "_mp", info.param.mp, "_f",
          static_cast<int>(info.param.capacity * 100), "_k", info.param.top_k,
          info.param.skew > 0 ? "_skewed" : "");
    });

}  // namespace
}  // namespace meshcast::worker
