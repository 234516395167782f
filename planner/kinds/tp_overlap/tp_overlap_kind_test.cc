#include "planner/kinds/tp_overlap/tp_overlap_kind.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::JobSpec Spec(int64_t m, int64_t n, int64_t k) {
  v1::JobSpec spec;
  v1::TpOverlapSpec* t = spec.mutable_tp_overlap();
  t->set_m(m);
  t->set_n(n);
  t->set_k(k);
  t->mutable_mesh()->add_shape(1);
  t->mutable_mesh()->add_shape(4);
  return spec;
}

const std::vector<DeviceMesh> kMesh = {{{1, 4}, {0, 1, 2, 3}}};

TEST(TpOverlapKindTest, SequentialIsGemmsThenOneReduceScatter) {
  const Topology topology = Topology::FromGbps(1, 4, 10, 100);
  absl::StatusOr<PlannedJob> job =
      TpOverlapKind().Plan(Spec(64, 32, 128), kMesh, topology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Plan& plan = job->plan;
  ASSERT_EQ(plan.steps_size(), 5);
  for (int r = 0; r < 4; ++r) {
    const v1::Step& gemm = plan.steps(r);
    EXPECT_EQ(gemm.op(), v1::Step::OP_COMPUTE);
    EXPECT_EQ(gemm.device(), r);
    EXPECT_EQ(gemm.compute().gemm().k(), 32);
    EXPECT_DOUBLE_EQ(gemm.flops(), 2.0 * 64 * 32 * 32);
    // A_r holds columns [32r, 32r+32) of A.
    const v1::Buffer& a = plan.buffers(gemm.inputs(0).buffer());
    EXPECT_EQ(a.box(1).begin(), 32 * r);
    EXPECT_EQ(plan.tensor_inits(a.tensor()).kind(),
              v1::Initializer::KIND_RANDOM);
  }
  const v1::Step& rs = plan.steps(4);
  EXPECT_EQ(rs.op(), v1::Step::OP_REDUCE_SCATTER);
  EXPECT_THAT(rs.deps(), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(rs.bytes(), 64 * 32 * 4);
  const v1::Buffer& y3 = plan.buffers(rs.outputs(3).buffer());
  EXPECT_EQ(y3.role(), v1::Buffer::ROLE_DESTINATION);
  EXPECT_EQ(y3.box(0).begin(), 48);  // rows [48, 64) on rank 3
  // The collective starts when the GEMMs are done.
  ASSERT_EQ(plan.predicted_step_start_size(), 5);
  EXPECT_GE(plan.predicted_step_start(4), plan.predicted_step_finish(0));
  EXPECT_GE(plan.predicted_seconds(), plan.lower_bound_seconds());
}

TEST(TpOverlapKindTest, AllReduceLeavesTheWholeOutputEverywhere) {
  v1::JobSpec spec = Spec(6, 8, 16);  // m not divisible by 4: fine here
  spec.mutable_tp_overlap()->set_collective("all_reduce");
  absl::StatusOr<PlannedJob> job = TpOverlapKind().Plan(
      spec, kMesh, Topology::FromGbps(1, 4, 10, 100), {});
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Step& ar = job->plan.steps(4);
  EXPECT_EQ(ar.op(), v1::Step::OP_ALL_REDUCE);
  EXPECT_EQ(job->plan.buffers(ar.outputs(2).buffer()).box(0).end(), 6);
}

TEST(TpOverlapKindTest, RejectsWhatItCannotRun) {
  const TpOverlapKind kind;
  EXPECT_THAT(kind.Validate(Spec(64, 32, 130)).message(),
              HasSubstr("tp_overlap.k 130 is not divisible"));
  EXPECT_THAT(kind.Validate(Spec(66, 32, 128)).message(),
              HasSubstr("tp_overlap.m 66"));
  EXPECT_THAT(kind.Validate(Spec(0, 32, 128)).message(),
              HasSubstr("tp_overlap.m is 0"));
  v1::JobSpec fused = Spec(64, 32, 128);
  fused.mutable_tp_overlap()->set_mode("fused");
  EXPECT_THAT(kind.Validate(fused).message(), HasSubstr("sequential"));
  v1::JobSpec ints = Spec(64, 32, 128);
  ints.mutable_tp_overlap()->set_dtype(v1::DTYPE_INT32);
  EXPECT_THAT(kind.Validate(ints).message(), HasSubstr("tp_overlap.dtype"));
}

TEST(TpOverlapKindTest, SummaryMeasuresOverlap) {
  absl::StatusOr<PlannedJob> job = TpOverlapKind().Plan(
      Spec(64, 32, 128), kMesh, Topology::FromGbps(1, 4, 10, 100), {});
  ASSERT_TRUE(job.ok());
  v1::JobResult result;
  result.set_seconds(0.3);
  for (int s = 0; s < 5; ++s) {
    v1::StepResult* step = result.add_steps();
    step->set_step(s);
    step->set_seconds(s < 4 ? 0.1 : 0.2);
  }
  TpOverlapKind().Summarize(Spec(64, 32, 128), job->plan, result);
  EXPECT_DOUBLE_EQ(result.metrics().at("gemm_seconds"), 0.1);
  EXPECT_DOUBLE_EQ(result.metrics().at("comm_seconds"), 0.2);
  EXPECT_NEAR(result.metrics().at("overlap_efficiency"), 0, 1e-12);
}

}  // namespace
}  // namespace meshcast
