#include "planner/mesh.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

std::string ShapeToString(const std::vector<int>& shape) {
  return absl::StrJoin(shape, "x");
}

// Parses "2x2" or "8" into extents >= 1.
absl::StatusOr<std::vector<int>> ParseMeshShape(absl::string_view text,
                                                absl::string_view flag) {
  std::vector<int> shape;
  for (absl::string_view part : absl::StrSplit(text, 'x')) {
    int extent = 0;
    if (!absl::SimpleAtoi(part, &extent) || extent < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": cannot parse mesh shape \"", text, "\": bad extent '", part,
          "'; expected extents >= 1 joined by 'x', e.g. 2x2"));
    }
    shape.push_back(extent);
  }
  return shape;
}

}  // namespace

std::vector<int> DeviceMesh::CoordsOf(int index) const {
  std::vector<int> coords(shape.size());
  for (int axis = rank() - 1; axis >= 0; --axis) {
    coords[axis] = index % shape[axis];
    index /= shape[axis];
  }
  return coords;
}

std::string DeviceMesh::ToString() const {
  return absl::StrCat(ShapeToString(shape), "[", absl::StrJoin(devices, ","),
                      "]");
}

absl::Status DeviceMesh::Validate(const Topology& topology) const {
  if (shape.empty()) {
    return absl::InvalidArgumentError("mesh: shape is empty");
  }
  // Far beyond any device list; checked before multiplying, so that huge
  // extents cannot overflow the product (found by fuzz/parsers_fuzz).
  constexpr int64_t kMaxDevices = int64_t{1} << 40;
  int64_t count = 1;
  for (int extent : shape) {
    if (extent < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh ", ShapeToString(shape), ": every extent must be >= 1"));
    }
    if (count > kMaxDevices / extent) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh ", ShapeToString(shape), " needs more than 2^40 "
                       "devices"));
    }
    count *= extent;
  }
  if (count != static_cast<int64_t>(devices.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("mesh ", ShapeToString(shape), " needs ", count,
                     " devices but lists ", devices.size()));
  }
  absl::flat_hash_set<int> seen;
  for (int device : devices) {
    if (device < 0 || device >= topology.num_devices()) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh ", ToString(), ": device ", device,
                       " is outside the topology (devices 0..",
                       topology.num_devices() - 1, ")"));
    }
    if (!seen.insert(device).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh ", ToString(), ": device ", device, " is listed twice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceMesh> ParseMesh(absl::string_view text,
                                     const Topology& topology,
                                     absl::string_view flag) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": cannot parse mesh \"", text, "\": ", why,
        "; expected HxG or HxG@h (H hosts x G devices starting at host h), "
        "e.g. 2x4@2"));
  };
  absl::string_view body = text;
  int first_host = 0;
  const size_t at = body.find('@');
  if (at != absl::string_view::npos) {
    absl::string_view host_text = body.substr(at + 1);
    if (!absl::SimpleAtoi(host_text, &first_host) || first_host < 0) {
      return bad(absl::StrCat("bad first host '", host_text, "'"));
    }
    body = body.substr(0, at);
  }
  std::vector<absl::string_view> parts = absl::StrSplit(body, 'x');
  if (parts.size() != 2) return bad("need exactly two extents");
  int hosts = 0;
  int per_host = 0;
  if (!absl::SimpleAtoi(parts[0], &hosts) || hosts < 1) {
    return bad(absl::StrCat("bad host count '", parts[0], "'"));
  }
  if (!absl::SimpleAtoi(parts[1], &per_host) || per_host < 1) {
    return bad(absl::StrCat("bad devices-per-host count '", parts[1], "'"));
  }
  if (per_host > topology.devices_per_host) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": mesh ", text, " needs ", per_host,
                     " devices per host but the cluster has ",
                     topology.devices_per_host, " per host"));
  }
  if (static_cast<int64_t>(first_host) + hosts > topology.num_hosts) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": mesh ", text, " needs hosts ", first_host, "..",
        static_cast<int64_t>(first_host) + hosts - 1, " but the cluster has ",
        topology.num_hosts, " hosts (0..", topology.num_hosts - 1, ")"));
  }
  DeviceMesh mesh;
  mesh.shape = {hosts, per_host};
  mesh.devices.reserve(static_cast<size_t>(hosts) * per_host);
  for (int h = 0; h < hosts; ++h) {
    for (int g = 0; g < per_host; ++g) {
      mesh.devices.push_back((first_host + h) * topology.devices_per_host + g);
    }
  }
  return mesh;
}

absl::StatusOr<DeviceMesh> MeshFromDevices(absl::string_view devices,
                                           absl::string_view shape,
                                           const Topology& topology,
                                           absl::string_view flag) {
  DeviceMesh mesh;
  ASSIGN_OR_RETURN(mesh.shape, ParseMeshShape(shape, flag));
  for (absl::string_view part : absl::StrSplit(devices, ',')) {
    int device = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &device)) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": cannot parse device list \"", devices, "\": bad id '", part,
          "'; expected comma-separated device ids (host*G + local), e.g. "
          "0,1,4,5"));
    }
    mesh.devices.push_back(device);
  }
  absl::Status status = mesh.Validate(topology);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", status.message()));
  }
  return mesh;
}

DeviceMesh UnplacedMesh(const std::vector<int>& shape) {
  DeviceMesh mesh;
  mesh.shape = shape;
  int n = 1;
  for (int extent : shape) n *= extent;
  mesh.devices.resize(n);
  for (int d = 0; d < n; ++d) mesh.devices[d] = d;
  return mesh;
}

}  // namespace meshcast
