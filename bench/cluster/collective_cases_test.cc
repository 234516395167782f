#include "bench/cluster/collective_cases.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/kinds/collective/collective_kind.h"

namespace meshcast::bench {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CollectiveOpsTest, ParsesListsInOrderAndAll) {
  absl::StatusOr<std::vector<std::string>> ops =
      ParseCollectiveOps("broadcast,all_reduce");
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_THAT(*ops, ElementsAre("broadcast", "all_reduce"));
  ops = ParseCollectiveOps("all");
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_THAT(*ops, ElementsAre("all_reduce", "all_gather", "reduce_scatter",
                                "all_to_all", "broadcast"));
}

TEST(CollectiveOpsTest, RejectsUnknownAndEmptyNamingTheAllowedOnes) {
  absl::StatusOr<std::vector<std::string>> ops =
      ParseCollectiveOps("all_reduce,allreduce");
  ASSERT_FALSE(ops.ok());
  EXPECT_THAT(ops.status().message(), HasSubstr("'allreduce'"));
  EXPECT_THAT(ops.status().message(), HasSubstr("reduce_scatter"));
  EXPECT_FALSE(ParseCollectiveOps("").ok());
}

// The bench computes the baseline's busbw itself; it must agree with the
// factor the `collective` job kind reports meshcast's busbw with.
TEST(BusFactorTest, AgreesWithTheCollectiveKind) {
  for (const std::string& op : CollectiveOps()) {
    for (int n : {1, 2, 3, 4, 8, 16}) {
      EXPECT_NEAR(BusFactor(op, n), BusBandwidthFactor(op, n), 1e-12)
          << op << " on " << n << " ranks";
    }
  }
}

TEST(BusFactorTest, NcclTestsValues) {
  EXPECT_DOUBLE_EQ(BusFactor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(BusFactor("all_gather", 4), 0.75);
  EXPECT_DOUBLE_EQ(BusFactor("reduce_scatter", 2), 0.5);
  EXPECT_DOUBLE_EQ(BusFactor("all_to_all", 8), 0.875);
  EXPECT_DOUBLE_EQ(BusFactor("broadcast", 4), 1.0);
  EXPECT_TRUE(std::isnan(BusFactor("gather", 4)));
  EXPECT_TRUE(std::isnan(BusFactor("all_reduce", 0)));
}

TEST(CollectiveCountTest, RoundsDownToRanksWhereTheBufferSplits) {
  // 1 MiB of float32 = 262144 elements; 3 ranks: 262143 for split ops.
  EXPECT_EQ(CollectiveCount("all_reduce", 1 << 20, 4, 3), 262144);
  EXPECT_EQ(CollectiveCount("broadcast", 1 << 20, 4, 3), 262144);
  EXPECT_EQ(CollectiveCount("all_gather", 1 << 20, 4, 3), 262143);
  EXPECT_EQ(CollectiveCount("reduce_scatter", 1 << 20, 4, 3), 262143);
  EXPECT_EQ(CollectiveCount("all_to_all", 1 << 20, 4, 3), 262143);
  EXPECT_EQ(CollectiveCount("all_to_all", 1 << 20, 4, 4), 262144);
  // Partial elements drop.
  EXPECT_EQ(CollectiveCount("all_reduce", 10, 4, 2), 2);
  EXPECT_EQ(CollectiveCount("gather", 1 << 20, 4, 2), 0);
  EXPECT_EQ(CollectiveCount("all_reduce", 0, 4, 2), 0);
}

TEST(SizeListTest, ParsesUnitsAndRejectsBadEntries) {
  absl::StatusOr<std::vector<int64_t>> sizes =
      ParseSizeList("1MiB,16MiB,4096,1KB", "collective_sizes");
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  EXPECT_THAT(*sizes,
              ElementsAre(int64_t{1} << 20, int64_t{16} << 20, 4096, 1000));
  absl::StatusOr<std::vector<int64_t>> bad =
      ParseSizeList("1MiB,lots", "collective_sizes");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("--collective_sizes"));
  EXPECT_FALSE(ParseSizeList("0", "collective_sizes").ok());
  EXPECT_FALSE(ParseSizeList("", "collective_sizes").ok());
}

TEST(MeshShapeTest, ParsesRowsByCols) {
  absl::StatusOr<MeshShape> mesh = ParseMeshShape("2x4");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->rows, 2);
  EXPECT_EQ(mesh->cols, 4);
  EXPECT_EQ(mesh->ranks(), 8);
  EXPECT_EQ(mesh->ToString(), "2x4");
  for (const char* bad : {"", "4", "4x", "x1", "0x1", "2x2x2", "axb", "-1x2"}) {
    EXPECT_FALSE(ParseMeshShape(bad).ok()) << bad;
  }
}

TEST(PinnedCollectiveSpecTest, PinsRowsToHostsRowMajor) {
  absl::StatusOr<v1::JobSpec> spec = PinnedCollectiveSpec(
      "reduce_scatter", 16 << 20, MeshShape{2, 2}, /*num_hosts=*/4,
      /*devices_per_host=*/4, /*iterations=*/5);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->has_collective());
  const v1::CollectiveSpec& c = spec->collective();
  EXPECT_EQ(c.op(), "reduce_scatter");
  EXPECT_EQ(c.size(), "16777216");
  EXPECT_EQ(c.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(c.reduction(), "sum");
  EXPECT_EQ(c.iterations(), 5);
  EXPECT_THAT(c.mesh().shape(), ElementsAre(2, 2));
  // Host 0 devices 0,1; host 1 devices 4,5.
  EXPECT_THAT(c.mesh().devices(), ElementsAre(0, 1, 4, 5));
  EXPECT_EQ(spec->verify(), v1::VERIFY_MODE_FULL);
}

TEST(PinnedCollectiveSpecTest, RefusesMeshesTheClusterCannotHold) {
  absl::StatusOr<v1::JobSpec> spec =
      PinnedCollectiveSpec("all_reduce", 1 << 20, MeshShape{8, 1}, 4, 4, 1);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("8x1 needs 8 hosts"));
  EXPECT_FALSE(
      PinnedCollectiveSpec("all_reduce", 1 << 20, MeshShape{1, 8}, 4, 4, 1)
          .ok());
  EXPECT_FALSE(
      PinnedCollectiveSpec("all_reduce", 1 << 20, MeshShape{1, 1}, 4, 4, 1)
          .ok());
  EXPECT_FALSE(
      PinnedCollectiveSpec("gather", 1 << 20, MeshShape{4, 1}, 4, 4, 1).ok());
  EXPECT_FALSE(
      PinnedCollectiveSpec("all_reduce", 1 << 20, MeshShape{4, 1}, 4, 4, 0)
          .ok());
}

}  // namespace
}  // namespace meshcast::bench
