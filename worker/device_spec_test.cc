#include "worker/device_spec.h"

#include <string>
#include <vector>

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

TEST(DeviceSpecTest, ParsesCudaForms) {
  auto all = ParseDeviceSpec("cuda");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->kind, "cuda");
  EXPECT_TRUE(all->all_visible_gpus);
  EXPECT_TRUE(all->gpus.empty());

  auto listed = ParseDeviceSpec("cuda:0,2");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->gpus, (std::vector<int>{0, 2}));
  EXPECT_EQ(listed->count, 2);
  EXPECT_FALSE(listed->all_visible_gpus);

  auto virtual_devices = ParseDeviceSpec("cuda:0x4");
  ASSERT_TRUE(virtual_devices.ok()) << virtual_devices.status();
  EXPECT_EQ(virtual_devices->gpus, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(virtual_devices->count, 4);

  auto mixed = ParseDeviceSpec("cuda:1x2,0");
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->gpus, (std::vector<int>{1, 1, 0}));
  EXPECT_EQ(DeviceSpecToString(*mixed), "cuda:1x2,0");
  EXPECT_EQ(DeviceSpecToString(*virtual_devices), "cuda:0x4");
  EXPECT_EQ(DeviceSpecToString(*listed), "cuda:0,2");
  EXPECT_EQ(DeviceSpecToString(*ParseDeviceSpec("cpu:3")), "cpu:3");
}

TEST(DeviceSpecTest, RejectsBadCudaSpecsWithTheFlagName) {
  for (const char* bad : {"cuda:", "cuda:a", "cuda:0,0", "cuda:0x0", "cuda:-1",
                          "cuda:0x", "cuda:0,,1", "cuda0", "cuda:0x2000"}) {
    auto spec = ParseDeviceSpec(bad);
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(spec.status().message().find("--devices"), std::string::npos);
  }
  // A repeated GPU points at the virtual-device syntax.
  EXPECT_NE(ParseDeviceSpec("cuda:0,0").status().message().find("IDxK"),
            std::string::npos);
}

TEST(DeviceSpecTest, ResolvesVisibleGpus) {
  auto all = ResolveGpuDevices(*ParseDeviceSpec("cuda"), 3);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->gpus, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(all->count, 3);
  EXPECT_FALSE(all->all_visible_gpus);

  auto listed = ResolveGpuDevices(*ParseDeviceSpec("cuda:0,2"), 3);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->gpus, (std::vector<int>{0, 2}));

  auto missing = ResolveGpuDevices(*ParseDeviceSpec("cuda:0,2"), 2);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find("GPU 2 is not visible"),
            std::string::npos);
  auto none = ResolveGpuDevices(*ParseDeviceSpec("cuda:0x4"), 0);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("no CUDA GPU"), std::string::npos);

  // CPU specs pass through whatever the GPU count.
  auto cpu = ResolveGpuDevices(*ParseDeviceSpec("cpu:2"), 0);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->count, 2);
}

}  // namespace
}  // namespace meshcast::worker
