#include "planner/sharding.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ShardingSpec MustParse(const std::string& text) {
  auto spec = ShardingSpec::Parse(text);
  EXPECT_TRUE(spec.ok()) << text << ": " << spec.status();
  return spec.ok() ? *spec : ShardingSpec();
}

std::vector<std::vector<int>> Axes(const ShardingSpec& spec) {
  std::vector<std::vector<int>> axes;
  for (const DimSharding& dim : spec.dims) axes.push_back(dim.mesh_axes);
  return axes;
}

using AxesList = std::vector<std::vector<int>>;

TEST(ShardingSpecParseTest, CompactAndCommaForms) {
  EXPECT_EQ(Axes(MustParse("S0RR")), (AxesList{{0}, {}, {}}));
  EXPECT_EQ(Axes(MustParse("S0,R,R")), (AxesList{{0}, {}, {}}));
  EXPECT_EQ(Axes(MustParse("S01")), (AxesList{{0, 1}}));
  EXPECT_EQ(Axes(MustParse("RS01R")), (AxesList{{}, {0, 1}, {}}));
  EXPECT_EQ(Axes(MustParse("R")), (AxesList{{}}));
  EXPECT_EQ(Axes(MustParse("S1S0")), (AxesList{{1}, {0}}));
  EXPECT_EQ(Axes(MustParse("S0,S1")), (AxesList{{0}, {1}}));
  EXPECT_EQ(Axes(MustParse("S10R")), (AxesList{{1, 0}, {}}));
  EXPECT_EQ(Axes(MustParse(" S0, R ,R ")), (AxesList{{0}, {}, {}}));
  EXPECT_EQ(Axes(MustParse("s0rr")), (AxesList{{0}, {}, {}}));
  EXPECT_EQ(MustParse("S0,R,R"), MustParse("S0RR"));
}

TEST(ShardingSpecParseTest, ToStringIsCanonicalCompactForm) {
  EXPECT_EQ(MustParse("S0,R,R").ToString(), "S0RR");
  EXPECT_EQ(MustParse("r,s01,r").ToString(), "RS01R");
  EXPECT_EQ(MustParse("S1S0").ToString(), "S1S0");
  for (const char* text : {"S0RR", "RS0R", "RRS0", "S01RR", "R", "S1,S0"}) {
    const ShardingSpec spec = MustParse(text);
    EXPECT_EQ(MustParse(spec.ToString()), spec) << text;
  }
}

TEST(ShardingSpecParseTest, UnknownTokenNamesTokenPositionAndForms) {
  auto spec = ShardingSpec::Parse("S0XR");
  ASSERT_FALSE(spec.ok());
  const std::string message(spec.status().message());
  EXPECT_THAT(message, HasSubstr("unknown token 'X'"));
  EXPECT_THAT(message, HasSubstr("position 3"));
  EXPECT_THAT(message, HasSubstr("tensor dimension 1"));
  EXPECT_THAT(message, HasSubstr("R (replicated)"));
  EXPECT_THAT(message, HasSubstr("S0, S1, S01"));

  spec = ShardingSpec::Parse("S0,Q1,R");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("unknown token 'Q1'"));
  EXPECT_THAT(spec.status().message(), HasSubstr("position 4"));

  // A comma-separated entry must be exactly one token.
  spec = ShardingSpec::Parse("S0,RR");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("'RR'"));

  spec = ShardingSpec::Parse("P");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("'P' at position 1"));
}

TEST(ShardingSpecParseTest, OtherErrors) {
  auto spec = ShardingSpec::Parse("");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("empty"));
  EXPECT_THAT(spec.status().message(), HasSubstr("allowed"));
  EXPECT_FALSE(ShardingSpec::Parse("   ").ok());

  spec = ShardingSpec::Parse("S0S0");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("duplicate mesh axis 0"));
  EXPECT_THAT(spec.status().message(), HasSubstr("dimension 0 and 1"));

  spec = ShardingSpec::Parse("S00R");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("duplicate mesh axis 0"));

  spec = ShardingSpec::Parse("SR");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("names no mesh axis"));

  spec = ShardingSpec::Parse("S0,,R");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("empty token at position 4"));
}

TEST(ShardingSpecValidateTest, RankAndAxes) {
  const DeviceMesh mesh{{2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}};
  const TensorSpec tensor{{16, 8, 4}, DType::kInt32};
  EXPECT_TRUE(MustParse("S0RR").Validate(tensor, mesh).ok());
  EXPECT_TRUE(MustParse("RS01R").Validate(tensor, mesh).ok());
  absl::Status status = MustParse("S0R").Validate(tensor, mesh);
  EXPECT_THAT(status.message(), HasSubstr("has 2 dimension(s)"));
  EXPECT_THAT(status.message(), HasSubstr("16x8x4"));
  status = MustParse("S2RR").Validate(tensor, mesh);
  EXPECT_THAT(status.message(), HasSubstr("mesh axis 2"));
  EXPECT_THAT(status.message(), HasSubstr("axes 0..1"));
  // A hand-built spec may bypass Parse; Validate still catches reuse.
  ShardingSpec reused;
  reused.dims = {DimSharding{{0}}, DimSharding{{0}}, DimSharding{}};
  EXPECT_THAT(reused.Validate(tensor, mesh).message(),
              HasSubstr("more than once"));
}

TEST(ShardIntervalTest, CeilChunksPossiblyEmpty) {
  // 10 over 4: chunk 3.
  EXPECT_EQ(ShardInterval(10, 4, 0), (Interval{0, 3}));
  EXPECT_EQ(ShardInterval(10, 4, 2), (Interval{6, 9}));
  EXPECT_EQ(ShardInterval(10, 4, 3), (Interval{9, 10}));
  // 5 over 4: chunk 2, the last shard is empty.
  EXPECT_EQ(ShardInterval(5, 4, 2), (Interval{4, 5}));
  EXPECT_EQ(ShardInterval(5, 4, 3).size(), 0);
  // 3 over 8: chunk 1, shards 3.. are empty.
  EXPECT_EQ(ShardInterval(3, 8, 2), (Interval{2, 3}));
  EXPECT_EQ(ShardInterval(3, 8, 7).size(), 0);
  EXPECT_EQ(ShardInterval(12, 1, 0), (Interval{0, 12}));
}

TEST(ShardIndexTest, MixedRadixOverTheDimensionsAxes) {
  const DeviceMesh mesh{{2, 3}, {0, 1, 2, 3, 4, 5}};
  const DimSharding s01{{0, 1}};
  const DimSharding s10{{1, 0}};
  const DimSharding s1{{1}};
  const DimSharding r{};
  EXPECT_EQ(NumShards(s01, mesh), 6);
  EXPECT_EQ(NumShards(s1, mesh), 3);
  EXPECT_EQ(NumShards(r, mesh), 1);
  // Index 4 sits at coords (1, 1).
  EXPECT_EQ(ShardIndex(s01, mesh, 4), 1 * 3 + 1);
  EXPECT_EQ(ShardIndex(s10, mesh, 4), 1 * 2 + 1);
  EXPECT_EQ(ShardIndex(s10, mesh, 2), 2 * 2 + 0);
  EXPECT_EQ(ShardIndex(s1, mesh, 5), 2);
  EXPECT_EQ(ShardIndex(r, mesh, 5), 0);
}

TEST(DeviceBoxTest, S01IsAxisZeroMajor) {
  const DeviceMesh mesh{{2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}};
  const TensorSpec tensor{{16, 3}, DType::kFloat32};
  const ShardingSpec s01 = MustParse("S01R");
  const ShardingSpec s10 = MustParse("S10R");
  for (int index = 0; index < 8; ++index) {
    const std::vector<int> c = mesh.CoordsOf(index);
    const int k01 = c[0] * 4 + c[1];
    const int k10 = c[1] * 2 + c[0];
    EXPECT_EQ(DeviceBox(tensor, mesh, s01, index),
              (Box{{2 * k01, 2 * k01 + 2}, {0, 3}}));
    EXPECT_EQ(DeviceBox(tensor, mesh, s10, index),
              (Box{{2 * k10, 2 * k10 + 2}, {0, 3}}));
  }
  // S1 on the second dimension ignores the host coordinate.
  EXPECT_EQ(DeviceBox(TensorSpec{{4, 8}}, mesh, MustParse("RS1"), 6),
            (Box{{0, 4}, {4, 6}}));
}

TEST(ComputeTilesTest, PublicCaseLayouts) {
  const DeviceMesh mesh{{2, 4}, {8, 9, 10, 11, 12, 13, 14, 15}};
  const TensorSpec tensor{{1024, 1024, 512}, DType::kInt32};
  auto tiles = ComputeTiles(tensor, mesh, MustParse("S0RR"));
  ASSERT_TRUE(tiles.ok());
  ASSERT_EQ(tiles->size(), 2u);
  EXPECT_EQ((*tiles)[0].box, (Box{{0, 512}, {0, 1024}, {0, 512}}));
  EXPECT_THAT((*tiles)[0].devices, ElementsAre(8, 9, 10, 11));
  EXPECT_THAT((*tiles)[1].devices, ElementsAre(12, 13, 14, 15));

  tiles = ComputeTiles(tensor, mesh, MustParse("RRR"));
  ASSERT_TRUE(tiles.ok());
  ASSERT_EQ(tiles->size(), 1u);
  EXPECT_EQ((*tiles)[0].devices.size(), 8u);

  tiles = ComputeTiles(tensor, mesh, MustParse("RS1R"));
  ASSERT_TRUE(tiles.ok());
  ASSERT_EQ(tiles->size(), 4u);
  EXPECT_EQ((*tiles)[1].box, (Box{{0, 1024}, {256, 512}, {0, 512}}));
  EXPECT_THAT((*tiles)[1].devices, ElementsAre(9, 13));

  tiles = ComputeTiles(tensor, mesh, MustParse("RS01R"));
  ASSERT_TRUE(tiles.ok());
  ASSERT_EQ(tiles->size(), 8u);
  for (const Tile& tile : *tiles) {
    EXPECT_EQ(tile.devices.size(), 1u);
    EXPECT_EQ(NumElements(tile.box), 1024 * 128 * 512);
  }
}

TEST(ComputeTilesTest, UnevenShapesDropEmptyShards) {
  const DeviceMesh mesh{{2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}};
  // 5 rows over 8 devices: chunk 1, devices 5..7 hold nothing.
  auto tiles = ComputeTiles(TensorSpec{{5, 2}}, mesh, MustParse("S01R"));
  ASSERT_TRUE(tiles.ok());
  ASSERT_EQ(tiles->size(), 5u);
  EXPECT_EQ((*tiles)[4].box, (Box{{4, 5}, {0, 2}}));
  EXPECT_THAT((*tiles)[4].devices, ElementsAre(4));
  // 10 over 4: chunks 3,3,3,1, each on both hosts.
  tiles = ComputeTiles(TensorSpec{{10}}, mesh, MustParse("S1"));
  ASSERT_TRUE(tiles.ok());
  ASSERT_EQ(tiles->size(), 4u);
  EXPECT_EQ((*tiles)[3].box, (Box{{9, 10}}));
  EXPECT_THAT((*tiles)[3].devices, ElementsAre(3, 7));
  // 4 over 3 hosts: chunk 2, the third host holds nothing.
  const DeviceMesh three{{3, 1}, {0, 4, 8}};
  tiles = ComputeTiles(TensorSpec{{4}}, three, MustParse("S0"));
  ASSERT_TRUE(tiles.ok());
  ASSERT_EQ(tiles->size(), 2u);
  EXPECT_THAT((*tiles)[1].devices, ElementsAre(4));
}

TEST(ComputeTilesTest, RejectsInvalidSpecs) {
  const DeviceMesh mesh{{2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}};
  EXPECT_FALSE(ComputeTiles(TensorSpec{{4, 4}}, mesh, MustParse("S0RR")).ok());
  EXPECT_FALSE(ComputeTiles(TensorSpec{{4}}, mesh, MustParse("S2")).ok());
  const DeviceMesh broken{{2, 4}, {0, 1, 2}};
  EXPECT_FALSE(ComputeTiles(TensorSpec{{4}}, broken, MustParse("S0")).ok());
}

// Random meshes, shapes and specs against an element-by-element oracle that
// uses the torch.chunk rule directly: element x of a dimension of length L
// split n ways is in shard x / ceil(L/n).
TEST(ComputeTilesTest, PropertyMatchesElementOracle) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 300; ++trial) {
    DeviceMesh mesh;
    const int mesh_rank = 1 + static_cast<int>(rng() % 3);
    for (int a = 0; a < mesh_rank; ++a) {
      mesh.shape.push_back(1 + static_cast<int>(rng() % 4));
    }
    int count = 1;
    for (int e : mesh.shape) count *= e;
    for (int i = 0; i < count; ++i) mesh.devices.push_back(i * 3 + 1);
    std::shuffle(mesh.devices.begin(), mesh.devices.end(), rng);

    TensorSpec tensor;
    const int rank = 1 + static_cast<int>(rng() % 3);
    for (int d = 0; d < rank; ++d) tensor.shape.push_back(1 + rng() % 7);
    ShardingSpec spec;
    spec.dims.resize(rank);
    std::vector<int> axes(mesh_rank);
    for (int a = 0; a < mesh_rank; ++a) axes[a] = a;
    std::shuffle(axes.begin(), axes.end(), rng);
    for (int axis : axes) {
      const int d = static_cast<int>(rng() % (rank + 1));
      if (d < rank) spec.dims[d].mesh_axes.push_back(axis);
    }
    SCOPED_TRACE(mesh.ToString() + " spec " + spec.ToString());

    auto tiles = ComputeTiles(tensor, mesh, spec);
    ASSERT_TRUE(tiles.ok()) << tiles.status();
    // Tiles are pairwise disjoint, non-empty, sorted holders.
    for (size_t i = 0; i < tiles->size(); ++i) {
      EXPECT_FALSE(IsEmpty((*tiles)[i].box));
      EXPECT_TRUE(std::is_sorted((*tiles)[i].devices.begin(),
                                 (*tiles)[i].devices.end()));
      for (size_t j = i + 1; j < tiles->size(); ++j) {
        EXPECT_TRUE(IsEmpty(Intersect((*tiles)[i].box, (*tiles)[j].box)));
      }
    }
    // Walk every element: the oracle's holders equal the tile holders.
    const int64_t elements = tensor.num_elements();
    for (int64_t e = 0; e < elements; ++e) {
      std::vector<int64_t> x(rank);
      int64_t rest = e;
      for (int d = rank - 1; d >= 0; --d) {
        x[d] = rest % tensor.shape[d];
        rest /= tensor.shape[d];
      }
      std::vector<int> expected;
      for (int index = 0; index < mesh.num_devices(); ++index) {
        const std::vector<int> c = mesh.CoordsOf(index);
        bool holds = true;
        for (int d = 0; d < rank; ++d) {
          int64_t n = 1, k = 0;
          for (int axis : spec.dims[d].mesh_axes) {
            n *= mesh.shape[axis];
            k = k * mesh.shape[axis] + c[axis];
          }
          const int64_t chunk = (tensor.shape[d] + n - 1) / n;
          if (x[d] / chunk != k) holds = false;
        }
        if (holds) expected.push_back(mesh.devices[index]);
      }
      std::sort(expected.begin(), expected.end());
      int containing = 0;
      for (const Tile& tile : *tiles) {
        bool inside = true;
        for (int d = 0; d < rank; ++d) {
          inside &= x[d] >= tile.box[d].begin && x[d] < tile.box[d].end;
        }
        if (inside) {
          ++containing;
          EXPECT_EQ(tile.devices, expected) << "element " << e;
        }
      }
      EXPECT_EQ(containing, 1) << "element " << e;
    }
  }
}

}  // namespace
}  // namespace meshcast
