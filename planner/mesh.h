// DeviceMesh: an N-D grid (usually hosts x devices) over global device ids,
// row-major: coords (i, j) on a d0 x d1 mesh is devices[i * d1 + j].
//
// Thread safety: plain value type.
#ifndef MESHCAST_PLANNER_MESH_H_
#define MESHCAST_PLANNER_MESH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/topology.h"

namespace meshcast {

struct DeviceMesh {
  std::vector<int> shape;    // e.g. {2, 4}
  std::vector<int> devices;  // size == product(shape), distinct

  int num_devices() const { return static_cast<int>(devices.size()); }
  int rank() const { return static_cast<int>(shape.size()); }
  // Coordinates of the i-th device in `devices`.
  std::vector<int> CoordsOf(int index) const;
  std::string ToString() const;  // e.g. "2x4[8,9,10,11,12,13,14,15]"

  // Checks shape/devices agree, ids are distinct and inside `topology`.
  absl::Status Validate(const Topology& topology) const;
};

// Parses "HxG@h" (H hosts x G devices starting at host h, the first G devices
// of each host) or "HxG" (placed at host 0). `flag` names the command-line
// flag in error messages.
absl::StatusOr<DeviceMesh> ParseMesh(absl::string_view text,
                                     const Topology& topology,
                                     absl::string_view flag = "mesh");
// A mesh over an explicit device list ("0,1,4,5") with shape ("2x2").
absl::StatusOr<DeviceMesh> MeshFromDevices(absl::string_view devices,
                                           absl::string_view shape,
                                           const Topology& topology,
                                           absl::string_view flag = "devices");
// A mesh of `shape` over devices 0..n-1: for checking layouts against a
// mesh's shape before it is placed (a kind's Validate).
DeviceMesh UnplacedMesh(const std::vector<int>& shape);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_MESH_H_
