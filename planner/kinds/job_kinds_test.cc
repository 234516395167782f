#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/kinds/job_kind.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

TEST(JobKindsTest, FindsTheKindOfASpec) {
  v1::JobSpec spec;
  spec.mutable_collective();
  absl::StatusOr<const JobKind*> kind = FindJobKind(spec);
  ASSERT_TRUE(kind.ok());
  EXPECT_EQ((*kind)->name(), "collective");
  spec.mutable_reshard();
  EXPECT_EQ((*FindJobKind(spec))->name(), "reshard");
}

TEST(JobKindsTest, ASpecWithoutAKindNamesTheKinds) {
  absl::StatusOr<const JobKind*> kind = FindJobKind(v1::JobSpec());
  EXPECT_EQ(kind.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(kind.status().message(), HasSubstr("reshard, collective, tp_overlap, moe, calibrate, "
                                          "attention, pipeline, reshard_model"));
}

TEST(JobKindsTest, ByName) {
  EXPECT_EQ((*FindJobKindByName("reshard"))->name(), "reshard");
  EXPECT_EQ((*FindJobKindByName("moe"))->name(), "moe");
  EXPECT_EQ((*FindJobKindByName("pipeline"))->name(), "pipeline");
  EXPECT_EQ(FindJobKindByName("zero_bubble").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ((*FindJobKindByName("calibrate"))->name(), "calibrate");
  EXPECT_EQ((*FindJobKindByName("attention"))->name(), "attention");
  EXPECT_EQ((*FindJobKindByName("reshard_model"))->name(), "reshard_model");
  EXPECT_EQ(AllJobKinds().size(), 8u);
}

}  // namespace
}  // namespace meshcast
