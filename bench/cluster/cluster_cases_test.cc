#include "bench/cluster/cluster_cases.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::bench {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const ClusterCase& Find(const std::vector<ClusterCase>& cases,
                        const std::string& name) {
  for (const ClusterCase& c : cases) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no case " << name;
  return cases.front();
}

// The public suite file's cases scaled to size_mib.
std::vector<ClusterCase> Scaled(double size_mib) {
  absl::StatusOr<std::vector<PublicSuiteCase>> suite = LoadPublicSuite();
  EXPECT_TRUE(suite.ok()) << suite.status();
  return ScaledPublicCases(suite.value_or(std::vector<PublicSuiteCase>{}),
                           size_mib);
}

TEST(ScaledPublicCasesTest, ScalesTheLastDimensionOnly) {
  const std::vector<ClusterCase> cases = Scaled(64);
  ASSERT_EQ(cases.size(), 15u);  // 8 cases + 7 1-to-m targets
  const ClusterCase& case1 = Find(cases, "case1");
  EXPECT_THAT(case1.shape, ElementsAre(1024, 1024, 16));
  EXPECT_EQ(case1.num_bytes(), 64 << 20);
  // 1-to-m is half the size, as in the paper.
  EXPECT_EQ(Find(cases, "1-to-m(2,2)").num_bytes(), 32 << 20);
  EXPECT_THAT(Find(cases, "case6").shape, ElementsAre(3072, 1024, 5));
  // The full size reproduces the paper's tensors.
  const std::vector<ClusterCase> full = Scaled(2048);
  EXPECT_EQ(Find(full, "case4").num_bytes(), int64_t{2} << 30);
  // A tiny size keeps at least one element in the last dimension.
  const std::vector<ClusterCase> tiny = Scaled(0.01);
  EXPECT_THAT(Find(tiny, "case2").shape, ElementsAre(1024, 1024, 1));
}

TEST(ScaledPublicCasesTest, MeshesAndHostsMatchThePaper) {
  const std::vector<ClusterCase> cases = Scaled(32);
  EXPECT_EQ(Find(cases, "case7").MeshesText(), "(1,4)->(2,4)");
  EXPECT_EQ(Find(cases, "case7").hosts_needed(), 3);
  EXPECT_EQ(Find(cases, "case6").hosts_needed(), 5);
  EXPECT_EQ(Find(cases, "1-to-m(4,2)").MeshesText(), "(1,1)->(4,2)");
  EXPECT_EQ(Find(cases, "1-to-m(1,3)").devices_per_host_needed(), 3);
  EXPECT_EQ(Find(cases, "case4").src_spec, "RS01R");
  EXPECT_EQ(Find(cases, "case4").dst_spec, "S01RR");
}

TEST(SelectCasesTest, KeepsTheOrderGivenAndNamesWithCommas) {
  const std::vector<ClusterCase> all = Scaled(32);
  absl::StatusOr<std::vector<ClusterCase>> selected =
      SelectCases(all, "case7, 1-to-m(2,2),case1");
  ASSERT_TRUE(selected.ok()) << selected.status();
  ASSERT_EQ(selected->size(), 3u);
  EXPECT_EQ((*selected)[0].name, "case7");
  EXPECT_EQ((*selected)[1].name, "1-to-m(2,2)");
  EXPECT_EQ((*selected)[2].name, "case1");
  EXPECT_EQ(SelectCases(all, "all")->size(), all.size());
}

TEST(SelectCasesTest, UnknownNamesAreErrorsListingTheAllowedOnes) {
  absl::StatusOr<std::vector<ClusterCase>> selected =
      SelectCases(Scaled(32), "case1,case8");
  EXPECT_EQ(selected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(selected.status().message(), HasSubstr("--cases"));
  EXPECT_THAT(selected.status().message(), HasSubstr("case8"));
  EXPECT_THAT(selected.status().message(), HasSubstr("1-to-m(4,2)"));
  EXPECT_FALSE(SelectCases(Scaled(32), ",").ok());
}

TEST(PinnedReshardSpecTest, PinsSourceFirstAndDestinationOnTheNextHosts) {
  const std::vector<ClusterCase> cases = Scaled(32);
  const ClusterCase& c = Find(cases, "case7");
  absl::StatusOr<v1::ReshardSpec> spec =
      PinnedReshardSpec(c, "broadcast", 4, 4);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->tensor().shape(), ElementsAre(1024, 1024, 8));
  EXPECT_EQ(spec->tensor().dtype(), v1::DTYPE_INT32);
  EXPECT_THAT(spec->src_mesh().shape(), ElementsAre(1, 4));
  EXPECT_THAT(spec->src_mesh().devices(), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(spec->dst_mesh().shape(), ElementsAre(2, 4));
  EXPECT_THAT(spec->dst_mesh().devices(),
              ElementsAre(4, 5, 6, 7, 8, 9, 10, 11));
  EXPECT_EQ(spec->src_spec().text(), "S1RR");
  EXPECT_EQ(spec->dst_spec().text(), "RRR");
  EXPECT_EQ(spec->strategy(), "broadcast");
}

TEST(PinnedReshardSpecTest, UsesTheFirstDevicesOfWiderHosts) {
  const std::vector<ClusterCase> cases = Scaled(32);
  const ClusterCase& c = Find(cases, "1-to-m(2,2)");
  absl::StatusOr<v1::ReshardSpec> spec = PinnedReshardSpec(c, "meshcast", 3, 8);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->src_mesh().devices(), ElementsAre(0));
  EXPECT_THAT(spec->dst_mesh().devices(), ElementsAre(8, 9, 16, 17));
}

TEST(PinnedReshardSpecTest, RefusesAClusterTooSmall) {
  const std::vector<ClusterCase> cases = Scaled(32);
  absl::StatusOr<v1::ReshardSpec> spec =
      PinnedReshardSpec(Find(cases, "case6"), "meshcast", 4, 4);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("case6"));
  EXPECT_THAT(spec.status().message(), HasSubstr("5 hosts"));
  EXPECT_FALSE(PinnedReshardSpec(Find(cases, "case1"), "meshcast", 4, 2).ok());
}

TEST(TinyReshardSpecTest, OneDeviceToOneDevicePlacedByTheController) {
  const v1::ReshardSpec spec = TinyReshardSpec(4096);
  EXPECT_THAT(spec.tensor().shape(), ElementsAre(1024));
  EXPECT_THAT(spec.src_mesh().shape(), ElementsAre(1, 1));
  EXPECT_TRUE(spec.src_mesh().devices().empty());
  EXPECT_TRUE(spec.dst_mesh().devices().empty());
  EXPECT_EQ(spec.src_spec().text(), "R");
  EXPECT_THAT(TinyReshardSpec(2).tensor().shape(), ElementsAre(1));
}

}  // namespace
}  // namespace meshcast::bench
