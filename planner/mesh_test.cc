#include "planner/mesh.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(DeviceMeshTest, CoordsAreRowMajor) {
  DeviceMesh mesh{{2, 4}, {8, 9, 10, 11, 12, 13, 14, 15}};
  EXPECT_THAT(mesh.CoordsOf(0), ElementsAre(0, 0));
  EXPECT_THAT(mesh.CoordsOf(3), ElementsAre(0, 3));
  EXPECT_THAT(mesh.CoordsOf(5), ElementsAre(1, 1));
  DeviceMesh cube{{2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
  EXPECT_THAT(cube.CoordsOf(7), ElementsAre(1, 0, 1));
  EXPECT_EQ(mesh.ToString(), "2x4[8,9,10,11,12,13,14,15]");
  EXPECT_EQ(mesh.rank(), 2);
  EXPECT_EQ(mesh.num_devices(), 8);
}

TEST(DeviceMeshTest, Validate) {
  const Topology topology = Topology::FromGbps(2, 4, 10, 100);
  EXPECT_TRUE((DeviceMesh{{2, 2}, {0, 1, 4, 5}}).Validate(topology).ok());
  EXPECT_THAT((DeviceMesh{{2, 2}, {0, 1, 4}}).Validate(topology).message(),
              HasSubstr("needs 4 devices but lists 3"));
  EXPECT_THAT((DeviceMesh{{2}, {0, 0}}).Validate(topology).message(),
              HasSubstr("listed twice"));
  EXPECT_THAT((DeviceMesh{{2}, {0, 8}}).Validate(topology).message(),
              HasSubstr("outside the topology"));
  EXPECT_FALSE((DeviceMesh{{}, {}}).Validate(topology).ok());
  EXPECT_FALSE((DeviceMesh{{0}, {}}).Validate(topology).ok());
  // Extents whose product overflows 64 bits (found by fuzzing) are refused
  // by name, not multiplied.
  EXPECT_THAT((DeviceMesh{{400402153, 304, 600402153, 30, 8}, {0}})
                  .Validate(topology)
                  .message(),
              HasSubstr("needs more than 2^40 devices"));
}

TEST(ParseMeshTest, PlacesHostsAndFirstDevices) {
  const Topology topology = Topology::FromGbps(5, 4, 10, 1200);
  auto mesh = ParseMesh("2x4@2", topology, "--dst-mesh");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_THAT(mesh->shape, ElementsAre(2, 4));
  EXPECT_THAT(mesh->devices, ElementsAre(8, 9, 10, 11, 12, 13, 14, 15));

  mesh = ParseMesh("2x4", topology);
  ASSERT_TRUE(mesh.ok());
  EXPECT_THAT(mesh->devices, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));

  // Fewer devices than the host has: the first G of each host.
  mesh = ParseMesh("3x2@1", topology);
  ASSERT_TRUE(mesh.ok());
  EXPECT_THAT(mesh->devices, ElementsAre(4, 5, 8, 9, 12, 13));
  EXPECT_TRUE(mesh->Validate(topology).ok());
}

TEST(ParseMeshTest, TooLargeMeshesNameTheFlag) {
  const Topology topology = Topology::FromGbps(5, 4, 10, 1200);
  auto mesh = ParseMesh("2x4@4", topology, "--dst-mesh");
  ASSERT_FALSE(mesh.ok());
  EXPECT_THAT(mesh.status().message(), HasSubstr("--dst-mesh"));
  EXPECT_THAT(mesh.status().message(), HasSubstr("hosts 4..5"));
  EXPECT_THAT(mesh.status().message(), HasSubstr("5 hosts"));

  mesh = ParseMesh("1x8", topology, "--src-mesh");
  ASSERT_FALSE(mesh.ok());
  EXPECT_THAT(mesh.status().message(), HasSubstr("--src-mesh"));
  EXPECT_THAT(mesh.status().message(), HasSubstr("4 per host"));
}

TEST(ParseMeshTest, MalformedTextExplainsTheForm) {
  const Topology topology = Topology::FromGbps(5, 4, 10, 1200);
  for (const char* bad : {"", "2", "2x", "2x4@", "2x4@-1", "2y4", "0x4", "2x0",
                          "2x4x1", "2x4@a"}) {
    auto mesh = ParseMesh(bad, topology, "--src-mesh");
    ASSERT_FALSE(mesh.ok()) << bad;
    EXPECT_THAT(mesh.status().message(), HasSubstr("--src-mesh")) << bad;
    EXPECT_THAT(mesh.status().message(), HasSubstr("HxG@h")) << bad;
  }
}

TEST(UnplacedMeshTest, DevicesCountFromZeroInRowMajorOrder) {
  const DeviceMesh mesh = UnplacedMesh({2, 3});
  EXPECT_THAT(mesh.shape, ElementsAre(2, 3));
  EXPECT_THAT(mesh.devices, ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT(mesh.CoordsOf(4), ElementsAre(1, 1));
}

TEST(MeshFromDevicesTest, ExplicitList) {
  const Topology topology = Topology::FromGbps(2, 4, 10, 1200);
  auto mesh = MeshFromDevices("0,1,4,5", "2x2", topology, "--src-devices");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_THAT(mesh->shape, ElementsAre(2, 2));
  EXPECT_THAT(mesh->devices, ElementsAre(0, 1, 4, 5));
  mesh = MeshFromDevices("7, 3", "2", topology);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_THAT(mesh->devices, ElementsAre(7, 3));
}

TEST(MeshFromDevicesTest, ErrorsNameTheFlag) {
  const Topology topology = Topology::FromGbps(2, 4, 10, 1200);
  struct Case {
    const char* devices;
    const char* shape;
    const char* expect;
  };
  for (const Case& c :
       {Case{"0,1,4", "2x2", "needs 4 devices"},
        Case{"0,1,4,4", "2x2", "listed twice"},
        Case{"0,1,4,8", "2x2", "outside the topology"},
        Case{"0,a", "2", "bad id 'a'"}, Case{"0,1", "2x", "bad extent"},
        Case{"", "1", "bad id"}}) {
    auto mesh = MeshFromDevices(c.devices, c.shape, topology, "--dst-devices");
    ASSERT_FALSE(mesh.ok()) << c.devices;
    EXPECT_THAT(mesh.status().message(), HasSubstr("--dst-devices"));
    EXPECT_THAT(mesh.status().message(), HasSubstr(c.expect));
  }
}

}  // namespace
}  // namespace meshcast
