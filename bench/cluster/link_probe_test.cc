#include "bench/cluster/link_probe.h"

#include <cstdint>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::bench {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

TEST(MeasureMemcpyTest, ReportsOnePositiveRatePerRepeat) {
  absl::StatusOr<BandwidthSample> sample = MeasureMemcpy(8 << 20, 3);
  ASSERT_TRUE(sample.ok()) << sample.status();
  ASSERT_THAT(sample->runs, SizeIs(3));
  for (double rate : sample->runs) EXPECT_GT(rate, 0);
  EXPECT_GE(sample->best_bytes_per_second, sample->median_bytes_per_second);
  // Any machine copies faster than 10 MB/s, and none faster than 10 TB/s.
  EXPECT_GT(sample->median_bytes_per_second, 1e7);
  EXPECT_LT(sample->median_bytes_per_second, 1e13);
}

TEST(MeasureMemcpyTest, RejectsBadArgumentsNamingThem) {
  absl::StatusOr<BandwidthSample> no_bytes = MeasureMemcpy(0, 3);
  EXPECT_EQ(no_bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_bytes.status().message(), HasSubstr("bytes"));
  absl::StatusOr<BandwidthSample> no_repeats = MeasureMemcpy(1024, 0);
  EXPECT_EQ(no_repeats.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_repeats.status().message(), HasSubstr("repeats"));
}

TEST(MeasureLoopbackTcpTest, DeliversEveryByteOnOneStream) {
  TcpProbeOptions options;
  options.bytes = 16 << 20;
  options.send_bytes = 1 << 20;
  options.repeats = 2;
  absl::StatusOr<BandwidthSample> sample = MeasureLoopbackTcp(options);
  ASSERT_TRUE(sample.ok()) << sample.status();
  ASSERT_THAT(sample->runs, SizeIs(2));
  EXPECT_GT(sample->median_bytes_per_second, 1e6);
  EXPECT_GE(sample->best_bytes_per_second, sample->median_bytes_per_second);
}

TEST(MeasureLoopbackTcpTest, PayloadNotAMultipleOfTheSendSizeOnManyStreams) {
  TcpProbeOptions options;
  options.bytes = (3 << 20) + 12345;  // a partial last send
  options.send_bytes = 1 << 20;
  options.streams = 3;
  options.repeats = 1;
  absl::StatusOr<BandwidthSample> sample = MeasureLoopbackTcp(options);
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_THAT(sample->runs, SizeIs(1));
  EXPECT_GT(sample->runs[0], 0);
}

TEST(MeasureLoopbackTcpTest, RejectsBadOptionsNamingTheField) {
  TcpProbeOptions options;
  options.streams = 0;
  absl::StatusOr<BandwidthSample> sample = MeasureLoopbackTcp(options);
  EXPECT_EQ(sample.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sample.status().message(), HasSubstr("streams"));

  options = TcpProbeOptions();
  options.send_bytes = -1;
  sample = MeasureLoopbackTcp(options);
  EXPECT_EQ(sample.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sample.status().message(), HasSubstr("send_bytes"));

  options = TcpProbeOptions();
  options.bytes = 0;
  sample = MeasureLoopbackTcp(options);
  EXPECT_EQ(sample.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sample.status().message(), HasSubstr("bytes"));
}

}  // namespace
}  // namespace meshcast::bench
