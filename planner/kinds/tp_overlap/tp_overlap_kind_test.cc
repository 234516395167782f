#include "planner/kinds/tp_overlap/tp_overlap_kind.h"

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "planner/kinds/tp_overlap/tp_overlap_cost.h"
#include "planner/kinds/tp_overlap/tp_overlap_lowering.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::JobSpec Spec(int64_t m, int64_t n, int64_t k, const std::string& mode = "",
                 int chunks = 0) {
  v1::JobSpec spec;
  v1::TpOverlapSpec* t = spec.mutable_tp_overlap();
  t->set_m(m);
  t->set_n(n);
  t->set_k(k);
  t->mutable_mesh()->add_shape(1);
  t->mutable_mesh()->add_shape(4);
  t->set_mode(mode);
  t->set_chunks(chunks);
  return spec;
}

const std::vector<DeviceMesh> kMesh = {{{1, 4}, {0, 1, 2, 3}}};
const Topology kTopology = Topology::FromGbps(1, 4, 10, 100);

TEST(TpOverlapKindTest, SequentialIsMeasuredThenGemmsThenOneReduceScatter) {
  absl::StatusOr<PlannedJob> job =
      TpOverlapKind().Plan(Spec(64, 32, 128), kMesh, kTopology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Plan& plan = job->plan;
  EXPECT_EQ(plan.strategy(), "sequential");
  // 4 GEMMs alone, the collective alone, 4 GEMMs, the collective.
  ASSERT_EQ(plan.steps_size(), 10);
  for (int r = 0; r < 4; ++r) {
    for (int first : {0, 5}) {
      const v1::Step& gemm = plan.steps(first + r);
      EXPECT_EQ(gemm.op(), v1::Step::OP_COMPUTE);
      EXPECT_EQ(gemm.device(), r);
      EXPECT_EQ(gemm.compute().gemm().m(), 64);
      EXPECT_EQ(gemm.compute().gemm().k(), 32);
      // Effective flops: 2 (m + r_half) n k.
      EXPECT_DOUBLE_EQ(gemm.flops(), 2.0 * (64 + 16) * 32 * 32);
      // A_r holds columns [32r, 32r+32) of A.
      const v1::Buffer& a = plan.buffers(gemm.inputs(0).buffer());
      EXPECT_EQ(a.box(1).begin(), 32 * r);
      EXPECT_EQ(plan.tensor_inits(a.tensor()).kind(),
                v1::Initializer::KIND_RANDOM);
    }
  }
  const v1::Step& alone = plan.steps(4);
  EXPECT_EQ(alone.op(), v1::Step::OP_REDUCE_SCATTER);
  EXPECT_EQ(alone.stage(), kStageCommAlone);
  EXPECT_THAT(alone.deps(), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(plan.buffers(alone.outputs(0).buffer()).role(),
            v1::Buffer::ROLE_SCRATCH);
  const v1::Step& rs = plan.steps(9);
  EXPECT_EQ(rs.op(), v1::Step::OP_REDUCE_SCATTER);
  EXPECT_THAT(rs.deps(), ElementsAre(5, 6, 7, 8, 4));
  EXPECT_EQ(rs.bytes(), 64 * 32 * 4);
  const v1::Buffer& y3 = plan.buffers(rs.outputs(3).buffer());
  EXPECT_EQ(y3.role(), v1::Buffer::ROLE_DESTINATION);
  EXPECT_EQ(y3.box(0).begin(), 48);  // rows [48, 64) on rank 3
  // The mode's GEMMs wait for the collective alone.
  EXPECT_THAT(plan.steps(5).deps(), ElementsAre(4));
  ASSERT_EQ(plan.predicted_step_start_size(), 10);
  EXPECT_GE(plan.predicted_step_start(9), plan.predicted_step_finish(5));
  EXPECT_GE(plan.predicted_step_start(5), plan.predicted_step_finish(4));
  // predicted_seconds is the mode phase only: from the mode's first start.
  EXPECT_NEAR(plan.predicted_seconds(),
              plan.predicted_step_finish(9) - plan.predicted_step_start(5),
              1e-12);
  EXPECT_GE(plan.predicted_seconds(), plan.lower_bound_seconds());
}

TEST(TpOverlapKindTest, AllReduceLeavesTheWholeOutputEverywhere) {
  v1::JobSpec spec = Spec(6, 8, 16);  // m not divisible by 4: fine here
  spec.mutable_tp_overlap()->set_collective("all_reduce");
  absl::StatusOr<PlannedJob> job =
      TpOverlapKind().Plan(spec, kMesh, kTopology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Step& ar = job->plan.steps(job->plan.steps_size() - 1);
  EXPECT_EQ(ar.op(), v1::Step::OP_ALL_REDUCE);
  EXPECT_EQ(job->plan.buffers(ar.outputs(2).buffer()).box(0).end(), 6);
}

TEST(TpOverlapKindTest, RejectsWhatItCannotRunNamingFieldAndValues) {
  const TpOverlapKind kind;
  EXPECT_THAT(kind.Validate(Spec(64, 32, 130)).message(),
              HasSubstr("tp_overlap.k 130 is not divisible"));
  EXPECT_THAT(kind.Validate(Spec(66, 32, 128)).message(),
              HasSubstr("tp_overlap.m 66"));
  EXPECT_THAT(kind.Validate(Spec(0, 32, 128)).message(),
              HasSubstr("tp_overlap.m is 0"));
  EXPECT_THAT(kind.Validate(Spec(64, 32, 128, "overlapped")).message(),
              HasSubstr("tp_overlap.mode \"overlapped\" is not one of "
                        "sequential, chunked, fused, auto"));
  EXPECT_THAT(kind.Validate(Spec(64, 32, 128, "fused", 6)).message(),
              HasSubstr("tp_overlap.chunks is 6; mode fused allows 0 (auto) "
                        "or 4 x j"));
  EXPECT_THAT(kind.Validate(Spec(64, 32, 128, "chunked", 17)).message(),
              HasSubstr("1..16"));
  EXPECT_THAT(kind.Validate(Spec(64, 32, 128, "auto", 8)).message(),
              HasSubstr("mode auto picks the chunk count itself"));
  EXPECT_THAT(kind.Validate(Spec(64, 32, 128, "sequential", 2)).message(),
              HasSubstr("allowed 0 or 1"));
  EXPECT_THAT(kind.Validate(Spec(64, 32, 128, "chunked", -1)).message(),
              HasSubstr("tp_overlap.chunks is -1"));
  v1::JobSpec one_rank = Spec(64, 32, 128, "fused");
  one_rank.mutable_tp_overlap()->mutable_mesh()->set_shape(1, 1);
  EXPECT_THAT(kind.Validate(one_rank).message(), HasSubstr("at least 2 ranks"));
  v1::JobSpec ints = Spec(64, 32, 128);
  ints.mutable_tp_overlap()->set_dtype(v1::DTYPE_INT32);
  EXPECT_THAT(kind.Validate(ints).message(), HasSubstr("tp_overlap.dtype"));
  EXPECT_TRUE(kind.Validate(Spec(64, 32, 128, "fused", 8)).ok());
  EXPECT_TRUE(kind.Validate(Spec(64, 32, 128, "auto")).ok());
}

// auto: every mode's best is listed, the fastest chosen and named
// "mode/chunks" in the plan's strategy.
TEST(TpOverlapKindTest, AutoListsEveryModeAndPicksTheFastest) {
  absl::StatusOr<PlannedJob> job =
      TpOverlapKind().Plan(Spec(512, 256, 1024, "auto"), kMesh, kTopology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->alternatives.size(), 3u);
  EXPECT_EQ(job->alternatives[0].name, "sequential");
  EXPECT_EQ(job->alternatives[1].name.rfind("chunked/", 0), 0u);
  EXPECT_EQ(job->alternatives[2].name.rfind("fused/", 0), 0u);
  int chosen = 0;
  double least = job->alternatives[0].predicted_seconds;
  for (const PlanAlternative& a : job->alternatives) {
    least = std::min(least, a.predicted_seconds);
    if (a.chosen) {
      ++chosen;
      EXPECT_EQ(a.name, job->plan.strategy());
      EXPECT_DOUBLE_EQ(a.predicted_seconds, job->plan.predicted_seconds());
    }
  }
  EXPECT_EQ(chosen, 1);
  EXPECT_DOUBLE_EQ(job->plan.predicted_seconds(), least);
}

// A forced mode with compare_all still runs the forced mode, and lists the
// others for comparison.
TEST(TpOverlapKindTest, CompareAllKeepsTheForcedMode) {
  PlanOptions options;
  options.compare_all = true;
  absl::StatusOr<PlannedJob> job = TpOverlapKind().Plan(
      Spec(512, 256, 1024, "chunked", 4), kMesh, kTopology, options);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan.strategy(), "chunked/4");
  ASSERT_EQ(job->alternatives.size(), 3u);
  EXPECT_TRUE(job->alternatives[1].chosen);
  EXPECT_EQ(job->alternatives[1].name, "chunked/4");
  EXPECT_FALSE(job->alternatives[0].chosen);
}

// What the kind emits is exactly the lowering of its strategy (which the
// lowering test interprets and checks against the direct product).
TEST(TpOverlapKindTest, PlanIsTheLoweringOfItsStrategy) {
  absl::StatusOr<PlannedJob> job =
      TpOverlapKind().Plan(Spec(64, 32, 128, "fused", 8), kMesh, kTopology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan.strategy(), "fused/8");
  absl::StatusOr<TpLowering> lowering =
      LowerTpOverlap({64, 32, 128, DType::kFloat32, false}, TpMode::kFused, 8,
                     {0, 1, 2, 3}, TpCostModel{});
  ASSERT_TRUE(lowering.ok());
  v1::Plan plan = job->plan;
  plan.clear_predicted_seconds();
  plan.clear_lower_bound_seconds();
  plan.clear_predicted_step_start();
  plan.clear_predicted_step_finish();
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(plan, lowering->plan));
}

v1::StepResult Result(int step, const std::string& worker, int device,
                      double start, double end) {
  v1::StepResult r;
  r.set_step(step);
  r.set_worker(worker);
  r.set_device(device);
  r.set_start_seconds(start);
  r.set_end_seconds(end);
  r.set_seconds(end - start);
  return r;
}

TEST(TpOverlapKindTest, SummaryMeasuresTheAlonePhasesAndTheMode) {
  absl::StatusOr<PlannedJob> job =
      TpOverlapKind().Plan(Spec(64, 32, 128), kMesh, kTopology, {});
  ASSERT_TRUE(job.ok());
  v1::JobResult result;
  result.set_seconds(1.0);
  // Stage 0: GEMMs 0.1 s (rank 3: 0.12 s); stage 1: 0.2 s (worker w2:
  // 0.21 s); the mode: GEMMs 0.35 .. 0.5 (rank 1 slowest: 0.15 s), the
  // collective 0.5 .. 0.7.
  for (int r = 0; r < 4; ++r) {
    const std::string w = "w" + std::to_string(r);
    *result.add_steps() = Result(r, w, r, 0, r == 3 ? 0.12 : 0.1);
    *result.add_steps() = Result(4, w, r, 0.12, r == 2 ? 0.33 : 0.32);
    *result.add_steps() = Result(5 + r, w, r, 0.35, r == 1 ? 0.5 : 0.47);
    *result.add_steps() = Result(9, w, r, 0.5, 0.7);
  }
  TpOverlapKind().Summarize(Spec(64, 32, 128), job->plan, result);
  const auto& m = result.metrics();
  EXPECT_DOUBLE_EQ(m.at("gemm_seconds"), 0.12);
  EXPECT_NEAR(m.at("comm_seconds"), 0.21, 1e-12);
  EXPECT_NEAR(m.at("total_seconds"), 0.35, 1e-12);
  // (0.12 + 0.21 - 0.35) / 0.12 < 0: clipped.
  EXPECT_DOUBLE_EQ(m.at("overlap_efficiency"), 0);
  EXPECT_NEAR(m.at("gemm_slowdown"), 0.15 / 0.12, 1e-12);
  EXPECT_DOUBLE_EQ(m.at("predicted_total_seconds"),
                   job->plan.predicted_seconds());
}

TEST(TpOverlapKindTest, SummaryOfAPerfectOverlap) {
  absl::StatusOr<PlannedJob> job =
      TpOverlapKind().Plan(Spec(64, 32, 128), kMesh, kTopology, {});
  ASSERT_TRUE(job.ok());
  v1::JobResult result;
  for (int r = 0; r < 4; ++r) {
    const std::string w = "w" + std::to_string(r);
    *result.add_steps() = Result(r, w, r, 0, 0.2);
    *result.add_steps() = Result(4, w, r, 0.2, 0.3);
    // The mode (as if overlapped) takes exactly the GEMM's time.
    *result.add_steps() = Result(5 + r, w, r, 0.3, 0.5);
    *result.add_steps() = Result(9, w, r, 0.4, 0.5);
  }
  TpOverlapKind().Summarize(Spec(64, 32, 128), job->plan, result);
  EXPECT_NEAR(result.metrics().at("overlap_efficiency"), 1, 1e-12);
  EXPECT_NEAR(result.metrics().at("gemm_slowdown"), 1, 1e-12);
}

// Without measured steps (`meshctl plan`), the predicted step times give
// the predicted figures.
TEST(TpOverlapKindTest, SummaryOfAPredictionUsesPredictedTimes) {
  absl::StatusOr<PlannedJob> job = TpOverlapKind().Plan(
      Spec(512, 256, 1024, "fused", 8), kMesh, kTopology, {});
  ASSERT_TRUE(job.ok());
  v1::JobResult result;
  TpOverlapKind().Summarize(Spec(512, 256, 1024), job->plan, result);
  const auto& m = result.metrics();
  ASSERT_TRUE(m.contains("total_seconds"));
  EXPECT_NEAR(m.at("total_seconds"), job->plan.predicted_seconds(), 1e-12);
  EXPECT_GT(m.at("gemm_seconds"), 0);
  EXPECT_GT(m.at("comm_seconds"), 0);
  EXPECT_GE(m.at("gemm_slowdown"), 1);
  EXPECT_TRUE(m.contains("overlap_efficiency"));
}

}  // namespace
}  // namespace meshcast
