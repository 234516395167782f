#include "planner/kinds/reshard/reshard_kind.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

v1::JobSpec Spec(const std::string& strategy) {
  v1::JobSpec spec;
  v1::ReshardSpec* r = spec.mutable_reshard();
  r->mutable_tensor()->add_shape(64);
  r->mutable_tensor()->add_shape(32);
  r->mutable_tensor()->set_dtype(v1::DTYPE_INT32);
  r->mutable_src_mesh()->add_shape(1);
  r->mutable_src_mesh()->add_shape(2);
  r->mutable_src_spec()->set_text("S1R");
  r->mutable_dst_mesh()->add_shape(1);
  r->mutable_dst_mesh()->add_shape(2);
  r->mutable_dst_spec()->set_text("S0R");
  r->set_strategy(strategy);
  return spec;
}

const std::vector<DeviceMesh> kMeshes = {{{1, 2}, {0, 1}}, {{1, 2}, {2, 3}}};

TEST(ReshardKindTest, MeshesAreSourceThenDestination) {
  absl::StatusOr<PlacementRequest> meshes = ReshardKind().Meshes(Spec(""));
  ASSERT_TRUE(meshes.ok()) << meshes.status();
  ASSERT_EQ(meshes->meshes.size(), 2u);
  EXPECT_EQ(meshes->names[0], "src_mesh");
  EXPECT_EQ(meshes->names[1], "dst_mesh");
}

TEST(ReshardKindTest, AutoComparesEveryStrategyAndMarksOne) {
  const Topology topology = Topology::FromGbps(2, 2, 10, 100);
  absl::StatusOr<PlannedJob> job =
      ReshardKind().Plan(Spec(""), kMeshes, topology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan.kind(), "reshard");
  ASSERT_GE(job->alternatives.size(), 4u);
  int chosen = 0;
  for (const PlanAlternative& row : job->alternatives) {
    if (!row.chosen) continue;
    ++chosen;
    EXPECT_EQ(row.name, job->plan.strategy());
    EXPECT_DOUBLE_EQ(row.predicted_seconds, job->plan.predicted_seconds());
    EXPECT_EQ(row.steps, job->plan.steps_size());
  }
  EXPECT_EQ(chosen, 1);
  EXPECT_GE(job->plan.predicted_seconds(),
            job->plan.lower_bound_seconds() * 0.999999);
}

TEST(ReshardKindTest, AForcedStrategyPlansOnlyIt) {
  const Topology topology = Topology::FromGbps(2, 2, 10, 100);
  absl::StatusOr<PlannedJob> job =
      ReshardKind().Plan(Spec("send_recv"), kMeshes, topology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan.strategy(), "send_recv");
  EXPECT_TRUE(job->alternatives.empty());
  EXPECT_GT(job->plan.predicted_seconds(), 0);
}

TEST(ReshardKindTest, UserBuffersNameTheSourceAndDestinationTiles) {
  const Topology topology = Topology::FromGbps(2, 2, 10, 100);
  v1::JobSpec spec = Spec("");
  spec.mutable_reshard()->set_src_buffer("mine/in");
  spec.mutable_reshard()->set_dst_buffer("mine/out");
  absl::StatusOr<PlannedJob> job =
      ReshardKind().Plan(spec, kMeshes, topology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  int sources = 0, destinations = 0;
  for (const v1::Buffer& b : job->plan.buffers()) {
    if (b.role() == v1::Buffer::ROLE_SOURCE) {
      ++sources;
      EXPECT_EQ(b.user_buffer(), "mine/in");
    } else if (b.role() == v1::Buffer::ROLE_DESTINATION) {
      ++destinations;
      EXPECT_EQ(b.user_buffer(), "mine/out");
    }
  }
  EXPECT_EQ(sources, 2);
  EXPECT_EQ(destinations, 2);

  spec.mutable_reshard()->clear_dst_buffer();
  EXPECT_THAT(std::string(ReshardKind().Validate(spec).message()),
              ::testing::HasSubstr("reshard.src_buffer and reshard.dst_buffer: "
                                   "give both"));
  spec.mutable_reshard()->set_dst_buffer("mine/in");
  EXPECT_THAT(std::string(ReshardKind().Validate(spec).message()),
              ::testing::HasSubstr("reshard.dst_buffer 'mine/in' equals "
                                   "reshard.src_buffer"));
}

TEST(ReshardKindTest, SummaryReportsMovedBandwidth) {
  v1::JobResult result;
  result.set_seconds(0.5);
  result.set_bytes_delivered(1000);
  result.set_lower_bound_seconds(0.25);
  ReshardKind().Summarize(Spec(""), v1::Plan(), result);
  EXPECT_DOUBLE_EQ(result.metrics().at("movbw_bytes_per_second"), 2000);
  EXPECT_DOUBLE_EQ(result.metrics().at("lower_bound_ratio"), 2);
}

}  // namespace
}  // namespace meshcast
