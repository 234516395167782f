#include "planner/placement.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Topology Cluster(int hosts, int devices) {
  Topology t;
  t.num_hosts = hosts;
  t.devices_per_host = devices;
  return t;
}

MeshRequest Mesh(std::vector<int> shape, int first_host = -1,
                 std::vector<int> devices = {}) {
  return {std::move(shape), std::move(devices), first_host};
}

// A reshard-shaped job: a source and a destination mesh.
PlacementRequest Job(MeshRequest src, MeshRequest dst, bool allow_overlap) {
  PlacementRequest request;
  request.meshes = {std::move(src), std::move(dst)};
  request.names = {"src_mesh", "dst_mesh"};
  request.allow_overlap = allow_overlap;
  return request;
}

const absl::flat_hash_set<int> kNoneDown;

TEST(AllocatorTest, OneMeshRowPerHostOnDisjointHosts) {
  DeviceAllocator allocator;
  absl::StatusOr<Placement> p = allocator.Place(
      Job(Mesh({2, 4}), Mesh({2, 4}), false), Cluster(4, 4), kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->meshes[0].shape, ElementsAre(2, 4));
  EXPECT_THAT(p->meshes[0].devices, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(p->meshes[1].devices, ElementsAre(8, 9, 10, 11, 12, 13, 14, 15));
  EXPECT_THAT(p->hosts, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(p->devices.size(), 16u);
}

TEST(AllocatorTest, PartialRowsTakeTheLowestDevices) {
  DeviceAllocator allocator;
  absl::StatusOr<Placement> p = allocator.Place(
      Job(Mesh({1, 2}), Mesh({2}), false), Cluster(2, 4), kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->meshes[0].devices, ElementsAre(0, 1));
  // A 1-D mesh is one row; it goes to the next host.
  EXPECT_THAT(p->meshes[1].shape, ElementsAre(2));
  EXPECT_THAT(p->meshes[1].devices, ElementsAre(4, 5));
}

TEST(AllocatorTest, OverlapSharesHostsPreferringUnusedDevices) {
  DeviceAllocator allocator;
  absl::StatusOr<Placement> p = allocator.Place(
      Job(Mesh({1, 2}), Mesh({1, 2}), true), Cluster(1, 4), kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->meshes[0].devices, ElementsAre(0, 1));
  EXPECT_THAT(p->meshes[1].devices, ElementsAre(2, 3));
  // When the host is full, overlap reuses the source's devices.
  p = allocator.Place(Job(Mesh({2, 4}), Mesh({2, 4}), true), Cluster(2, 4),
                      kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->meshes[0].devices, p->meshes[1].devices);
  EXPECT_EQ(p->devices.size(), 8u);
}

// Pipeline stages: hosts of their own while there are free ones, then the
// free devices beside the other meshes, never the other meshes' devices.
TEST(AllocatorTest, SharedHostsKeepDevicesApart) {
  DeviceAllocator allocator;
  PlacementRequest request = Job(Mesh({1, 2}), Mesh({1, 2}), false);
  request.share_hosts = true;
  absl::StatusOr<Placement> p =
      allocator.Place(request, Cluster(2, 4), kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->meshes[0].devices, ElementsAre(0, 1));
  EXPECT_THAT(p->meshes[1].devices, ElementsAre(4, 5));  // its own host
  p = allocator.Place(request, Cluster(1, 4), kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->meshes[1].devices, ElementsAre(2, 3));  // beside, not on
  // A two-row mesh takes its own host first and a shared one after, rows
  // in host order.
  request = Job(Mesh({1, 2}), Mesh({2, 2}), false);
  request.share_hosts = true;
  p = allocator.Place(request, Cluster(2, 4), kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->meshes[1].devices, ElementsAre(2, 3, 4, 5));
  // No room without sharing devices: refused, not overlapped.
  request = Job(Mesh({1, 4}), Mesh({1, 2}), false);
  request.share_hosts = true;
  p = allocator.Place(request, Cluster(1, 4), kNoneDown);
  EXPECT_FALSE(p.ok());
}

TEST(AllocatorTest, ExplicitDevicesAndPinnedHostsAreHonoured) {
  DeviceAllocator allocator;
  absl::StatusOr<Placement> p = allocator.Place(
      Job(Mesh({2, 2}, -1, {1, 3, 5, 7}), Mesh({1, 4}, 2), false),
      Cluster(3, 4), kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->meshes[0].devices, ElementsAre(1, 3, 5, 7));
  EXPECT_THAT(p->meshes[1].devices, ElementsAre(8, 9, 10, 11));
  // A placed source steers around a pinned destination.
  p = allocator.Place(Job(Mesh({1, 4}), Mesh({1, 4}, 1), false), Cluster(3, 4),
                      kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->meshes[1].devices, ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(p->meshes[0].devices, ElementsAre(0, 1, 2, 3));
  p = allocator.Place(Job(Mesh({1, 4}, -1, {0, 1, 2, 3}), Mesh({1, 4}), false),
                      Cluster(3, 4), kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->meshes[1].devices, ElementsAre(4, 5, 6, 7));
  // Host 0 can be pinned too: the placed mesh moves out of its way.
  p = allocator.Place(Job(Mesh({1, 4}), Mesh({1, 4}, 0), false), Cluster(3, 4),
                      kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->meshes[1].devices, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(p->meshes[0].devices, ElementsAre(4, 5, 6, 7));
}

TEST(AllocatorTest, RefusesWhatTheClusterCannotHold) {
  absl::Status s = DeviceAllocator::CheckFits(
      Job(Mesh({2, 4}), Mesh({3, 4}), true), Cluster(2, 4));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_EQ(s.message(),
            "dst_mesh 3x4 needs 3 hosts with 4 free devices; cluster has 2 "
            "hosts x 4 devices");
  s = DeviceAllocator::CheckFits(Job(Mesh({1, 8}), Mesh({1, 4}), true),
                                 Cluster(2, 4));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("needs 8 devices per host"));
  s = DeviceAllocator::CheckFits(Job(Mesh({2, 4}), Mesh({2, 4}), false),
                                 Cluster(3, 4));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(),
              HasSubstr("dst_mesh 2x4 and src_mesh 2x4 on disjoint hosts need "
                        "4 hosts; cluster has 3 hosts x 4 devices"));
  EXPECT_THAT(s.message(),
              HasSubstr("to share hosts: allow_overlap in the job, "
                        "--allow-overlap for meshctl"));
  s = DeviceAllocator::CheckFits(Job(Mesh({2, 4}, 1), Mesh({1, 4}), true),
                                 Cluster(2, 4));
  EXPECT_THAT(s.message(), HasSubstr("needs hosts 1..2"));
  s = DeviceAllocator::CheckFits(
      Job(Mesh({2, 4}, std::numeric_limits<int>::max()), Mesh({1, 4}), true),
      Cluster(2, 4));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  s = DeviceAllocator::CheckFits(Job(Mesh({2}, -1, {0, 9}), Mesh({1, 4}), true),
                                 Cluster(2, 4));
  EXPECT_THAT(s.message(), HasSubstr("device 9 is outside the cluster"));
  s = DeviceAllocator::CheckFits(Job(Mesh({2}, -1, {1, 1}), Mesh({1, 4}), true),
                                 Cluster(2, 4));
  EXPECT_THAT(s.message(), HasSubstr("device 1 twice"));
  s = DeviceAllocator::CheckFits(Job(Mesh({2}, -1, {1}), Mesh({1, 4}), true),
                                 Cluster(2, 4));
  EXPECT_THAT(s.message(), HasSubstr("has 1 ids but shape 2 needs 2"));
  s = DeviceAllocator::CheckFits(Job(Mesh({2, 2, 2}), Mesh({1, 4}), true),
                                 Cluster(2, 4));
  EXPECT_THAT(s.message(), HasSubstr("list the devices"));
  s = DeviceAllocator::CheckFits(Job(Mesh({1, 1}), Mesh({1, 1}), true),
                                 Cluster(0, 0));
  EXPECT_TRUE(absl::IsFailedPrecondition(s));
}

TEST(AllocatorTest, BusyDevicesMakeJobsWaitAndDisjointJobsRunTogether) {
  DeviceAllocator allocator;
  const Topology cluster = Cluster(4, 2);
  const PlacementRequest job = Job(Mesh({1, 2}), Mesh({1, 2}), false);
  absl::StatusOr<Placement> first = allocator.Acquire(job, cluster, kNoneDown);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(first->hosts, ElementsAre(0, 1));
  absl::StatusOr<Placement> second = allocator.Acquire(job, cluster, kNoneDown);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_THAT(second->hosts, ElementsAre(2, 3));
  EXPECT_EQ(allocator.num_busy(), 8);
  absl::StatusOr<Placement> third = allocator.Acquire(job, cluster, kNoneDown);
  EXPECT_TRUE(absl::IsUnavailable(third.status())) << third.status();
  EXPECT_THAT(third.status().message(), HasSubstr("waiting for devices"));
  allocator.Release(first->devices);
  third = allocator.Acquire(job, cluster, kNoneDown);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_THAT(third->hosts, ElementsAre(0, 1));
}

TEST(AllocatorTest, PinnedOrExplicitOnBusyDevicesWaits) {
  DeviceAllocator allocator;
  const Topology cluster = Cluster(2, 2);
  ASSERT_TRUE(
      allocator
          .Acquire(Job(Mesh({1, 1}, -1, {0}), Mesh({1, 1}, -1, {2}), false),
                   cluster, kNoneDown)
          .ok());
  EXPECT_TRUE(allocator.IsBusy(0));
  EXPECT_FALSE(allocator.IsBusy(1));
  absl::StatusOr<Placement> p =
      allocator.Place(Job(Mesh({1, 1}, -1, {0}), Mesh({1, 1}, -1, {3}), false),
                      cluster, kNoneDown);
  EXPECT_TRUE(absl::IsUnavailable(p.status()));
  EXPECT_THAT(p.status().message(), HasSubstr("device 0 is held"));
  // Free devices on a pinned host are used around busy ones.
  p = allocator.Place(Job(Mesh({1, 1}, 1), Mesh({1, 1}, -1, {1}), false),
                      cluster, kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->meshes[0].devices, ElementsAre(3));
}

TEST(AllocatorTest, LostHostsAreSkippedOrWaitedFor) {
  DeviceAllocator allocator;
  const Topology cluster = Cluster(3, 2);
  const absl::flat_hash_set<int> host0_down = {0};
  absl::StatusOr<Placement> p = allocator.Place(
      Job(Mesh({1, 2}), Mesh({1, 2}), false), cluster, host0_down);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->hosts, ElementsAre(1, 2));
  p = allocator.Place(Job(Mesh({1, 2}, -1, {0, 1}), Mesh({1, 2}), false),
                      cluster, host0_down);
  EXPECT_TRUE(absl::IsUnavailable(p.status()));
  EXPECT_THAT(p.status().message(), HasSubstr("no live worker"));
}

PlacementRequest ThreeMeshes(MeshRequest a, MeshRequest b, MeshRequest c,
                             bool allow_overlap) {
  PlacementRequest request;
  request.meshes = {std::move(a), std::move(b), std::move(c)};
  request.names = {"a_mesh", "b_mesh", "c_mesh"};
  request.allow_overlap = allow_overlap;
  return request;
}

TEST(AllocatorTest, ThreeMeshesTakeDisjointHostsInOrder) {
  DeviceAllocator allocator;
  absl::StatusOr<Placement> p =
      allocator.Place(ThreeMeshes(Mesh({1, 2}), Mesh({2}), Mesh({2, 1}), false),
                      Cluster(5, 2), kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->meshes.size(), 3u);
  EXPECT_THAT(p->meshes[0].devices, ElementsAre(0, 1));
  EXPECT_THAT(p->meshes[1].shape, ElementsAre(2));
  EXPECT_THAT(p->meshes[1].devices, ElementsAre(2, 3));
  EXPECT_THAT(p->meshes[2].shape, ElementsAre(2, 1));
  EXPECT_THAT(p->meshes[2].devices, ElementsAre(4, 6));
  EXPECT_THAT(p->devices, ElementsAre(0, 1, 2, 3, 4, 6));
  EXPECT_THAT(p->hosts, ElementsAre(0, 1, 2, 3));
}

TEST(AllocatorTest, ThreeMeshesPlaceFixedOnesFirst) {
  DeviceAllocator allocator;
  // b is pinned to host 0 and c lists host 2's devices: a (placed last)
  // steers around both and lands on host 1.
  absl::StatusOr<Placement> p = allocator.Place(
      ThreeMeshes(Mesh({1, 2}), Mesh({1, 2}, 0), Mesh({2}, -1, {4, 5}), false),
      Cluster(3, 2), kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->meshes[0].devices, ElementsAre(2, 3));
  EXPECT_THAT(p->meshes[1].devices, ElementsAre(0, 1));
  EXPECT_THAT(p->meshes[2].devices, ElementsAre(4, 5));
  EXPECT_THAT(p->hosts, ElementsAre(0, 1, 2));
}

TEST(AllocatorTest, ThreeMeshesOverlapReusesEarlierMeshesDevicesLast) {
  DeviceAllocator allocator;
  absl::StatusOr<Placement> p = allocator.Place(
      ThreeMeshes(Mesh({1, 2}), Mesh({1, 2}), Mesh({1, 3}), true),
      Cluster(1, 4), kNoneDown);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->meshes[0].devices, ElementsAre(0, 1));
  EXPECT_THAT(p->meshes[1].devices, ElementsAre(2, 3));
  // No device is fresh for c: it reuses a's and b's, lowest first.
  EXPECT_THAT(p->meshes[2].devices, ElementsAre(0, 1, 2));
  EXPECT_THAT(p->devices, ElementsAre(0, 1, 2, 3));
}

TEST(AllocatorTest, ThreeMeshesDisjointErrorNamesEveryMesh) {
  absl::Status s = DeviceAllocator::CheckFits(
      ThreeMeshes(Mesh({1, 2}), Mesh({1, 2}), Mesh({1, 2}), false),
      Cluster(2, 2));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(),
              HasSubstr("c_mesh 1x2, a_mesh 1x2 and b_mesh 1x2 on disjoint "
                        "hosts need 3 hosts; cluster has 2 hosts x 2 devices"));
  // A busy host makes the third mesh wait, naming the meshes it avoids.
  DeviceAllocator allocator;
  ASSERT_TRUE(allocator
                  .Acquire(Job(Mesh({1, 1}, 2), Mesh({1, 1}, 2), true),
                           Cluster(3, 1), kNoneDown)
                  .ok());
  absl::StatusOr<Placement> p = allocator.Place(
      ThreeMeshes(Mesh({1, 1}), Mesh({1, 1}), Mesh({1, 1}), false),
      Cluster(3, 1), kNoneDown);
  EXPECT_TRUE(absl::IsUnavailable(p.status())) << p.status();
  EXPECT_THAT(p.status().message(),
              HasSubstr("c_mesh 1x1 needs 1 live hosts with 1 free devices "
                        "apart from a_mesh's and b_mesh's"));
}

TEST(AllocatorTest, UnnamedMeshesAndEmptyRequests) {
  PlacementRequest request;
  request.meshes = {Mesh({1, 2}), Mesh({3, 2})};
  request.names = {"src_mesh"};
  absl::Status s = DeviceAllocator::CheckFits(request, Cluster(2, 2));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("meshes[1] 3x2 needs 3 hosts"));
  s = DeviceAllocator::CheckFits(PlacementRequest{}, Cluster(2, 2));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("no meshes"));
}

TEST(AllocatorTest, MeshRequestToString) {
  EXPECT_EQ(Mesh({2, 4}).ToString(), "2x4");
  EXPECT_EQ(Mesh({2, 4}, 1).ToString(), "2x4@1");
  EXPECT_EQ(Mesh({1, 2}, -1, {4, 5}).ToString(), "1x2[4,5]");
}

}  // namespace
}  // namespace meshcast
