#include "worker/device_spec.h"

#include "gtest/gtest.h"

namespace meshcast::worker {
namespace {

TEST(DeviceSpecTest, ParsesCpuCounts) {
  auto spec = ParseDeviceSpec("cpu:8");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->kind, "cpu");
  EXPECT_EQ(spec->count, 8);
  EXPECT_EQ(ParseDeviceSpec("")->count, kDefaultCpuDevices);
  EXPECT_EQ(ParseDeviceSpec("cpu")->count, kDefaultCpuDevices);
}

TEST(DeviceSpecTest, RejectsBadValuesWithTheFlagName) {
  for (const char* bad : {"cpu:0", "cpu:x", "cpu:-2", "tpu:4", "4"}) {
    auto spec = ParseDeviceSpec(bad);
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find("--devices"), std::string::npos);
  }
}

TEST(DeviceSpecTest, CudaIsNotImplementedYet) {
  for (const char* cuda : {"cuda", "cuda:0,2", "cuda:0x4"}) {
    auto spec = ParseDeviceSpec(cuda);
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(spec.status().message().find("not implemented"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace meshcast::worker
