#include "cli/worker_devices.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Case {
  std::string spec;
  std::string kind;
  int count;
};

TEST(WorkerDevicesTest, ParsesEveryForm) {
  for (const Case& c :
       {Case{"cpu:4", "cpu", 4}, Case{"cpu:1", "cpu", 1}, Case{"cpu", "cpu", 4},
        Case{"cuda", "cuda", 0}, Case{"cuda:0", "cuda", 1},
        Case{"cuda:0,2", "cuda", 2}, Case{"cuda:0x4", "cuda", 4},
        Case{"cuda:0x2,1x3", "cuda", 5}, Case{" cpu:8 ", "cpu", 8}}) {
    absl::StatusOr<WorkerDevices> devices = ParseWorkerDevices(c.spec);
    ASSERT_TRUE(devices.ok()) << c.spec << ": " << devices.status();
    EXPECT_EQ(devices->kind, c.kind) << c.spec;
    EXPECT_EQ(devices->count, c.count) << c.spec;
    EXPECT_EQ(devices->spec, std::string(absl::StripAsciiWhitespace(c.spec)));
  }
}

TEST(WorkerDevicesTest, RefusesMalformedSpecsNamingTheFlag) {
  for (const std::string spec :
       {"", "tpu:4", "cpu:", "cpu:0", "cpu:-1", "cpu:1025", "cpu:4x",
        "cuda:", "cuda:a", "cuda:0x0", "cuda:0x", "cuda:-1", "cuda:1024",
        "cuda:0,,1", "cuda:0x1025", "cuda:0x1000,1x100", "gpu"}) {
    absl::StatusOr<WorkerDevices> devices = ParseWorkerDevices(spec);
    ASSERT_FALSE(devices.ok()) << spec;
    EXPECT_EQ(devices.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(devices.status().message());
    EXPECT_THAT(message, StartsWith(absl::StrCat("--devices: '", spec, "'")));
    EXPECT_THAT(message, HasSubstr("expected cpu:N"));
  }
}

TEST(WorkerDevicesTest, DevicesPerWorkerIsTheCpuShorthand) {
  absl::StatusOr<WorkerDevices> devices = ResolveWorkerDevices("", 6, true);
  ASSERT_TRUE(devices.ok()) << devices.status();
  EXPECT_EQ(devices->spec, "cpu:6");
  EXPECT_EQ(devices->count, 6);
  // Neither flag: the default.
  devices = ResolveWorkerDevices("", kDefaultCpuDevicesPerWorker, false);
  ASSERT_TRUE(devices.ok());
  EXPECT_EQ(devices->spec, "cpu:4");
}

TEST(WorkerDevicesTest, BothFlagsMustAgree) {
  absl::StatusOr<WorkerDevices> devices =
      ResolveWorkerDevices("cpu:8", 8, true);
  ASSERT_TRUE(devices.ok()) << devices.status();
  EXPECT_EQ(devices->spec, "cpu:8");

  // --devices alone wins over --devices-per-worker's default.
  devices = ResolveWorkerDevices("cuda:0x8", 4, false);
  ASSERT_TRUE(devices.ok()) << devices.status();
  EXPECT_EQ(devices->spec, "cuda:0x8");
  EXPECT_EQ(devices->count, 8);

  for (const auto& [spec, k] :
       {std::pair<const char*, int>{"cpu:8", 4}, {"cuda:0x4", 4}}) {
    devices = ResolveWorkerDevices(spec, k, true);
    ASSERT_FALSE(devices.ok()) << spec;
    EXPECT_EQ(devices.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        std::string(devices.status().message()),
        HasSubstr(absl::StrCat("--devices ", spec, " and --devices-per-worker ",
                               k, " disagree")));
  }
}

TEST(WorkerDevicesTest, DevicesPerWorkerRange) {
  for (int k : {0, -3, 1025}) {
    absl::StatusOr<WorkerDevices> devices = ResolveWorkerDevices("", k, true);
    ASSERT_FALSE(devices.ok()) << k;
    EXPECT_EQ(devices.status().message(),
              absl::StrCat("--devices-per-worker: must be 1..1024, got ", k));
  }
}

}  // namespace
}  // namespace meshcast::cli
