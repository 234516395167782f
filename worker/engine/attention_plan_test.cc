// The `attention` kind's plans on the CPU engine: every algorithm and
// layout, causal or not, run by several workers over real Gloo and
// verified element by element against the plan's float64 reference; and
// that reference checked against an independent oracle, softmax(Q K^T /
// sqrt(D) + mask) V computed directly in float64 from the same inputs
// (planner/kinds/attention/attention_lowering.h); with the backward, the
// same for dQ, dK and dV against their definition.
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
  bool backward = false;
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
  s.backward = c.backward;
  return s;
}

// O[b, h, row, c] by the definition, in float64.
class Oracle {
 public:
  Oracle(const AttentionShape& shape, const v1::Plan& plan) : s_(shape) {
    for (int t : {kAttentionQ, kAttentionK, kAttentionV, kAttentionDO}) {
      if (t >= plan.tensors_size()) continue;
      spec_[t].shape.assign(plan.tensors(t).shape().begin(),
                            plan.tensors(t).shape().end());
      spec_[t].dtype = DType::kFloat32;
      init_[t] = plan.tensor_inits(t);
    }
  }

  // The gradients against dO (tensor 4) by their definition, in float64,
  // indexed as the tensors: dq [B, H, S, D], dk and dv [B, Hkv, S, D].
  struct Grads {
    std::vector<double> dq, dk, dv;
  };
  Grads Gradients() const {
    const int64_t d = s_.head_dim, n = s_.seq_len;
    const int64_t group = s_.heads / s_.kv_heads;
    Grads g;
    g.dq.assign(s_.batch * s_.heads * n * d, 0.0);
    g.dk.assign(s_.batch * s_.kv_heads * n * d, 0.0);
    g.dv = g.dk;
    for (int64_t b = 0; b < s_.batch; ++b) {
      for (int64_t h = 0; h < s_.heads; ++h) {
        const int64_t kv0 = (b * s_.kv_heads + h / group) * n * d;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t qi = ((b * s_.heads + h) * n + i) * d;
          const std::vector<double> p = Weights(b, h, i);
          std::vector<double> o(d, 0.0);
          for (int64_t j = 0; j < n; ++j) {
            for (int64_t x = 0; x < d; ++x) o[x] += p[j] * V(2, kv0 + j * d + x);
          }
          double delta = 0;
          for (int64_t x = 0; x < d; ++x) delta += V(4, qi + x) * o[x];
          for (int64_t j = 0; j < n; ++j) {
            if (p[j] == 0) continue;
            double dp = 0;
            for (int64_t x = 0; x < d; ++x) {
              dp += V(4, qi + x) * V(2, kv0 + j * d + x);
            }
            const double ds = p[j] * (dp - delta) / std::sqrt(double(d));
            for (int64_t x = 0; x < d; ++x) {
              g.dq[qi + x] += ds * V(1, kv0 + j * d + x);
              g.dk[kv0 + j * d + x] += ds * V(0, qi + x);
              g.dv[kv0 + j * d + x] += p[j] * V(4, qi + x);
            }
          }
        }
      }
    }
    return g;
  }

  // The softmax weights of every key row for query row `row` (layout
  // rows): 0 where the mask hides the key, all 0 if it hides every key.
  std::vector<double> Weights(int64_t b, int64_t h, int64_t row) const {
    const int64_t d = s_.head_dim, n = s_.seq_len;
    const int64_t kvh = h / (s_.heads / s_.kv_heads);
    const int64_t pos = s_.LayoutPosition(row);
    std::vector<double> score(n, -INFINITY);
    double top = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      if (s_.causal && s_.LayoutPosition(j) > pos) continue;
      double dot = 0;
      for (int64_t x = 0; x < d; ++x) {
        dot += V(0, ((b * s_.heads + h) * n + row) * d + x) *
               V(1, ((b * s_.kv_heads + kvh) * n + j) * d + x);
      }
      score[j] = dot / std::sqrt(double(d));
      top = std::max(top, score[j]);
    }
    double sum = 0;
    for (double& x : score) sum += (x = x == -INFINITY ? 0 : std::exp(x - top));
    if (sum > 0) {
      for (double& x : score) x /= sum;
    }
    return score;
  }

  double O(int64_t b, int64_t h, int64_t row, int64_t c) const {
    const int64_t d = s_.head_dim, n = s_.seq_len;
    const int64_t kvh = h / (s_.heads / s_.kv_heads);
    const std::vector<double> w = Weights(b, h, row);
    double out = 0;
    for (int64_t j = 0; j < n; ++j) {
      out += w[j] * V(2, ((b * s_.kv_heads + kvh) * n + j) * d + c);
    }
    return out;
  }

 private:
  double V(int tensor, int64_t index) const {
    return InitialValue(spec_[tensor], tensor, init_[tensor], index);
  }
  const AttentionShape s_;
  TensorSpec spec_[5];
  v1::Initializer init_[5];
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

  // 1b. With the backward, the reference of dQ, dK and dV is their
  // definition.
  int64_t outputs = shape.batch * shape.heads * shape.seq_len * shape.head_dim;
  if (shape.backward) {
    const Oracle::Grads g = oracle.Gradients();
    const int64_t n = shape.seq_len, d = shape.head_dim;
    double largest = 0;
    for (int64_t b = 0; b < shape.batch; ++b) {
      for (int64_t h = 0; h < shape.heads; ++h) {
        for (int64_t row = 0; row < n; ++row) {
          for (int64_t x = 0; x < d; ++x) {
            const double want = g.dq[((b * shape.heads + h) * n + row) * d + x];
            absl::StatusOr<double> value =
                (*ref)->Value(kAttentionDQ, {b, h, row, x});
            ASSERT_TRUE(value.ok()) << value.status();
            ASSERT_NEAR(*value, want, 1e-9) << "dQ b " << b << " h " << h
                                            << " row " << row << " col " << x;
            largest = std::max(largest, std::abs(want));
          }
        }
      }
      for (int64_t kvh = 0; kvh < shape.kv_heads; ++kvh) {
        for (int64_t row = 0; row < n; ++row) {
          for (int64_t x = 0; x < d; ++x) {
            const int64_t at = ((b * shape.kv_heads + kvh) * n + row) * d + x;
            for (int64_t which : {0, 1}) {
              absl::StatusOr<double> value =
                  (*ref)->Value(kAttentionDKV, {which, b, kvh, row, x});
              ASSERT_TRUE(value.ok()) << value.status();
              ASSERT_NEAR(*value, which == 0 ? g.dk[at] : g.dv[at], 1e-9)
                  << (which == 0 ? "dK" : "dV") << " b " << b << " kv head "
                  << kvh << " row " << row << " col " << x;
            }
          }
        }
      }
    }
    EXPECT_GT(largest, 1e-3);  // gradients that are not all ~0
    outputs *= 2;  // O and dQ
    outputs += 2 * shape.batch * shape.kv_heads * n * d;  // dK and dV
  }

  // 2. The engine (real Gloo between workers) matches the reference on
  // every element of O (and of dQ, dK, dV).
  absl::StatusOr<TestJob> job =
      testing::TestJobOfPlan(*plan, c.workers, c.devices);
  ASSERT_TRUE(job.ok()) << job.status();
  const TestJobOutcome outcome = RunTestJob(*job, ExecutorOptions{});
  for (const auto& result : outcome.results) {
    ASSERT_TRUE(result.ok()) << result.status();
  }
  EXPECT_TRUE(outcome.all_ok);
  EXPECT_EQ(outcome.mismatches, 0);
  EXPECT_EQ(outcome.elements_verified, outputs);
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
             1, 1},
        // The backward.
        Case{AttentionAlgorithm::kRing, AttentionLayout::kContiguous, true, 2,
             2, true},
        Case{AttentionAlgorithm::kRing, AttentionLayout::kZigzag, true, 2, 2,
             true},
        Case{AttentionAlgorithm::kRing, AttentionLayout::kStriped, false, 1,
             3, true},
        Case{AttentionAlgorithm::kRsa, AttentionLayout::kZigzag, true, 2, 2,
             true},
        Case{AttentionAlgorithm::kUlysses, AttentionLayout::kZigzag, true, 2,
             1, true},
        Case{AttentionAlgorithm::kRing, AttentionLayout::kContiguous, true, 1,
             1, true}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(AttentionAlgorithmName(info.param.algorithm), "_",
                          AttentionLayoutName(info.param.layout),
                          info.param.causal ? "_causal" : "", "_",
                          info.param.workers, "x", info.param.devices,
                          info.param.backward ? "_backward" : "");
    });

}  // namespace
}  // namespace meshcast::worker
