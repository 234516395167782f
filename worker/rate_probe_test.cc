#include "worker/rate_probe.h"

#include <cmath>

#include "gtest/gtest.h"

namespace meshcast::worker {
namespace {

ProbeOptions Quick() {
  ProbeOptions options;
  options.budget = absl::Milliseconds(60);
  options.copy_bytes = int64_t{4} << 20;
  options.gemm_size = 64;
  return options;
}

// Plausible figures for any machine that can run the tests: a copy
// capacity between 100 MB/s and 10 TB/s, a GEMM rate between 10 MFLOP/s
// and 10 TFLOP/s per device.
TEST(RateProbeTest, MeasuresPlausibleRates) {
  for (int devices : {1, 3}) {
    absl::StatusOr<ProbedRates> rates = ProbeCpuRates(devices, Quick());
    ASSERT_TRUE(rates.ok()) << rates.status();
    EXPECT_GT(rates->host_copy_bytes_per_second, 1e8) << devices;
    EXPECT_LT(rates->host_copy_bytes_per_second, 1e13) << devices;
    EXPECT_GT(rates->device_flops, 1e7) << devices;
    EXPECT_LT(rates->device_flops, 1e13) << devices;
  }
}

// A budget shorter than one pass still measures (each thread runs once),
// and the probe takes about its budget, not much more.
TEST(RateProbeTest, HonoursItsBudget) {
  ProbeOptions tiny = Quick();
  tiny.budget = absl::Microseconds(1);
  absl::StatusOr<ProbedRates> rates = ProbeCpuRates(2, tiny);
  ASSERT_TRUE(rates.ok()) << rates.status();
  EXPECT_GT(rates->host_copy_bytes_per_second, 0);
  EXPECT_GT(rates->device_flops, 0);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(ProbeCpuRates(2, Quick()).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(RateProbeTest, RejectsBadOptionsNamingThem) {
  EXPECT_EQ(ProbeCpuRates(0, Quick()).status().code(),
            absl::StatusCode::kInvalidArgument);
  ProbeOptions bad = Quick();
  bad.gemm_size = 4;
  const absl::Status status = ProbeCpuRates(1, bad).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("gemm_size 4 (>= 16)"), std::string::npos)
      << status;
}

}  // namespace
}  // namespace meshcast::worker
