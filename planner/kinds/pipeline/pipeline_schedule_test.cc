#include "planner/kinds/pipeline/pipeline_schedule.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

TEST(PipelineScheduleTest, NamesRoundTripAndBadNamesListTheChoices) {
  for (PipelineSchedule s :
       {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B,
        PipelineSchedule::kEager1F1B, PipelineSchedule::kAuto}) {
    absl::StatusOr<PipelineSchedule> back =
        PipelineScheduleFromName(PipelineScheduleName(s));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(*PipelineScheduleFromName(""), PipelineSchedule::kAuto);
  absl::StatusOr<PipelineSchedule> bad = PipelineScheduleFromName("zb");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("gpipe, 1f1b, eager_1f1b, auto"));
}

// The orders for S = 3, M = 6 worked out by hand from the rules.
TEST(PipelineScheduleTest, OneFOneBOfThreeStagesAndSixMicrobatches) {
  const auto order = PipelineOrder(PipelineSchedule::k1F1B, 3, 6);
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(OrderString(order[0]), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(OrderString(order[1]), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(OrderString(order[2]), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
}

TEST(PipelineScheduleTest, EagerOneFOneBRunsTwiceTheWarmupOnStageZero) {
  const auto order = PipelineOrder(PipelineSchedule::kEager1F1B, 3, 6);
  EXPECT_EQ(OrderString(order[0]), "F0 F1 F2 F3 F4 B0 F5 B1 B2 B3 B4 B5");
  EXPECT_EQ(OrderString(order[1]), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(OrderString(order[2]), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
}

TEST(PipelineScheduleTest, GpipeRunsEveryForwardThenTheBackwardsReversed) {
  const auto order = PipelineOrder(PipelineSchedule::kGpipe, 2, 3);
  EXPECT_EQ(OrderString(order[0]), "F0 F1 F2 B2 B1 B0");
  EXPECT_EQ(OrderString(order[1]), "F0 F1 F2 B2 B1 B0");
}

// Properties over many shapes: every block once, F(m) before B(m), each
// direction in order, and the in-flight peaks the schedules promise.
TEST(PipelineScheduleTest, EveryOrderIsCompleteCausalAndHasItsPeak) {
  for (PipelineSchedule schedule : ConcretePipelineSchedules()) {
    for (int stages = 1; stages <= 6; ++stages) {
      for (int m = 1; m <= 10; ++m) {
        const auto order = PipelineOrder(schedule, stages, m);
        ASSERT_EQ(static_cast<int>(order.size()), stages);
        for (int i = 0; i < stages; ++i) {
          SCOPED_TRACE(PipelineScheduleName(schedule) + " S" +
                       std::to_string(stages) + " M" + std::to_string(m) +
                       " stage " + std::to_string(i) + ": " +
                       OrderString(order[i]));
          ASSERT_EQ(static_cast<int>(order[i].size()), 2 * m);
          std::vector<int> f_at(m, -1), b_at(m, -1);
          for (int k = 0; k < 2 * m; ++k) {
            const PipelineBlock& b = order[i][k];
            ASSERT_GE(b.microbatch, 0);
            ASSERT_LT(b.microbatch, m);
            int& at = b.backward ? b_at[b.microbatch] : f_at[b.microbatch];
            ASSERT_EQ(at, -1) << "twice: " << b.Name();
            at = k;
          }
          for (int mb = 0; mb < m; ++mb) {
            EXPECT_LT(f_at[mb], b_at[mb]);
            if (mb > 0) EXPECT_LT(f_at[mb - 1], f_at[mb]);
          }
          int expected = m;
          if (schedule == PipelineSchedule::k1F1B) {
            expected = std::min(m, stages - i);
          } else if (schedule == PipelineSchedule::kEager1F1B) {
            expected = std::min(m, 2 * (stages - i) - 1);
          }
          EXPECT_EQ(PeakInFlight(order[i]), expected);
        }
      }
    }
  }
}

}  // namespace
}  // namespace meshcast
