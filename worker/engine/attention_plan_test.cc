// The `attention` kind's plans on the CPU engine: every algorithm and
// layout, causal or not, run by several workers over real Gloo and
// verified element by element against the plan's float64 reference; and
// that reference checked against an independent oracle, softmax(Q K^T /
// sqrt(D) + mask) V computed directly in float64 from the same inputs
// (planner/kinds/attention/attention_lowering.h).
#include <cmath>

#include "gtest/gtest.h"
#include "planner/kinds/attention/attention_lowering.h"
#include "worker/kernels/initializer.h"
#include "worker/kernels/reference.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker {
namespace {

using testing::RunTestJob;
using testing::TestJob;
using testing::TestJobOutcome;

struct Case {
  AttentionAlgorithm algorithm;
  AttentionLayout layout;
  bool causal;
  int workers, devices;  // the group: workers x devices
};

AttentionShape ShapeOf(const Case& c) {
  AttentionShape s;
  s.batch = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.ranks = c.workers * c.devices;
  s.seq_len = 4 * s.ranks;
  s.head_dim = 8;
  s.causal = c.causal;
  s.layout = c.layout;
  s.seed = 3;
  return s;
}

// O[b, h, row, c] by the definition, in float64.
class Oracle {
 public:
  Oracle(const AttentionShape& shape, const v1::Plan& plan) : s_(shape) {
    for (int t = 0; t < 3; ++t) {
      spec_[t].shape.assign(plan.tensors(t).shape().begin(),
                            plan.tensors(t).shape().end());
      spec_[t].dtype = DType::kFloat32;
      init_[t] = plan.tensor_inits(t);
    }
  }

  double O(int64_t b, int64_t h, int64_t row, int64_t c) const {
    const int64_t d = s_.head_dim, n = s_.seq_len;
    const int64_t kvh = h / (s_.heads / s_.kv_heads);
    const int64_t pos = s_.LayoutPosition(row);
    std::vector<double> score(n);
    double top = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      score[j] = -INFINITY;
      if (s_.causal && s_.LayoutPosition(j) > pos) continue;
      double dot = 0;
      for (int64_t x = 0; x < d; ++x) {
        dot += V(0, ((b * s_.heads + h) * n + row) * d + x) *
               V(1, ((b * s_.kv_heads + kvh) * n + j) * d + x);
      }
      score[j] = dot / std::sqrt(double(d));
      top = std::max(top, score[j]);
    }
    double sum = 0, out = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (score[j] == -INFINITY) continue;
      const double p = std::exp(score[j] - top);
      sum += p;
      out += p * V(2, ((b * s_.kv_heads + kvh) * n + j) * d + c);
    }
    return sum > 0 ? out / sum : 0;
  }

 private:
  double V(int tensor, int64_t index) const {
    return InitialValue(spec_[tensor], tensor, init_[tensor], index);
  }
  const AttentionShape s_;
  TensorSpec spec_[3];
  v1::Initializer init_[3];
};

class AttentionPlanTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionPlanTest, ReferenceIsAttentionAndTheEngineMatchesIt) {
  const Case& c = GetParam();
  const AttentionShape shape = ShapeOf(c);
  std::vector<int> devices(shape.ranks);
  for (int d = 0; d < shape.ranks; ++d) devices[d] = d;
  absl::StatusOr<v1::Plan> plan = LowerAttention(shape, c.algorithm, devices);
  ASSERT_TRUE(plan.ok()) << plan.status();

  // 1. The reference of O is attention (an independent oracle).
  absl::StatusOr<std::unique_ptr<Reference>> ref = Reference::Create(*plan);
  ASSERT_TRUE(ref.ok()) << ref.status();
  Oracle oracle(shape, *plan);
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      for (int64_t row = 0; row < shape.seq_len; ++row) {
        for (int64_t x = 0; x < shape.head_dim; ++x) {
          absl::StatusOr<double> value =
              (*ref)->Value(kAttentionO, {b, h, row, x});
          ASSERT_TRUE(value.ok()) << value.status();
          ASSERT_NEAR(*value, oracle.O(b, h, row, x), 1e-9)
              << "b " << b << " h " << h << " row " << row << " col " << x;
        }
      }
    }
  }

  // 2. The engine (real Gloo between workers) matches the reference on
  // every element of O.
  absl::StatusOr<TestJob> job =
      testing::TestJobOfPlan(*plan, c.workers, c.devices);
  ASSERT_TRUE(job.ok()) << job.status();
  const TestJobOutcome outcome = RunTestJob(*job, ExecutorOptions{});
  for (const auto& result : outcome.results) {
    ASSERT_TRUE(result.ok()) << result.status();
  }
  EXPECT_TRUE(outcome.all_ok);
  EXPECT_EQ(outcome.mismatches, 0);
  EXPECT_EQ(outcome.elements_verified,
            shape.batch * shape.heads * shape.seq_len * shape.head_dim);
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, AttentionPlanTest,
    ::testing::Values(
        Case{AttentionAlgorithm::kRing, AttentionLayout::kContiguous, false,
             2, 2},
        Case{AttentionAlgorithm::kRing, AttentionLayout::kContiguous, true, 2,
             2},
        Case{AttentionAlgorithm::kRing, AttentionLayout::kZigzag, true, 2, 2},
        Case{AttentionAlgorithm::kRing, AttentionLayout::kStriped, true, 2, 1},
        Case{AttentionAlgorithm::kRsa, AttentionLayout::kContiguous, false, 2,
             2},
        Case{AttentionAlgorithm::kRsa, AttentionLayout::kZigzag, true, 2, 2},
        Case{AttentionAlgorithm::kUlysses, AttentionLayout::kContiguous,
             false, 2, 1},
        Case{AttentionAlgorithm::kUlysses, AttentionLayout::kZigzag, true, 2,
             1},
        Case{AttentionAlgorithm::kRing, AttentionLayout::kZigzag, true, 1, 4},
        Case{AttentionAlgorithm::kRing, AttentionLayout::kContiguous, false,
             1, 1}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(AttentionAlgorithmName(info.param.algorithm), "_",
                          AttentionLayoutName(info.param.layout),
                          info.param.causal ? "_causal" : "", "_",
                          info.param.workers, "x", info.param.devices);
    });

}  // namespace
}  // namespace meshcast::worker
