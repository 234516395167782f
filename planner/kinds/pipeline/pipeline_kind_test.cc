#include "planner/kinds/pipeline/pipeline_kind.h"

#include <functional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/ir/plan_hazards.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

// Two stages of 1x2 (hidden 64, ffn 256, 4 micro-batches of 32 rows).
v1::JobSpec Spec(const std::string& schedule = "", int stages = 2) {
  v1::JobSpec spec;
  v1::PipelineSpec* p = spec.mutable_pipeline();
  for (int s = 0; s < stages; ++s) {
    v1::PipelineStage* stage = p->add_stages();
    stage->mutable_mesh()->add_shape(1);
    stage->mutable_mesh()->add_shape(2);
    stage->mutable_input_spec()->set_text("S0,R");
    stage->mutable_output_spec()->set_text("R,S1");
  }
  p->set_microbatches(4);
  p->set_microbatch_size(32);
  p->set_hidden(64);
  p->set_ffn(256);
  p->set_schedule(schedule);
  return spec;
}

std::vector<DeviceMesh> Meshes(int stages) {
  std::vector<DeviceMesh> meshes;
  for (int s = 0; s < stages; ++s) {
    meshes.push_back(DeviceMesh{{1, 2}, {2 * s, 2 * s + 1}});
  }
  return meshes;
}

TEST(PipelineKindTest, ErrorsNameTheFieldAndTheAllowedValues) {
  struct Case {
    std::function<void(v1::PipelineSpec&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](v1::PipelineSpec& p) { p.mutable_stages()->RemoveLast(); },
       "pipeline.stages (count) is 1; allowed: 2..64"},
      {[](v1::PipelineSpec& p) { p.set_microbatches(0); },
       "pipeline.microbatches is 0; allowed: 1..1024"},
      {[](v1::PipelineSpec& p) { p.set_hidden(-1); },
       "pipeline.hidden is -1; allowed"},
      {[](v1::PipelineSpec& p) { p.set_schedule("zero_bubble"); },
       "gpipe, 1f1b, eager_1f1b, auto"},
      {[](v1::PipelineSpec& p) { p.set_ffn(255); },
       "pipeline.ffn 255 is not divisible by the 2 devices of "
       "pipeline.stages[0].mesh"},
      {[](v1::PipelineSpec& p) {
         p.mutable_stages(1)->mutable_input_spec()->set_text("S0,R,R");
       },
       "pipeline.stages[1].input_spec"},
      {[](v1::PipelineSpec& p) {
         p.mutable_stages(0)->mutable_output_spec()->set_text("S2,R");
       },
       "pipeline.stages[0].output_spec"},
      {[](v1::PipelineSpec& p) { p.mutable_stages(1)->clear_mesh(); },
       "pipeline.stages[1].mesh is required"},
      {[](v1::PipelineSpec& p) { p.set_memory_limit_bytes(-5); },
       "pipeline.memory_limit_bytes is -5"},
      {[](v1::PipelineSpec& p) { p.set_reshard_strategy("fastest"); },
       "pipeline.reshard_strategy"},
      {[](v1::PipelineSpec& p) { p.set_dtype(v1::DTYPE_INT32); },
       "pipeline.dtype int32 is not one of float32"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = Spec();
    c.edit(*spec.mutable_pipeline());
    const absl::Status status = PipelineKind().Validate(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
  }
  EXPECT_TRUE(PipelineKind().Validate(Spec()).ok());
}

TEST(PipelineKindTest, OneMeshPerStageNamedByItsField) {
  absl::StatusOr<PlacementRequest> meshes = PipelineKind().Meshes(Spec("", 3));
  ASSERT_TRUE(meshes.ok()) << meshes.status();
  ASSERT_EQ(meshes->meshes.size(), 3u);
  EXPECT_EQ(meshes->NameOf(2), "pipeline.stages[2].mesh");
  EXPECT_FALSE(meshes->allow_overlap);
}

TEST(PipelineKindTest, StagesOnOneDeviceAreRefused) {
  const Topology topology = Topology::FromGbps(1, 4, 10, 100);
  absl::StatusOr<PlannedJob> job = PipelineKind().Plan(
      Spec("1f1b"), {DeviceMesh{{1, 2}, {0, 1}}, DeviceMesh{{1, 2}, {1, 2}}},
      topology, {});
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("pipeline.stages[0].mesh and pipeline.stages[1].mesh "
                        "share device 1"));
  absl::StatusOr<PlacementRequest> meshes = PipelineKind().Meshes(Spec());
  ASSERT_TRUE(meshes.ok());
  EXPECT_TRUE(meshes->share_hosts);
}

TEST(PipelineKindTest, PredictedPeakMemoryFollowsEachSchedule) {
  absl::StatusOr<PipelineRequest> request = PipelineRequestOf(Spec("", 3));
  ASSERT_TRUE(request.ok());
  // Per micro-batch and device: X [32, 64] and Z, H [32, 128] in float32.
  const int64_t per = (32 * 64 + 2 * 32 * 128) * 4;
  EXPECT_EQ(PipelineActivationBytes(request->shape, 2), per);
  EXPECT_EQ(PredictedPeakActivationBytes(*request, PipelineSchedule::kGpipe),
            4 * per);
  EXPECT_EQ(PredictedPeakActivationBytes(*request, PipelineSchedule::k1F1B),
            3 * per);  // stage 0: S - 0 = 3
  EXPECT_EQ(
      PredictedPeakActivationBytes(*request, PipelineSchedule::kEager1F1B),
      4 * per);  // min(M, 2 S - 1)
}

// Where the sends between meshes cost about as much as a block's compute,
// eager_1f1b hides them and 1f1b cannot: the planner predicts the gain,
// and overlap beats no overlap for every schedule.
TEST(PipelineKindTest, EagerBeatsOneFOneBWhenCommunicationIsSignificant) {
  Topology slow = Topology::FromGbps(3, 2, 0.5, 100);
  PlanOptions all;
  all.compare_all = true;
  v1::JobSpec spec = Spec("auto", 3);
  spec.mutable_pipeline()->set_microbatches(8);
  absl::StatusOr<PlannedJob> job =
      PipelineKind().Plan(spec, Meshes(3), slow, all);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->alternatives.size(), 6u);
  std::map<std::string, double> predicted;
  int chosen = 0;
  for (const PlanAlternative& a : job->alternatives) {
    predicted[a.name] = a.predicted_seconds;
    EXPECT_GT(a.predicted_seconds, a.lower_bound_seconds) << a.name;
    EXPECT_GT(a.peak_memory_bytes, 0);
    chosen += a.chosen;
  }
  EXPECT_EQ(chosen, 1);
  EXPECT_LT(predicted["eager_1f1b"], predicted["1f1b"]);
  for (const char* s : {"gpipe", "1f1b", "eager_1f1b"}) {
    EXPECT_LT(predicted[s], predicted[std::string(s) + " (no overlap)"]) << s;
  }
  EXPECT_EQ(job->plan.kind(), "pipeline");
  EXPECT_EQ(job->plan.strategy().find("no overlap"), std::string::npos);
}

TEST(PipelineKindTest, AutoNeverExceedsTheMemoryLimit) {
  absl::StatusOr<PipelineRequest> request = PipelineRequestOf(Spec("", 3));
  ASSERT_TRUE(request.ok());
  const int64_t one_f_one_b =
      PredictedPeakActivationBytes(*request, PipelineSchedule::k1F1B);
  v1::JobSpec spec = Spec("auto", 3);
  spec.mutable_pipeline()->set_memory_limit_bytes(one_f_one_b);
  const Topology slow = Topology::FromGbps(3, 2, 0.5, 100);
  absl::StatusOr<PlannedJob> job =
      PipelineKind().Plan(spec, Meshes(3), slow, {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan.strategy(), "1f1b");  // gpipe and eager do not fit
  // Forced, a schedule that does not fit is refused, naming the field.
  spec.mutable_pipeline()->set_schedule("eager_1f1b");
  job = PipelineKind().Plan(spec, Meshes(3), slow, {});
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("pipeline.memory_limit_bytes"));
  // Below every schedule's need: refused with each one's figure.
  spec.mutable_pipeline()->set_schedule("auto");
  spec.mutable_pipeline()->set_memory_limit_bytes(100);
  job = PipelineKind().Plan(spec, Meshes(3), slow, {});
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("gpipe"));
}

TEST(PipelineKindTest, PredictedFiguresOfTheSimulatedPlan) {
  const Topology topology = Topology::FromGbps(2, 2, 10, 100);
  for (const char* schedule : {"gpipe", "1f1b", "eager_1f1b"}) {
    const v1::JobSpec spec = Spec(schedule);
    absl::StatusOr<PlannedJob> job =
        PipelineKind().Plan(spec, Meshes(2), topology, {});
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_TRUE(CheckPlanHazards(job->plan).ok())
        << schedule << ": " << CheckPlanHazards(job->plan);
    v1::JobResult result;  // no steps: the figures of the prediction
    PipelineKind().Summarize(spec, job->plan, result);
    const auto& m = result.metrics();
    ASSERT_TRUE(m.contains("step_seconds")) << schedule;
    EXPECT_NEAR(m.at("step_seconds"), job->plan.predicted_seconds(),
                1e-9 * job->plan.predicted_seconds());
    EXPECT_GT(m.at("bubble_fraction"), 0) << schedule;
    EXPECT_LT(m.at("bubble_fraction"), 1) << schedule;
    EXPECT_GT(m.at("stage0_busy_seconds"), 0);
    EXPECT_LE(m.at("stage1_busy_seconds"), m.at("step_seconds"));
    // The timeline's peak is the schedule's own.
    EXPECT_EQ(m.at("peak_activation_bytes"),
              m.at("predicted_peak_activation_bytes"))
        << schedule;
  }
}

}  // namespace
}  // namespace meshcast
