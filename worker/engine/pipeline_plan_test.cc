// The `pipeline` kind's plans on the CPU engine: every schedule, with and
// without overlap, over stage layouts that need no gather, an all-gather of
// columns and of rows, and a stage spanning two workers; run by several
// workers over real Gloo and verified element by element against the
// plan's float64 reference. That reference is itself checked against an
// independent oracle: the same model (MLP blocks, forward and backward over
// every micro-batch) computed on one device in float64, directly from the
// initializers (planner/kinds/pipeline/pipeline_lowering.h).
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "planner/kinds/pipeline/pipeline_lowering.h"
#include "worker/kernels/initializer.h"
#include "worker/kernels/reference.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker {
namespace {

using testing::RunTestJob;
using testing::TestJob;
using testing::TestJobOutcome;
using Matrix = std::vector<double>;  // row-major

struct StageCase {
  std::vector<int> mesh;  // shape
  const char* input_spec;
  const char* output_spec;
};

struct Case {
  const char* name;
  PipelineSchedule schedule;
  bool overlap;
  int workers, devices;  // devices per worker
  std::vector<StageCase> stages;
  int microbatches = 3;
  int layers = 2;
};

// C [m, n] = alpha * op(A) op(B).
Matrix MatMul(const Matrix& a, const Matrix& b, int64_t m, int64_t n,
              int64_t k, bool ta, bool tb, double alpha) {
  Matrix c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        sum += (ta ? a[p * m + i] : a[i * k + p]) *
               (tb ? b[j * k + p] : b[p * n + j]);
      }
      c[i * n + j] = alpha * sum;
    }
  }
  return c;
}

class Oracle {
 public:
  Oracle(const PipelineShape& s, int stages, const LoweredPipeline& lowered)
      : s_(s) {
    const v1::Plan& plan = lowered.plan;
    const PipelineTensors& t = lowered.tensors;
    const int64_t b = s.microbatch_size, h = s.hidden, f = s.ffn;
    const double a1 = 1 / std::sqrt(double(h)), a2 = 1 / std::sqrt(double(f));
    std::vector<std::vector<Matrix>> w1(stages), w2(stages);
    dw1_.assign(stages, std::vector<Matrix>(s.layers, Matrix(h * f, 0.0)));
    dw2_ = dw1_;
    for (int st = 0; st < stages; ++st) {
      for (int l = 0; l < s.layers; ++l) {
        w1[st].push_back(Init(plan, t.w1[st][l], h * f));
        w2[st].push_back(Init(plan, t.w2[st][l], f * h));
      }
    }
    for (int m = 0; m < s.microbatches; ++m) {
      Matrix x = Init(plan, t.input[m], b * h);
      // Forward, keeping each block's input and pre-activation.
      std::vector<std::vector<Matrix>> xs(stages), zs(stages);
      for (int st = 0; st < stages; ++st) {
        for (int l = 0; l < s.layers; ++l) {
          Matrix z = MatMul(x, w1[st][l], b, f, h, false, false, a1);
          Matrix act = z;
          for (double& v : act) v = std::max(v, 0.0);
          xs[st].push_back(x);
          zs[st].push_back(z);
          x = MatMul(act, w2[st][l], b, h, f, false, false, a2);
        }
      }
      y_.push_back(x);
      Matrix dy = Init(plan, t.output_grad[m], b * h);
      for (int st = stages - 1; st >= 0; --st) {
        for (int l = s.layers - 1; l >= 0; --l) {
          const Matrix& z = zs[st][l];
          Matrix act = z;
          for (double& v : act) v = std::max(v, 0.0);
          Matrix dz = MatMul(dy, w2[st][l], b, f, h, false, true, a2);
          for (int64_t e = 0; e < b * f; ++e) {
            if (z[e] <= 0) dz[e] = 0;
          }
          Add(dw2_[st][l], MatMul(act, dy, f, h, b, true, false, a2));
          Add(dw1_[st][l], MatMul(xs[st][l], dz, h, f, b, true, false, a1));
          dy = MatMul(dz, w1[st][l], b, h, f, false, true, a1);
        }
      }
    }
  }
  const Matrix& y(int m) const { return y_[m]; }
  const Matrix& dw1(int st, int l) const { return dw1_[st][l]; }
  const Matrix& dw2(int st, int l) const { return dw2_[st][l]; }

 private:
  static Matrix Init(const v1::Plan& plan, int tensor, int64_t n) {
    TensorSpec spec;
    spec.shape.assign(plan.tensors(tensor).shape().begin(),
                      plan.tensors(tensor).shape().end());
    spec.dtype = DType::kFloat32;
    Matrix out(n);
    for (int64_t i = 0; i < n; ++i) {
      out[i] = InitialValue(spec, tensor, plan.tensor_inits(tensor), i);
    }
    return out;
  }
  static void Add(Matrix& into, const Matrix& more) {
    for (size_t i = 0; i < into.size(); ++i) into[i] += more[i];
  }
  const PipelineShape s_;
  std::vector<Matrix> y_;
  std::vector<std::vector<Matrix>> dw1_, dw2_;
};

// Every element of `tensor` ([rows, cols]) in the reference, against
// `expected`.
void ExpectReference(const Reference& ref, int tensor, const Matrix& expected,
                     int64_t rows, int64_t cols, const std::string& what) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      absl::StatusOr<double> value = ref.Value(tensor, {i, j});
      ASSERT_TRUE(value.ok()) << value.status();
      const double want = expected[i * cols + j];
      ASSERT_NEAR(*value, want, 1e-9 * (1 + std::abs(want)))
          << what << " [" << i << ", " << j << "]";
    }
  }
}

class PipelinePlanTest : public ::testing::TestWithParam<Case> {};

TEST_P(PipelinePlanTest, ReferenceIsTheModelAndTheEngineMatchesIt) {
  const Case& c = GetParam();
  PipelineShape shape;
  shape.microbatches = c.microbatches;
  shape.microbatch_size = 4;
  shape.hidden = 6;
  shape.ffn = 8;
  shape.layers = c.layers;
  shape.seed = 5;
  shape.overlap = c.overlap;
  Topology topology;
  topology.num_hosts = c.workers;
  topology.devices_per_host = c.devices;
  std::vector<PipelineStageLayout> stages;
  int next = 0;
  for (const StageCase& sc : c.stages) {
    PipelineStageLayout stage;
    stage.mesh.shape = sc.mesh;
    int n = 1;
    for (int e : sc.mesh) n *= e;
    for (int d = 0; d < n; ++d) stage.mesh.devices.push_back(next++);
    stage.input_spec = *ShardingSpec::Parse(sc.input_spec);
    stage.output_spec = *ShardingSpec::Parse(sc.output_spec);
    stages.push_back(stage);
  }
  ASSERT_LE(next, c.workers * c.devices);
  absl::StatusOr<std::vector<PipelineHop>> hops =
      PlanPipelineHops(shape, stages, topology, Strategy::kAuto);
  ASSERT_TRUE(hops.ok()) << hops.status();
  absl::StatusOr<LoweredPipeline> lowered =
      LowerPipeline(shape, stages, *hops, c.schedule);
  ASSERT_TRUE(lowered.ok()) << lowered.status();

  // 1. The reference of the output and of every weight gradient is the
  // model computed directly (an independent oracle).
  absl::StatusOr<std::unique_ptr<Reference>> ref =
      Reference::Create(lowered->plan);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const int count = static_cast<int>(stages.size());
  Oracle oracle(shape, count, *lowered);
  const PipelineTensors& t = lowered->tensors;
  ASSERT_EQ(static_cast<int>(t.output.size()), shape.microbatches);
  for (int m = 0; m < shape.microbatches; ++m) {
    ExpectReference(**ref, t.output[m], oracle.y(m), shape.microbatch_size,
                    shape.hidden, "Y" + std::to_string(m));
  }
  for (int s = 0; s < count; ++s) {
    for (int l = 0; l < shape.layers; ++l) {
      const std::string at = std::to_string(s) + "." + std::to_string(l);
      ExpectReference(**ref, t.dw1[s][l], oracle.dw1(s, l), shape.hidden,
                      shape.ffn, "dW1 " + at);
      ExpectReference(**ref, t.dw2[s][l], oracle.dw2(s, l), shape.ffn,
                      shape.hidden, "dW2 " + at);
    }
  }

  // 2. The engine (real Gloo between workers) matches the reference on
  // every destination element.
  absl::StatusOr<TestJob> job =
      testing::TestJobOfPlan(lowered->plan, c.workers, c.devices);
  ASSERT_TRUE(job.ok()) << job.status();
  const TestJobOutcome outcome = RunTestJob(*job, ExecutorOptions{});
  for (const auto& result : outcome.results) {
    ASSERT_TRUE(result.ok()) << result.status();
  }
  EXPECT_TRUE(outcome.all_ok);
  EXPECT_EQ(outcome.mismatches, 0);
  // At least the outputs and both weight gradients of every block.
  int64_t least = shape.microbatches * shape.microbatch_size * shape.hidden +
                  count * shape.layers * 2 * shape.hidden * shape.ffn;
  EXPECT_GE(outcome.elements_verified, least);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelinePlanTest,
    ::testing::Values(
        // Two 1x2 stages on two workers: whole layouts, no gather.
        Case{"1f1b_whole", PipelineSchedule::k1F1B, true, 2, 2,
             {{{1, 2}, "S0,R", "R,R"}, {{1, 2}, "R,R", "R,R"}}},
        // The issue's layouts: the stage sends column shards and the next
        // one all-gathers them.
        Case{"eager_columns", PipelineSchedule::kEager1F1B, true, 2, 2,
             {{{1, 2}, "S0,R", "R,S1"}, {{1, 2}, "R,S1", "R,S1"}}},
        // Rows split over a stage's devices, gathered on arrival.
        Case{"gpipe_rows_no_overlap", PipelineSchedule::kGpipe, false, 2, 2,
             {{{1, 2}, "R,R", "S1,R"}, {{2, 1}, "S0,R", "R,R"}}},
        // Three stages; the middle one spans both workers.
        Case{"eager_three_stages", PipelineSchedule::kEager1F1B, true, 2, 2,
             {{{1, 1}, "R,R", "R,R"},
              {{1, 2}, "R,S1", "S0,R"},
              {{1, 1}, "R,R", "R,R"}},
             4, 1},
        Case{"1f1b_no_overlap_one_layer", PipelineSchedule::k1F1B, false, 2,
             2, {{{1, 2}, "R,R", "R,S1"}, {{1, 2}, "S0,R", "R,R"}}, 4, 1}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace meshcast::worker
