#include "bench/cluster/sample_stats.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace meshcast::bench {
namespace {

TEST(PercentileTest, EmptySampleIsNan) {
  EXPECT_TRUE(std::isnan(Percentile({}, 50)));
  EXPECT_TRUE(std::isnan(Median({})));
}

TEST(PercentileTest, MedianOfOddAndEvenSamplesInAnyOrder) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({7}), 7);
}

TEST(PercentileTest, InterpolatesBetweenClosestRanks) {
  // 0..100: rank p lands exactly on value p.
  std::vector<double> values;
  for (int i = 100; i >= 0; --i) values.push_back(i);
  EXPECT_DOUBLE_EQ(Percentile(values, 99), 99);
  EXPECT_DOUBLE_EQ(Percentile(values, 12.5), 12.5);
  // Two values: p99 lies 99% of the way from the first to the second.
  EXPECT_DOUBLE_EQ(Percentile({10, 20}, 99), 19.9);
}

TEST(PercentileTest, ClampsOutOfRangePercentiles) {
  EXPECT_DOUBLE_EQ(Percentile({5, 1, 9}, -10), 1);
  EXPECT_DOUBLE_EQ(Percentile({5, 1, 9}, 250), 9);
}

TEST(SummarizeTest, ReportsEveryFigure) {
  const SampleSummary s = Summarize({0.004, 0.001, 0.003, 0.002});
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.min, 0.001);
  EXPECT_DOUBLE_EQ(s.max, 0.004);
  EXPECT_DOUBLE_EQ(s.p50, 0.0025);
  EXPECT_NEAR(s.p99, 0.00397, 1e-12);
  EXPECT_DOUBLE_EQ(s.mean, 0.0025);
}

TEST(SummarizeTest, EmptySampleHasZeroCountAndNans) {
  const SampleSummary s = Summarize({});
  EXPECT_EQ(s.count, 0);
  EXPECT_TRUE(std::isnan(s.p50));
  EXPECT_TRUE(std::isnan(s.p99));
  EXPECT_TRUE(std::isnan(s.mean));
}

}  // namespace
}  // namespace meshcast::bench
