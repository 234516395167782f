#include "controller/memory_check.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/mesh.h"
#include "planner/sharding.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// 3 hosts x 2 devices; a 4x6 int32 tensor (96 B) split by rows over hosts
// 0-1 (S0R on a 2x2 mesh: each device holds its host's 48 B half, so 96 B
// per host), replicated onto host 2 (RR: 96 B on each of its 2 devices).
ReshardProblem RowsToReplicas() {
  ReshardProblem problem;
  problem.tensor.shape = {4, 6};
  problem.tensor.dtype = DType::kInt32;
  problem.src_mesh = {{2, 2}, {0, 1, 2, 3}};
  problem.src_spec = *ShardingSpec::Parse("S0R");
  problem.dst_mesh = {{1, 2}, {4, 5}};
  problem.dst_spec = *ShardingSpec::Parse("RR");
  return problem;
}

Topology ThreeHosts() {
  Topology topology;
  topology.num_hosts = 3;
  topology.devices_per_host = 2;
  return topology;
}

WorkerRecord Worker(const std::string& name, int host, int64_t memory) {
  WorkerRecord record;
  record.name = name;
  record.host_index = host;
  record.num_devices = 2;
  record.memory_bytes = memory;
  return record;
}

TEST(MemoryCheckTest, TileBytesPerHostCountsSourceAndDestination) {
  EXPECT_THAT(TileBytesPerHost(RowsToReplicas(), ThreeHosts()),
              ElementsAre(96, 96, 192));
  // A device in both meshes holds both tiles.
  ReshardProblem same = RowsToReplicas();
  same.dst_mesh = {{1, 2}, {0, 1}};
  EXPECT_THAT(TileBytesPerHost(same, ThreeHosts()), ElementsAre(96 + 192, 96, 0));
}

TEST(MemoryCheckTest, RefusesTheFirstWorkerThatCannotHoldItsTiles) {
  const std::vector<WorkerRecord> roomy = {
      Worker("w0", 0, 96), Worker("w1", 1, 1 << 20), Worker("w2", 2, 192)};
  EXPECT_TRUE(CheckTilesFitWorkers(RowsToReplicas(), ThreeHosts(), roomy).ok());

  std::vector<WorkerRecord> tight = roomy;
  tight[2].memory_bytes = 191;
  const absl::Status status =
      CheckTilesFitWorkers(RowsToReplicas(), ThreeHosts(), tight);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("the job's tiles need 192 B on worker w2 (host 2), "
                        "which reported 191 B of memory"));
}

TEST(MemoryCheckTest, WorkersThatReportNoMemoryAreNotChecked) {
  const std::vector<WorkerRecord> unknown = {
      Worker("w0", 0, 0), Worker("w1", 1, 0), Worker("w2", 2, 0)};
  EXPECT_TRUE(
      CheckTilesFitWorkers(RowsToReplicas(), ThreeHosts(), unknown).ok());
}

}  // namespace
}  // namespace meshcast
