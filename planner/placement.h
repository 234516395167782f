// Placement: lays a job's meshes out on the cluster and tracks which devices
// running jobs hold. The controller's job queue and `meshctl plan` (offline,
// on an idle cluster) share these rules, so an unpinned mesh lands on the
// same devices in both.
//
// Placement rules (docs/conventions.md; any number of meshes per job):
//  - A mesh the controller places is 1-D (n = 1 x n) or 2-D (rows x cols):
//    one mesh row per host, `cols` free devices of that host (lowest ids
//    first), hosts in ascending order.
//  - `first_host` >= 0 pins row 0 to that host (rows take consecutive hosts);
//    < 0 (the API's unset first_host) means anywhere.
//  - An explicit device list is used as given (any shape).
//  - Fixed meshes (explicit devices or a pinned host) are placed first, in
//    request order, then the others in request order. Fixed meshes are
//    honoured even when they share hosts and devices with the job's other
//    meshes. Each mesh the controller places stays off the hosts of every
//    mesh of the job placed before it, unless `allow_overlap`; with it, it
//    may reuse their hosts and (preferring unused devices) their devices;
//    with `share_hosts`, it takes hosts of its own where it can and free
//    devices on their hosts where it must, never their devices (pipeline
//    stages: separate devices, ideally separate hosts). A device of the
//    job's own meshes never counts as busy for the job.
//
//   PlacementRequest request;
//   request.meshes = {src, dst};
//   request.names = {"src_mesh", "dst_mesh"};  // for error messages
//   DeviceAllocator allocator;
//   RETURN_IF_ERROR(DeviceAllocator::CheckFits(request, topology)); // submit
//   absl::StatusOr<Placement> p = allocator.Acquire(request, topology, lost);
//   if (absl::IsUnavailable(p.status())) { /* stay queued */ }
//   ...
//   allocator.Release(p->devices);
//
// Thread safety: DeviceAllocator is not thread-safe; the controller's
// JobManager calls it under its lock. The static functions are pure.
#ifndef MESHCAST_PLANNER_PLACEMENT_H_
#define MESHCAST_PLANNER_PLACEMENT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/mesh.h"
#include "planner/topology.h"

namespace meshcast {

// A mesh as a job asks for it, before placement.
struct MeshRequest {
  std::vector<int> shape;    // e.g. {2, 4}
  std::vector<int> devices;  // explicit global ids, or empty: place it
  int first_host = -1;       // >= 0: pin row 0 to this host; else anywhere
  // "2x4", "2x4@1" or "2x2[0,1,4,5]".
  std::string ToString() const;
};

// The meshes one job needs. Errors name mesh i by names[i] (e.g.
// "src_mesh"); a missing name reads "meshes[i]".
struct PlacementRequest {
  std::vector<MeshRequest> meshes;
  std::vector<std::string> names;  // parallel to meshes

  // The request of a kind that places one mesh, named `name` in errors.
  static PlacementRequest One(MeshRequest mesh, std::string name) {
    PlacementRequest request;
    request.meshes.push_back(std::move(mesh));
    request.names.push_back(std::move(name));
    return request;
  }
  bool allow_overlap = false;
  // Meshes may share hosts, not devices (see the top of the file).
  bool share_hosts = false;

  // names[i], or "meshes[i]" when the request names fewer meshes.
  std::string NameOf(int i) const;
};

struct Placement {
  std::vector<DeviceMesh> meshes;  // parallel to PlacementRequest::meshes
  std::vector<int> devices;        // union of all meshes, ascending
  std::vector<int> hosts;          // hosts of those devices, ascending
};

class DeviceAllocator {
 public:
  // OK when `request` can be placed on `topology` with every device free and
  // every host alive; INVALID_ARGUMENT naming the mesh and the cluster size
  // otherwise (e.g. "dst_mesh 3x4 needs 3 hosts with 4 free devices; cluster
  // has 2 hosts x 4 devices"; "dst_mesh 2x4 and src_mesh 2x4 on disjoint
  // hosts need 4 hosts; ..."). INVALID_ARGUMENT too when the request has no
  // mesh. FAILED_PRECONDITION when the cluster is empty.
  static absl::Status CheckFits(const PlacementRequest& request,
                                const Topology& topology);
  // The placement CheckFits finds on the idle cluster (used to validate a
  // job and for dry-run plans); same errors.
  static absl::StatusOr<Placement> PlaceOnIdleCluster(
      const PlacementRequest& request, const Topology& topology);

  // Places the meshes on devices that are free now, on hosts not listed in
  // `unavailable_hosts`, without reserving them. UNAVAILABLE (saying what it
  // waits for) when the request fits the cluster but not right now; the
  // CheckFits error when it never can.
  absl::StatusOr<Placement> Place(
      const PlacementRequest& request, const Topology& topology,
      const absl::flat_hash_set<int>& unavailable_hosts) const;

  // Place, then marks the placement's devices busy.
  absl::StatusOr<Placement> Acquire(
      const PlacementRequest& request, const Topology& topology,
      const absl::flat_hash_set<int>& unavailable_hosts);

  // Frees devices taken by Acquire.
  void Release(const std::vector<int>& devices);

  bool IsBusy(int device) const { return busy_.contains(device); }
  int num_busy() const { return static_cast<int>(busy_.size()); }

 private:
  absl::flat_hash_set<int> busy_;
};

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_PLACEMENT_H_
