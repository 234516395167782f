// The `moe` kind's plans on the CPU engine: every schedule, run by several
// workers over real Gloo, verified element by element against the plan's
// float64 reference; and that reference checked against an independent
// oracle, the MoE layer computed directly from its definition
// (planner/kinds/moe/moe_lowering.h) in float64. Together they show that
// the engine computes the plan and that the plan computes the layer.
#include <cmath>
#include <map>

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

MoeShape Shape(int ep, int mp, double capacity, int top_k, double skew,
               bool backward) {
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
  s.backward = backward;
  return s;
}

// Tensor ids of the lowering (moe_lowering.h).
enum MoeTensor {
  kX = 0,
  kWg = 1,
  kW1 = 2,
  kW2 = 3,
  kY = 7,
  kDY = 8,
  kDX = 9,
  kDWg = 10,
  kDW1 = 11,
  kDW2 = 12,
};

// Y[t, c] and the backward's gradients by the definition, in float64.
class Oracle {
 public:
  Oracle(const MoeShape& shape, const v1::Plan& plan)
      : s_(shape), routing_(RouteTokens(shape)) {
    for (int t : {kX, kWg, kW1, kW2, kDY}) {
      if (t >= plan.tensors_size()) continue;
      spec_[t].shape.assign(plan.tensors(t).shape().begin(),
                            plan.tensors(t).shape().end());
      spec_[t].dtype = DType::kFloat32;
      init_[t] = plan.tensor_inits(t);
    }
    if (shape.backward) Backward();
  }

  // The gradient tensors (kDX .. kDW2), flat row-major.
  const std::vector<double>& Gradient(int tensor) const {
    return grads_.at(tensor);
  }

  double Y(int64_t t, int64_t c) const {
    const int64_t m = s_.hidden, h = s_.ffn, e_count = s_.experts;
    double y = 0;
    for (int i = 0; i < s_.top_k; ++i) {
      if (routing_.slot[t * s_.top_k + i] < 0) continue;  // dropped
      const int64_t e = routing_.expert[t * s_.top_k + i];
      double logit = 0;
      for (int64_t p = 0; p < m; ++p) {
        logit += V(kX, t * m + p) * V(kWg, p * e_count + e);
      }
      logit /= std::sqrt(double(m));
      const double w = 1 / (1 + std::exp(-logit));
      double out = 0;
      for (int64_t q = 0; q < h; ++q) {
        double hidden = 0;
        for (int64_t p = 0; p < m; ++p) {
          hidden += V(kX, t * m + p) * V(kW1, (e * m + p) * h + q);
        }
        hidden = std::max(0.0, hidden / std::sqrt(double(m)));
        out += hidden * V(kW2, (e * h + q) * m + c);
      }
      y += w * out / std::sqrt(double(h));
    }
    return y;
  }

 private:
  // The chain rule, choice by choice (moe_lowering.h's backward).
  void Backward() {
    const int64_t m = s_.hidden, h = s_.ffn, e_count = s_.experts;
    const double rm = 1 / std::sqrt(double(m)), rh = 1 / std::sqrt(double(h));
    std::vector<double>& dx = grads_[kDX];
    std::vector<double>& dwg = grads_[kDWg];
    std::vector<double>& dw1 = grads_[kDW1];
    std::vector<double>& dw2 = grads_[kDW2];
    dx.assign(s_.total_tokens() * m, 0);
    dwg.assign(m * e_count, 0);
    dw1.assign(e_count * m * h, 0);
    dw2.assign(e_count * h * m, 0);
    std::vector<double> z(h), a(h), o(m), dz(h);
    for (int64_t t = 0; t < s_.total_tokens(); ++t) {
      for (int i = 0; i < s_.top_k; ++i) {
        if (routing_.slot[t * s_.top_k + i] < 0) continue;
        const int64_t e = routing_.expert[t * s_.top_k + i];
        double logit = 0;
        for (int64_t p = 0; p < m; ++p) {
          logit += V(kX, t * m + p) * V(kWg, p * e_count + e);
        }
        const double w = 1 / (1 + std::exp(-logit * rm));
        for (int64_t q = 0; q < h; ++q) {
          z[q] = 0;
          for (int64_t p = 0; p < m; ++p) {
            z[q] += V(kX, t * m + p) * V(kW1, (e * m + p) * h + q);
          }
          z[q] *= rm;
          a[q] = std::max(0.0, z[q]);
        }
        double dw = 0;
        for (int64_t c = 0; c < m; ++c) {
          o[c] = 0;
          for (int64_t q = 0; q < h; ++q) {
            o[c] += a[q] * V(kW2, (e * h + q) * m + c);
          }
          o[c] *= rh;
          dw += V(kDY, t * m + c) * o[c];
        }
        const double dl = dw * w * (1 - w);
        for (int64_t p = 0; p < m; ++p) {
          dx[t * m + p] += dl * V(kWg, p * e_count + e) * rm;
          dwg[p * e_count + e] += V(kX, t * m + p) * dl * rm;
        }
        for (int64_t q = 0; q < h; ++q) {
          double dh = 0;
          for (int64_t c = 0; c < m; ++c) {
            const double dout = w * V(kDY, t * m + c);
            dh += dout * V(kW2, (e * h + q) * m + c) * rh;
            dw2[(e * h + q) * m + c] += a[q] * dout * rh;
          }
          dz[q] = z[q] > 0 ? dh : 0;
        }
        for (int64_t p = 0; p < m; ++p) {
          for (int64_t q = 0; q < h; ++q) {
            dw1[(e * m + p) * h + q] += V(kX, t * m + p) * dz[q] * rm;
            dx[t * m + p] += dz[q] * V(kW1, (e * m + p) * h + q) * rm;
          }
        }
      }
    }
  }

  // Tensors X, Wg, W1, W2 and dY of the plan.
  double V(int tensor, int64_t index) const {
    return InitialValue(spec_[tensor], tensor, init_[tensor], index);
  }
  const MoeShape s_;
  const MoeRouting routing_;
  TensorSpec spec_[kDY + 1];
  v1::Initializer init_[kDY + 1];
  std::map<int, std::vector<double>> grads_;  // stable references
};

struct Case {
  MoeSchedule schedule;
  int chunks;
  int ep, mp;
  double capacity;  // 0.75 drops choices, 4 keeps them all
  int top_k = 2;
  double skew = 0;  // > 0: uneven expert loads
  bool backward = false;
};

class MoePlanTest : public ::testing::TestWithParam<Case> {};

TEST_P(MoePlanTest, ReferenceIsTheLayerAndTheEngineMatchesIt) {
  const Case& c = GetParam();
  const MoeShape shape =
      Shape(c.ep, c.mp, c.capacity, c.top_k, c.skew, c.backward);
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
  const int y = kY;
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
  // With the backward, every element of every gradient.
  int64_t gradient_elements = 0;
  if (c.backward) {
    for (int tensor : {kDX, kDWg, kDW1, kDW2}) {
      const std::vector<double>& want = oracle.Gradient(tensor);
      std::vector<int64_t> shape_of(plan->tensors(tensor).shape().begin(),
                                    plan->tensors(tensor).shape().end());
      int64_t count = 1;
      for (int64_t extent : shape_of) count *= extent;
      ASSERT_EQ(count, static_cast<int64_t>(want.size()));
      std::vector<int64_t> coord(shape_of.size(), 0);
      for (size_t e = 0; e < want.size(); ++e) {
        int64_t rest = static_cast<int64_t>(e);
        for (int dim = static_cast<int>(shape_of.size()) - 1; dim >= 0; --dim) {
          coord[dim] = rest % shape_of[dim];
          rest /= shape_of[dim];
        }
        absl::StatusOr<double> value = (*ref)->Value(tensor, coord);
        ASSERT_TRUE(value.ok()) << value.status();
        ASSERT_NEAR(*value, want[e], 1e-9)
            << "tensor " << tensor << " element " << e;
      }
    }
    // Every device holds dX of its group and all of dWg; dW1 and dW2 are
    // split over the devices without overlap.
    gradient_elements =
        shape.total_tokens() * shape.hidden * shape.mp +
        shape.hidden * shape.experts * shape.mp * shape.ep +
        2 * int64_t{shape.experts} * shape.hidden * shape.ffn;
  }

  // 2. The engine (one worker per EP rank, real Gloo) matches the
  // reference on every destination element.
  absl::StatusOr<TestJob> job = testing::TestJobOfPlan(*plan, c.ep, c.mp);
  ASSERT_TRUE(job.ok()) << job.status();
  const TestJobOutcome outcome = RunTestJob(*job, ExecutorOptions{});
  for (const auto& result : outcome.results) {
    ASSERT_TRUE(result.ok()) << result.status();
  }
  EXPECT_TRUE(outcome.all_ok);
  EXPECT_EQ(outcome.mismatches, 0);
  // Every device holds all Y rows of its MP group.
  EXPECT_EQ(outcome.elements_verified,
            shape.total_tokens() * shape.hidden * shape.mp + gradient_elements);
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
                      Case{MoeSchedule::kS2, 2, 2, 2, 1.0, 2, 1.5},
                      Case{MoeSchedule::kBaseline, 1, 2, 2, 0.75, 2, 0, true},
                      Case{MoeSchedule::kS1, 1, 2, 2, 0.75, 2, 0, true},
                      Case{MoeSchedule::kS2, 2, 2, 2, 0.75, 2, 0, true},
                      Case{MoeSchedule::kS2, 3, 2, 2, 4.0, 2, 0, true},
                      Case{MoeSchedule::kS1, 1, 1, 2, 1.0, 2, 0, true},
                      Case{MoeSchedule::kS2, 2, 2, 1, 1.0, 2, 0, true},
                      Case{MoeSchedule::kBaseline, 1, 2, 4, 1.2, 1, 1, true},
                      Case{MoeSchedule::kS1, 1, 2, 4, 1.2, 1, 1, true},
                      Case{MoeSchedule::kS2, 2, 2, 2, 1.0, 2, 1.5, true}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(
          MoeScheduleName(info.param.schedule), "_c", info.param.chunks, "_ep",
          info.param.ep, "_mp", info.param.mp, "_f",
          static_cast<int>(info.param.capacity * 100), "_k", info.param.top_k,
          info.param.skew > 0 ? "_skewed" : "",
          info.param.backward ? "_backward" : "");
    });

}  // namespace
}  // namespace meshcast::worker
