#include "planner/topology.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(TopologyTest, FromGbpsConvertsToBytesPerSecond) {
  const Topology topology = Topology::FromGbps(5, 4, 10, 1200);
  EXPECT_EQ(topology.num_hosts, 5);
  EXPECT_EQ(topology.devices_per_host, 4);
  EXPECT_DOUBLE_EQ(topology.inter_host_bandwidth, 1.25e9);
  EXPECT_DOUBLE_EQ(topology.intra_host_bandwidth, 150e9);
  EXPECT_EQ(topology.num_devices(), 20);
  EXPECT_TRUE(topology.Validate().ok());
}

TEST(TopologyTest, DevicesAreNumberedHostMajor) {
  const Topology topology = Topology::FromGbps(3, 4, 10, 100);
  EXPECT_EQ(topology.HostOf(0), 0);
  EXPECT_EQ(topology.HostOf(3), 0);
  EXPECT_EQ(topology.HostOf(4), 1);
  EXPECT_EQ(topology.HostOf(11), 2);
  EXPECT_TRUE(topology.SameHost(4, 7));
  EXPECT_FALSE(topology.SameHost(3, 4));
}

TEST(TopologyTest, ValidateRejectsBadValuesAndNamesTheField) {
  Topology topology;
  topology.num_hosts = 0;
  EXPECT_THAT(topology.Validate().message(), HasSubstr("num_hosts"));
  topology = Topology();
  topology.devices_per_host = -1;
  EXPECT_THAT(topology.Validate().message(), HasSubstr("devices_per_host"));
  topology = Topology();
  topology.inter_host_bandwidth = 0;
  EXPECT_THAT(topology.Validate().message(), HasSubstr("inter_host_bandwidth"));
  topology = Topology();
  topology.intra_host_bandwidth = std::numeric_limits<double>::infinity();
  EXPECT_THAT(topology.Validate().message(), HasSubstr("intra_host_bandwidth"));
  topology = Topology();
  topology.inter_host_latency = -1e-6;
  EXPECT_THAT(topology.Validate().message(), HasSubstr("inter_host_latency"));
  topology = Topology();
  topology.intra_host_latency = 0;  // zero latency is a valid ideal model
  EXPECT_TRUE(topology.Validate().ok());
}

TEST(TopologyTest, CpuCostsDefaultToOffAndValidate) {
  Topology topology;
  EXPECT_EQ(topology.host_copy_bandwidth, 0);
  EXPECT_EQ(topology.transfer_setup_seconds, 0);
  EXPECT_TRUE(topology.Validate().ok());
  topology.host_copy_bandwidth = 8e9;
  topology.transfer_setup_seconds = 500e-6;
  EXPECT_TRUE(topology.Validate().ok()) << topology.Validate();
}

TEST(TopologyTest, ValidateRejectsBadCpuCostsAndNamesTheField) {
  for (double bad : {-1.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    Topology topology;
    topology.host_copy_bandwidth = bad;
    EXPECT_THAT(topology.Validate().message(),
                HasSubstr("host_copy_bandwidth must be >= 0"))
        << bad;
    EXPECT_THAT(topology.Validate().message(), HasSubstr("0 = unlimited"));
    topology = Topology();
    topology.transfer_setup_seconds = bad;
    EXPECT_THAT(topology.Validate().message(),
                HasSubstr("transfer_setup_seconds must be >= 0"))
        << bad;
  }
}

TEST(TopologyTest, ToStringShowsCpuCostsOnlyWhenSet) {
  Topology topology = Topology::FromGbps(2, 4, 1, 80);
  EXPECT_THAT(topology.ToString(), Not(HasSubstr("copy")));
  EXPECT_THAT(topology.ToString(), Not(HasSubstr("setup")));
  topology.host_copy_bandwidth = 8e9;  // 64 Gbps
  EXPECT_THAT(topology.ToString(), HasSubstr("host copy 64 Gbps"));
  EXPECT_THAT(topology.ToString(), Not(HasSubstr("setup")));
  topology.transfer_setup_seconds = 500e-6;
  EXPECT_THAT(topology.ToString(), HasSubstr("transfer setup 500 us"));
}

TEST(TopologyTest, ToStringUsesHumanUnits) {
  const std::string text = Topology::FromGbps(5, 4, 10, 1200).ToString();
  EXPECT_THAT(text, HasSubstr("5 hosts x 4 devices"));
  EXPECT_THAT(text, HasSubstr("10 Gbps"));
  EXPECT_THAT(text, HasSubstr("1200 Gbps"));
}

TEST(TopologyTest, DeviceRatesDefaultToTheCpuPreset) {
  const Topology topology;
  const absl::StatusOr<DeviceRates> cpu = DeviceRatesFor("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(topology.device_flops, cpu->flops);
  EXPECT_EQ(topology.device_memory_bandwidth, cpu->memory_bandwidth);
  EXPECT_EQ(cpu->flops, 50e9);
  EXPECT_EQ(cpu->memory_bandwidth, 10e9);
  // The default description stays as it was.
  EXPECT_THAT(topology.ToString(), Not(HasSubstr("FLOP")));
}

TEST(TopologyTest, DeviceRatesForGpuPresetsUsePublishedPeaks) {
  const absl::StatusOr<DeviceRates> h100 = DeviceRatesFor("h100");
  ASSERT_TRUE(h100.ok()) << h100.status();
  EXPECT_EQ(h100->flops, 989e12);
  EXPECT_EQ(h100->memory_bandwidth, 3.35e12);
  const absl::StatusOr<DeviceRates> h200 = DeviceRatesFor("H200");
  ASSERT_TRUE(h200.ok()) << h200.status();
  EXPECT_EQ(h200->flops, 989e12);
  EXPECT_EQ(h200->memory_bandwidth, 4.8e12);
  const absl::StatusOr<DeviceRates> v100 = DeviceRatesFor("v100");
  ASSERT_TRUE(v100.ok()) << v100.status();
  EXPECT_EQ(v100->flops, 125e12);
  EXPECT_EQ(v100->memory_bandwidth, 900e9);
  Topology topology = Topology::FromGbps(2, 8, 400, 7200);
  topology.SetDeviceRates(*h100);
  EXPECT_TRUE(topology.Validate().ok()) << topology.Validate();
  EXPECT_EQ(topology.device_rates().flops, 989e12);
  EXPECT_THAT(topology.ToString(),
              HasSubstr("device 989 TFLOP/s, memory 3350 GB/s"));
}

TEST(TopologyTest, DeviceRatesForRejectsUnknownKinds) {
  const absl::StatusOr<DeviceRates> rates = DeviceRatesFor("tpu");
  ASSERT_FALSE(rates.ok());
  EXPECT_EQ(rates.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rates.status().message(), HasSubstr("\"tpu\""));
  EXPECT_THAT(rates.status().message(), HasSubstr("cpu, v100, h100, h200"));
}

TEST(TopologyTest, ValidateRejectsBadDeviceRatesAndNamesTheField) {
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    Topology topology;
    topology.device_flops = bad;
    EXPECT_THAT(topology.Validate().message(), HasSubstr("device_flops"))
        << bad;
    topology = Topology();
    topology.device_memory_bandwidth = bad;
    EXPECT_THAT(topology.Validate().message(),
                HasSubstr("device_memory_bandwidth"))
        << bad;
  }
}

TEST(TopologyTest, ParseClusterShape) {
  auto shape = ParseClusterShape("5x4");
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->first, 5);
  EXPECT_EQ(shape->second, 4);
  shape = ParseClusterShape("256x8");
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(shape->first, 256);
  EXPECT_EQ(shape->second, 8);
}

TEST(TopologyTest, ParseClusterShapeErrorsExplainTheForm) {
  for (const char* bad :
       {"", "5", "5x", "x4", "0x4", "5x0", "5x4x2", "ax4", "-1x4"}) {
    auto shape = ParseClusterShape(bad);
    ASSERT_FALSE(shape.ok()) << bad;
    EXPECT_THAT(shape.status().message(), HasSubstr("expected HxG")) << bad;
  }
}

}  // namespace
}  // namespace meshcast
