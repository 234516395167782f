#include "planner/kinds/collective/collective_kind.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Spec(const std::string& op, const std::string& size,
                 std::vector<int> mesh = {2, 2}) {
  v1::JobSpec spec;
  v1::CollectiveSpec* c = spec.mutable_collective();
  c->set_op(op);
  c->set_size(size);
  for (int extent : mesh) c->mutable_mesh()->add_shape(extent);
  c->set_dtype(v1::DTYPE_FLOAT32);
  return spec;
}

DeviceMesh Mesh(std::vector<int> shape, std::vector<int> devices) {
  return DeviceMesh{std::move(shape), std::move(devices)};
}

Topology TwoByTwo() { return Topology::FromGbps(2, 2, 10, 100); }

absl::StatusOr<PlannedJob> PlanOf(const v1::JobSpec& spec) {
  return CollectiveKind().Plan(spec, {Mesh({2, 2}, {0, 1, 2, 3})}, TwoByTwo(),
                               {});
}

std::set<int> DevicesOf(const v1::Plan& plan, v1::Buffer::Role role) {
  std::set<int> devices;
  for (const v1::Buffer& b : plan.buffers()) {
    if (b.role() == role) devices.insert(b.device());
  }
  return devices;
}

int64_t Elements(const v1::Buffer& buffer) {
  int64_t n = 1;
  for (const v1::Interval& i : buffer.box()) n *= i.end() - i.begin();
  return n;
}

TEST(CollectiveKindTest, AllReduceReducesRowsIntoEveryRank) {
  absl::StatusOr<PlannedJob> job = PlanOf(Spec("all_reduce", "4KiB"));
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Plan& plan = job->plan;
  EXPECT_EQ(plan.kind(), "collective");
  ASSERT_EQ(plan.tensors_size(), 2);
  // IN [4, 1024] float32, OUT [1024].
  EXPECT_THAT(plan.tensors(0).shape(), ::testing::ElementsAre(4, 1024));
  EXPECT_THAT(plan.tensors(1).shape(), ::testing::ElementsAre(1024));
  ASSERT_EQ(plan.steps_size(), 1);
  const v1::Step& step = plan.steps(0);
  EXPECT_EQ(step.op(), v1::Step::OP_ALL_REDUCE);
  EXPECT_EQ(step.bytes(), 4096);
  ASSERT_EQ(step.inputs_size(), 4);
  ASSERT_EQ(step.outputs_size(), 4);
  for (int r = 0; r < 4; ++r) {
    const v1::Buffer& in = plan.buffers(step.inputs(r).buffer());
    const v1::Buffer& out = plan.buffers(step.outputs(r).buffer());
    EXPECT_EQ(in.device(), r);
    EXPECT_EQ(out.device(), r);
    EXPECT_EQ(in.box(0).begin(), r);  // row r
    EXPECT_EQ(Elements(out), 1024);   // the whole output
    EXPECT_EQ(out.role(), v1::Buffer::ROLE_DESTINATION);
  }
  EXPECT_GT(plan.predicted_seconds(), 0);
  EXPECT_GT(plan.lower_bound_seconds(), 0);
  EXPECT_LE(plan.lower_bound_seconds(), plan.predicted_seconds() * 1.000001);
}

TEST(CollectiveKindTest, ReduceScatterGivesEachRankItsChunk) {
  absl::StatusOr<PlannedJob> job = PlanOf(Spec("reduce_scatter", "4KiB"));
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Step& step = job->plan.steps(0);
  int64_t covered = 0;
  for (int r = 0; r < 4; ++r) {
    const v1::Buffer& out = job->plan.buffers(step.outputs(r).buffer());
    EXPECT_EQ(out.box(0).begin(), r * 256);
    EXPECT_EQ(out.box(0).end(), (r + 1) * 256);
    covered += Elements(out);
  }
  EXPECT_EQ(covered, 1024);
}

TEST(CollectiveKindTest, AllGatherIsAMoveOfOneTensor) {
  // 1000 float32 on 4 ranks: rounded down to 1000 elements (a multiple).
  absl::StatusOr<PlannedJob> job = PlanOf(Spec("all_gather", "4002B"));
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Plan& plan = job->plan;
  ASSERT_EQ(plan.tensors_size(), 1);
  EXPECT_EQ(plan.tensors(0).shape(0), 1000);
  EXPECT_EQ(plan.steps(0).bytes(), 4000);
  EXPECT_EQ(DevicesOf(plan, v1::Buffer::ROLE_SOURCE),
            (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(DevicesOf(plan, v1::Buffer::ROLE_DESTINATION),
            (std::set<int>{0, 1, 2, 3}));
}

TEST(CollectiveKindTest, AllToAllCountsEveryPair) {
  absl::StatusOr<PlannedJob> job = PlanOf(Spec("all_to_all", "1KiB"));
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Step& step = job->plan.steps(0);
  ASSERT_EQ(step.counts_size(), 16);
  for (int64_t count : step.counts()) EXPECT_EQ(count, 64);
}

TEST(CollectiveKindTest, BroadcastIsARelayFromRankZero) {
  absl::StatusOr<PlannedJob> job = PlanOf(Spec("broadcast", "1MiB"));
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Plan& plan = job->plan;
  EXPECT_EQ(plan.steps(0).op(), v1::Step::OP_BROADCAST);
  EXPECT_EQ(DevicesOf(plan, v1::Buffer::ROLE_SOURCE), (std::set<int>{0}));
  EXPECT_EQ(DevicesOf(plan, v1::Buffer::ROLE_DESTINATION),
            (std::set<int>{1, 2, 3}));
  EXPECT_EQ(plan.steps(0).slice(0).end(), 262144);
}

TEST(CollectiveKindTest, IterationsRunBackToBack) {
  v1::JobSpec spec = Spec("all_reduce", "64KiB");
  spec.mutable_collective()->set_iterations(3);
  absl::StatusOr<PlannedJob> one = PlanOf(Spec("all_reduce", "64KiB"));
  absl::StatusOr<PlannedJob> three = PlanOf(spec);
  ASSERT_TRUE(one.ok() && three.ok());
  ASSERT_EQ(three->plan.steps_size(), 3);
  EXPECT_THAT(three->plan.steps(2).deps(), ::testing::ElementsAre(1));
  EXPECT_NEAR(three->plan.predicted_seconds(),
              3 * one->plan.predicted_seconds(),
              1e-9 + 1e-6 * three->plan.predicted_seconds());
  ASSERT_EQ(three->plan.predicted_step_finish_size(), 3);
  EXPECT_LT(three->plan.predicted_step_finish(0),
            three->plan.predicted_step_finish(2));
}

TEST(CollectiveKindTest, RejectsBadSpecsNamingTheField) {
  const CollectiveKind kind;
  struct Case {
    v1::JobSpec spec;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back({Spec("allreduce", "1MiB"), "collective.op"});
  cases.push_back({Spec("all_reduce", "lots"), "collective.size"});
  cases.push_back({Spec("all_reduce", ""), "collective.size is required"});
  cases.push_back({Spec("all_reduce", "1MiB", {1, 1}), "at least 2"});
  cases.push_back({Spec("all_gather", "8B"), "below the smallest"});
  v1::JobSpec reduction = Spec("all_reduce", "1MiB");
  reduction.mutable_collective()->set_reduction("mean");
  cases.push_back({reduction, "collective.reduction"});
  v1::JobSpec no_mesh = Spec("all_reduce", "1MiB");
  no_mesh.mutable_collective()->clear_mesh();
  cases.push_back({no_mesh, "collective.mesh is required"});
  for (const Case& c : cases) {
    absl::Status status = kind.Validate(c.spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
  EXPECT_THAT(kind.Validate(Spec("allreduce", "1MiB")).message(),
              HasSubstr("all_reduce, all_gather, reduce_scatter, all_to_all, "
                        "broadcast"));
}

// A hostile value is quoted escaped, and only a short prefix of it.
TEST(CollectiveKindTest, ErrorsQuoteAShortEscapedPrefix) {
  const CollectiveKind kind;
  const std::string op = "\x1b[2J" + std::string(100000, 'x');
  absl::Status status = kind.Validate(Spec(op, "1MiB"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("collective.op \"\\x1B[2Jxxx"));
  EXPECT_THAT(status.message(), HasSubstr("(100004 bytes)"));
  EXPECT_LT(status.message().size(), 300u);
  v1::JobSpec reduction = Spec("all_reduce", "1MiB");
  reduction.mutable_collective()->set_reduction(std::string(5000, 'r'));
  EXPECT_LT(kind.Validate(reduction).message().size(), 300u);
}

TEST(CollectiveKindTest, SummaryFollowsNcclTestsDefinitions) {
  absl::StatusOr<PlannedJob> job = PlanOf(Spec("all_reduce", "1MiB"));
  ASSERT_TRUE(job.ok());
  v1::JobResult result;
  // Two workers report the step; the slower one sets its time.
  v1::StepResult* a = result.add_steps();
  a->set_step(0);
  a->set_seconds(0.010);
  v1::StepResult* b = result.add_steps();
  b->set_step(0);
  b->set_seconds(0.020);
  CollectiveKind().Summarize(Spec("all_reduce", "1MiB"), job->plan, result);
  const auto& m = result.metrics();
  ASSERT_TRUE(m.contains("algbw_bytes_per_second"));
  EXPECT_DOUBLE_EQ(m.at("algbw_bytes_per_second"), 1048576 / 0.020);
  EXPECT_DOUBLE_EQ(m.at("busbw_bytes_per_second"),
                   1048576 / 0.020 * 2 * 3 / 4.0);
  EXPECT_GT(m.at("busbw_bound_bytes_per_second"), 0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("all_gather", 8), 7 / 8.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("broadcast", 8), 1.0);
}

}  // namespace
}  // namespace meshcast
