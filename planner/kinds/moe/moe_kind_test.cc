#include "planner/kinds/moe/moe_kind.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Spec(const std::string& schedule = "") {
  v1::JobSpec spec;
  v1::MoeSpec* m = spec.mutable_moe();
  m->set_tokens(256);
  m->set_hidden(64);
  m->set_ffn(128);
  m->set_experts(4);
  m->mutable_mesh()->add_shape(2);
  m->mutable_mesh()->add_shape(2);
  m->set_schedule(schedule);
  return spec;
}

const std::vector<DeviceMesh> kMesh = {{{2, 2}, {0, 1, 2, 3}}};
const Topology kTopology = Topology::FromGbps(2, 2, 10, 1000);

TEST(MoeKindTest, DefaultsAndDegreesFromTheMesh) {
  absl::StatusOr<MoeRequest> request = MoeRequestOf(Spec());
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->shape.ep, 2);
  EXPECT_EQ(request->shape.mp, 2);
  EXPECT_EQ(request->shape.top_k, 2);
  EXPECT_EQ(request->shape.capacity_factor, 1.0);
  EXPECT_EQ(request->schedule, MoeSchedule::kAuto);
}

TEST(MoeKindTest, ErrorsNameTheFieldAndTheAllowedValues) {
  struct Case {
    std::function<void(v1::MoeSpec&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](v1::MoeSpec& m) { m.set_tokens(0); }, "moe.tokens is 0; allowed"},
      {[](v1::MoeSpec& m) { m.set_tokens(255); }, "not divisible by mp 2"},
      {[](v1::MoeSpec& m) { m.set_experts(3); }, "not a multiple of ep 2"},
      {[](v1::MoeSpec& m) { m.set_top_k(5); }, "moe.top_k is 5; allowed: 1..4"},
      {[](v1::MoeSpec& m) { m.set_ffn(129); }, "not divisible by esp 2"},
      {[](v1::MoeSpec& m) { m.set_schedule("s3"); },
       "not one of baseline, s1, s2, auto"},
      {[](v1::MoeSpec& m) { m.set_pass("backward"); },
       "moe.pass \"backward\" is not one of forward, forward_backward"},
      {[](v1::MoeSpec& m) { m.set_esp(1); }, "moe.esp is 1"},
      {[](v1::MoeSpec& m) { m.set_capacity_factor(-1); },
       "moe.capacity_factor is -1"},
      {[](v1::MoeSpec& m) { m.set_dtype(v1::DTYPE_INT32); },
       "not one of float32"},
      {[](v1::MoeSpec& m) { m.clear_mesh(); }, "moe.mesh is not set"},
      {[](v1::MoeSpec& m) {
         m.set_schedule("s1");
         m.set_chunks(4);
       },
       "chunks applies to s2"},
      {[](v1::MoeSpec& m) { m.set_expert_skew(-1); },
       "moe.expert_skew is -1; allowed: 0 (uniform) .. 8"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = Spec();
    c.edit(*spec.mutable_moe());
    const absl::Status status = MoeKind().Validate(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
}

TEST(MoeKindTest, MeshFromEpAndMp) {
  v1::JobSpec spec = Spec();
  spec.mutable_moe()->clear_mesh();
  spec.mutable_moe()->set_ep(2);
  spec.mutable_moe()->set_mp(2);
  absl::StatusOr<PlacementRequest> meshes = MoeKind().Meshes(spec);
  ASSERT_TRUE(meshes.ok()) << meshes.status();
  EXPECT_EQ(meshes->meshes[0].shape, (std::vector<int>{2, 2}));
}

TEST(MoeKindTest, AutoPicksThePredictedFastestAndListsEverySchedule) {
  absl::StatusOr<PlannedJob> job =
      MoeKind().Plan(Spec("auto"), kMesh, kTopology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_GE(job->alternatives.size(), 3u);
  const PlanAlternative* chosen = nullptr;
  double fastest = 1e300;
  for (const PlanAlternative& a : job->alternatives) {
    if (a.chosen) chosen = &a;
    fastest = std::min(fastest, a.predicted_seconds);
    EXPECT_GT(a.predicted_seconds, 0);
    EXPECT_LE(a.lower_bound_seconds, a.predicted_seconds);
  }
  ASSERT_NE(chosen, nullptr);
  EXPECT_EQ(chosen->predicted_seconds, fastest);
  EXPECT_EQ(job->plan.strategy(), chosen->name);
  EXPECT_EQ(job->plan.kind(), "moe");
}

TEST(MoeKindTest, AForcedScheduleIsPlannedAlone) {
  absl::StatusOr<PlannedJob> job =
      MoeKind().Plan(Spec("baseline"), kMesh, kTopology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan.strategy(), "baseline");
  EXPECT_TRUE(job->alternatives.empty());
  PlanOptions all;
  all.compare_all = true;
  job = MoeKind().Plan(Spec("baseline"), kMesh, kTopology, all);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->plan.strategy(), "baseline");
  EXPECT_GE(job->alternatives.size(), 3u);
}

TEST(MoeKindTest, SummarizeReportsEveryPhaseFromThePrediction) {
  absl::StatusOr<PlannedJob> job =
      MoeKind().Plan(Spec("s1"), kMesh, kTopology, {});
  ASSERT_TRUE(job.ok());
  v1::JobResult result;
  MoeKind().Summarize(Spec("s1"), job->plan, result);
  for (const char* name :
       {"gate_seconds", "dispatch_seconds", "esp_gather_seconds",
        "experts_seconds", "esp_reduce_seconds", "combine_seconds",
        "total_seconds", "dropped_tokens_fraction"}) {
    EXPECT_TRUE(result.metrics().contains(name)) << name;
  }
  EXPECT_NEAR(result.metrics().at("total_seconds"),
              job->plan.predicted_seconds(), 1e-12);
}

}  // namespace
}  // namespace meshcast
