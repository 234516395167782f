#include "planner/kinds/calibrate/calibrate_kind.h"

#include <functional>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/sim/plan_simulator.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Spec(int hosts = 2, int devices = 2) {
  v1::JobSpec spec;
  v1::CalibrateSpec* c = spec.mutable_calibrate();
  c->mutable_mesh()->add_shape(hosts);
  c->mutable_mesh()->add_shape(devices);
  c->set_min_size("64KiB");
  c->set_max_size("1MiB");
  c->set_points(3);
  c->set_repeat(2);
  return spec;
}

const std::vector<DeviceMesh> kMesh = {{{2, 2}, {0, 1, 2, 3}}};
const Topology kTopology = Topology::FromGbps(2, 2, 10, 100);

TEST(FitAlphaBetaTest, RecoversAnExactLineAndClampsANegativeAlpha) {
  const std::vector<double> bytes = {1e3, 1e4, 1e5, 1e6};
  std::vector<double> seconds;
  for (double b : bytes) seconds.push_back(20e-6 + b * 1e-9);
  absl::StatusOr<AlphaBeta> fit = FitAlphaBeta(bytes, seconds);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->alpha_seconds, 20e-6, 1e-12);
  EXPECT_NEAR(fit->beta_seconds_per_byte, 1e-9, 1e-15);
  // Times below proportional: alpha would be negative; through the origin.
  absl::StatusOr<AlphaBeta> clamped =
      FitAlphaBeta({1e3, 1e6}, {0.5e-6, 1e-3});
  ASSERT_TRUE(clamped.ok()) << clamped.status();
  EXPECT_EQ(clamped->alpha_seconds, 0);
  EXPECT_GT(clamped->beta_seconds_per_byte, 0.5e-9);
  EXPECT_LT(clamped->beta_seconds_per_byte, 1e-9);
}

TEST(FitAlphaBetaTest, RefusesWhatCannotBeFitted) {
  EXPECT_FALSE(FitAlphaBeta({1e3}, {1e-3}).ok());
  EXPECT_FALSE(FitAlphaBeta({1e3, 1e3}, {1e-3, 2e-3}).ok());
  EXPECT_FALSE(FitAlphaBeta({1e3, 1e6}, {1e-3, 0}).ok());
  EXPECT_FALSE(FitAlphaBeta({1e3, 1e6}, {2e-3, 1e-3}).ok());  // beta < 0
}

TEST(CalibrateKindTest, ErrorsNameTheFieldAndTheAllowedValues) {
  struct Case {
    std::function<void(v1::CalibrateSpec&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](v1::CalibrateSpec& c) { c.add_ops("all_reduce"), c.add_ops("x"); },
       "calibrate.ops[1] \"x\" is not one of all_to_all, all_gather"},
      {[](v1::CalibrateSpec& c) {
         c.clear_mesh();
         c.mutable_mesh()->add_shape(1);
         c.mutable_mesh()->add_shape(1);
       },
       "2 hosts or 2 devices at least"},
      {[](v1::CalibrateSpec& c) { c.set_min_size("lots"); },
       "calibrate.min_size"},
      {[](v1::CalibrateSpec& c) { c.set_min_size("2"); },
       "calibrate.min_size is 2 bytes; allowed: at least 8"},
      {[](v1::CalibrateSpec& c) { c.set_max_size("32KiB"); },
       "must be above min_size"},
      {[](v1::CalibrateSpec& c) { c.set_points(1); },
       "calibrate.points is 1; allowed: 2..32"},
      {[](v1::CalibrateSpec& c) { c.set_repeat(-1); },
       "calibrate.repeat is -1; allowed: 1..100"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = Spec();
    c.edit(*spec.mutable_calibrate());
    const absl::Status status = CalibrateKind().Validate(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
  EXPECT_TRUE(CalibrateKind().Validate(Spec()).ok());
}

TEST(CalibrateKindTest, SweepsEveryOpOnEachLinkClassOneStepAtATime) {
  absl::StatusOr<PlannedJob> job =
      CalibrateKind().Plan(Spec(), kMesh, kTopology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Plan& plan = job->plan;
  // 2 classes x 4 ops x 3 sizes x 2 runs, a single chain.
  ASSERT_EQ(plan.steps_size(), 2 * 4 * 3 * 2);
  for (const v1::Step& step : plan.steps()) {
    if (step.id() == 0) {
      EXPECT_EQ(step.deps_size(), 0);
    } else {
      EXPECT_THAT(step.deps(), ::testing::ElementsAre(step.id() - 1));
    }
  }
  // Intra-host steps run on host 0's devices, inter-host ones on the first
  // device of each host; the sizes grow 64 KiB .. 1 MiB.
  const v1::CommGroup& intra = plan.groups(plan.steps(0).group());
  EXPECT_THAT(intra.devices(), ::testing::ElementsAre(0, 1));
  const v1::CommGroup& inter = plan.groups(plan.steps(24).group());
  EXPECT_THAT(inter.devices(), ::testing::ElementsAre(0, 2));
  EXPECT_EQ(plan.steps(0).op(), v1::Step::OP_ALL_TO_ALL);
  EXPECT_EQ(plan.steps(0).bytes(), 64 << 10);
  EXPECT_EQ(plan.steps(4).bytes(), 1 << 20);
  EXPECT_EQ(plan.predicted_step_start_size(), plan.steps_size());
}

// A result whose every step took `scale` times the model's time plus
// `extra` seconds.
v1::JobResult ResultOf(const v1::Plan& plan, double scale, double extra) {
  v1::JobResult result;
  for (int i = 0; i < plan.steps_size(); ++i) {
    for (const char* worker : {"w0", "w1"}) {
      v1::StepResult* step = result.add_steps();
      step->set_step(i);
      step->set_worker(worker);
      const double model =
          plan.predicted_step_finish(i) - plan.predicted_step_start(i);
      // The slowest worker counts: w1 is the slow one.
      step->set_seconds((model * scale + extra) *
                        (std::string(worker) == "w1" ? 1.0 : 0.5));
    }
  }
  return result;
}

// Plans Spec() on kMesh and summarizes a result 3x the model plus 100 us.
void PlanAndMeasure(const v1::JobSpec& spec, PlannedJob* job,
                    v1::JobResult* result) {
  absl::StatusOr<PlannedJob> planned =
      CalibrateKind().Plan(spec, kMesh, kTopology, {});
  ASSERT_TRUE(planned.ok()) << planned.status();
  *job = *std::move(planned);
  *result = ResultOf(job->plan, 3.0, 1e-4);
  CalibrateKind().Summarize(spec, job->plan, *result);
}

TEST(CalibrateKindTest, FitsTheMeasurementAndTheModelAndReadsThemBack) {
  const v1::JobSpec spec = Spec();
  PlannedJob job;
  v1::JobResult result;
  ASSERT_NO_FATAL_FAILURE(PlanAndMeasure(spec, &job, &result));
  EXPECT_EQ(result.metrics().at("points_fitted"), 8);
  const std::vector<CollectiveCalibration> fits =
      CalibrateKind().Calibration(spec, result);
  ASSERT_EQ(fits.size(), 8u);
  for (const CollectiveCalibration& c : fits) {
    SCOPED_TRACE(c.op + " " + c.link_class);
    EXPECT_EQ(c.ranks, 2);
    EXPECT_NEAR(c.beta_seconds_per_byte / c.model_beta_seconds_per_byte, 3.0,
                0.05);
    EXPECT_NEAR(c.alpha_seconds - 3 * c.model_alpha_seconds, 1e-4, 2e-5);
  }
}

TEST(CalibrateKindTest, APlannedCollectiveTakesTheCalibratedTime) {
  // Calibrate on 2x2, as if every collective ran 3x the model plus 100 us.
  const v1::JobSpec spec = Spec();
  PlannedJob planned;
  v1::JobResult result;
  ASSERT_NO_FATAL_FAILURE(PlanAndMeasure(spec, &planned, &result));
  const PlannedJob* job = &planned;
  Topology calibrated = kTopology;
  calibrated.calibration = CalibrateKind().Calibration(spec, result);
  // The same plan predicted on the calibrated topology: each step about 3x
  // its model time plus 100 us (the fit is of 3 sizes; the ring's bytes
  // scale exactly, its latencies do not).
  absl::StatusOr<PlanSimulation> before = SimulatePlan(job->plan, kTopology);
  absl::StatusOr<PlanSimulation> after = SimulatePlan(job->plan, calibrated);
  ASSERT_TRUE(before.ok() && after.ok());
  const double steps = job->plan.steps_size();
  EXPECT_NEAR(after->seconds, 3 * before->seconds + steps * 1e-4,
              0.05 * after->seconds);
  // A calibrate job's own plan is predicted without the calibration.
  absl::StatusOr<PlannedJob> again =
      CalibrateKind().Plan(spec, kMesh, calibrated, {});
  ASSERT_TRUE(again.ok());
  EXPECT_NEAR(again->plan.predicted_seconds(), before->seconds,
              1e-9 * before->seconds);
}

}  // namespace
}  // namespace meshcast
