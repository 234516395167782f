#include "planner/placement.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

// What one placement attempt may use: devices other jobs hold and hosts that
// are down. Empty for the "does it ever fit" check.
struct Availability {
  const absl::flat_hash_set<int>* busy = nullptr;
  const absl::flat_hash_set<int>* unavailable_hosts = nullptr;

  bool DeviceBusy(int device) const {
    return busy != nullptr && busy->contains(device);
  }
  bool HostDown(int host) const {
    return unavailable_hosts != nullptr && unavailable_hosts->contains(host);
  }
};

std::string ClusterText(const Topology& topology) {
  return absl::StrCat(topology.num_hosts, " hosts x ",
                      topology.devices_per_host, " devices");
}

bool IsFixed(const MeshRequest& mesh) {
  return !mesh.devices.empty() || mesh.first_host >= 0;
}

int64_t ShapeProduct(const std::vector<int>& shape) {
  int64_t n = 1;
  for (int d : shape) n *= d;
  return n;
}

// Rows and columns of a mesh the controller lays out one row per host.
std::pair<int, int> RowsCols(const MeshRequest& mesh) {
  if (mesh.shape.size() == 1) return {1, mesh.shape[0]};
  return {mesh.shape[0], mesh.shape[1]};
}

// A mesh placed so far, for the job's later meshes to look at.
struct PlacedMesh {
  DeviceMesh mesh;
  absl::flat_hash_set<int> hosts;
  absl::flat_hash_set<int> devices;
};

// Everything the job's meshes placed so far occupy, and what they are called
// (in placement order) for the disjoint-hosts message.
struct PlacedSoFar {
  absl::flat_hash_set<int> hosts;
  absl::flat_hash_set<int> devices;
  std::vector<std::string> names;         // e.g. "src_mesh"
  std::vector<std::string> descriptions;  // e.g. "src_mesh 2x4"

  bool empty() const { return names.empty(); }
  void Add(const PlacedMesh& mesh, const std::string& name,
           const MeshRequest& request) {
    hosts.insert(mesh.hosts.begin(), mesh.hosts.end());
    devices.insert(mesh.devices.begin(), mesh.devices.end());
    names.push_back(name);
    descriptions.push_back(absl::StrCat(name, " ", request.ToString()));
  }
};

// "a", "a and b", "a, b and c".
std::string JoinWithAnd(const std::vector<std::string>& parts) {
  if (parts.size() <= 1) return absl::StrJoin(parts, "");
  std::vector<std::string> head(parts.begin(), parts.end() - 1);
  return absl::StrCat(absl::StrJoin(head, ", "), " and ", parts.back());
}

// Structural checks that need no cluster state beyond its size.
absl::Status CheckShape(absl::string_view name, const MeshRequest& mesh,
                        const Topology& topology) {
  if (mesh.shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ".shape is empty; give e.g. [2, 4]"));
  }
  for (int d : mesh.shape) {
    if (d < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".shape ", mesh.ToString(), " has an extent < 1"));
    }
  }
  const bool placed_by_us = mesh.devices.empty() && mesh.shape.size() <= 2;
  // Meshes the controller lays out get the more telling per-host messages
  // below.
  if (!placed_by_us && ShapeProduct(mesh.shape) > topology.num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " ", mesh.ToString(), " needs ", ShapeProduct(mesh.shape),
        " devices; cluster has ", ClusterText(topology)));
  }
  if (!mesh.devices.empty()) {
    if (static_cast<int64_t>(mesh.devices.size()) != ShapeProduct(mesh.shape)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ".devices has ", mesh.devices.size(), " ids but shape ",
          absl::StrJoin(mesh.shape, "x"), " needs ", ShapeProduct(mesh.shape)));
    }
    absl::flat_hash_set<int> seen;
    for (int d : mesh.devices) {
      if (d < 0 || d >= topology.num_devices()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ".devices: device ", d,
                         " is outside the cluster (", ClusterText(topology),
                         ": ids 0..", topology.num_devices() - 1, ")"));
      }
      if (!seen.insert(d).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ".devices lists device ", d, " twice"));
      }
    }
    return absl::OkStatus();
  }
  if (mesh.shape.size() > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " ", mesh.ToString(),
        ": the controller places 1-D and 2-D meshes (hosts x devices); list "
        "the devices of a ",
        mesh.shape.size(), "-D mesh explicitly"));
  }
  const auto [rows, cols] = RowsCols(mesh);
  if (cols > topology.devices_per_host) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " ", mesh.ToString(), " needs ", cols,
                     " devices per host; cluster has ", ClusterText(topology)));
  }
  if (mesh.first_host >= 0) {
    // 64-bit: a client may send first_host = INT_MAX.
    const int64_t last_host = int64_t{mesh.first_host} + rows - 1;
    if (last_host >= topology.num_hosts) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " ", mesh.ToString(), " needs hosts ", mesh.first_host, "..",
          last_host, "; cluster has ", ClusterText(topology), " (hosts 0..",
          topology.num_hosts - 1, ")"));
    }
  } else if (rows > topology.num_hosts) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " ", mesh.ToString(), " needs ", rows, " hosts with ", cols,
        " free devices; cluster has ", ClusterText(topology)));
  }
  return absl::OkStatus();
}

// Picks `cols` devices of `host` for one mesh row: free devices the job's
// other meshes do not use first, then (sharing permitted) their devices.
// Returns false when the host has too few.
bool PickRow(int host, int cols, const Topology& topology,
             const Availability& avail, const PlacedSoFar& placed,
             bool may_share_devices, std::vector<int>* row) {
  std::vector<int> fresh, shared;
  for (int local = 0; local < topology.devices_per_host; ++local) {
    const int device = host * topology.devices_per_host + local;
    if (placed.devices.contains(device)) {
      // The job's own other meshes do not make a device busy.
      if (may_share_devices) shared.push_back(device);
    } else if (!avail.DeviceBusy(device)) {
      fresh.push_back(device);
    }
  }
  if (static_cast<int>(fresh.size() + shared.size()) < cols) return false;
  row->clear();
  for (int d : fresh) {
    if (static_cast<int>(row->size()) == cols) break;
    row->push_back(d);
  }
  for (int d : shared) {
    if (static_cast<int>(row->size()) == cols) break;
    row->push_back(d);
  }
  std::sort(row->begin(), row->end());
  return true;
}

// Places one mesh given the job's meshes placed so far. Errors describe
// what is missing; the caller decides whether that is "never" or "not now".
absl::StatusOr<PlacedMesh> PlaceOne(absl::string_view name,
                                    const MeshRequest& mesh,
                                    const Topology& topology,
                                    const Availability& avail,
                                    const PlacedSoFar& placed_so_far,
                                    bool allow_overlap, bool share_hosts) {
  PlacedMesh placed;
  placed.mesh.shape = mesh.shape;
  if (!mesh.devices.empty()) {
    for (int d : mesh.devices) {
      const int host = topology.HostOf(d);
      if (avail.HostDown(host)) {
        return absl::UnavailableError(absl::StrCat(
            name, " device ", d, ": host ", host, " has no live worker"));
      }
      const bool own = placed_so_far.devices.contains(d);
      if (!own && avail.DeviceBusy(d)) {
        return absl::UnavailableError(
            absl::StrCat(name, " device ", d, " is held by another job"));
      }
    }
    placed.mesh.devices = mesh.devices;
  } else {
    const auto [rows, cols] = RowsCols(mesh);
    // A mesh the user fixed may share hosts and devices with the others; a
    // mesh the controller places stays off their hosts unless the job allows
    // overlap.
    const bool fixed = mesh.first_host >= 0;
    const bool avoid_other_hosts = !allow_overlap && !fixed;
    if (fixed) {
      for (int r = 0; r < rows; ++r) {
        const int host = mesh.first_host + r;
        if (avail.HostDown(host)) {
          return absl::UnavailableError(absl::StrCat(name, " ", mesh.ToString(),
                                                     ": host ", host,
                                                     " has no live worker"));
        }
        std::vector<int> row;
        if (!PickRow(host, cols, topology, avail, placed_so_far,
                     /*may_share_devices=*/true, &row)) {
          return absl::UnavailableError(
              absl::StrCat(name, " ", mesh.ToString(), ": host ", host,
                           " has fewer than ", cols, " free devices"));
        }
        placed.mesh.devices.insert(placed.mesh.devices.end(), row.begin(),
                                   row.end());
      }
    } else {
      // Rows by host: hosts of its own first; with share_hosts, then free
      // devices on the other meshes' hosts.
      std::map<int, std::vector<int>> rows_by_host;
      for (int pass = 0; pass < (share_hosts ? 2 : 1); ++pass) {
        for (int host = 0; host < topology.num_hosts &&
                           static_cast<int>(rows_by_host.size()) < rows;
             ++host) {
          if (avail.HostDown(host) || rows_by_host.contains(host)) continue;
          const bool theirs = placed_so_far.hosts.contains(host);
          if (pass == 0 && avoid_other_hosts && theirs) continue;
          if (pass == 1 && !theirs) continue;
          std::vector<int> row;
          if (!PickRow(host, cols, topology, avail, placed_so_far,
                       allow_overlap, &row)) {
            continue;
          }
          rows_by_host[host] = std::move(row);
        }
      }
      const int found = static_cast<int>(rows_by_host.size());
      for (const auto& [host, row] : rows_by_host) {
        placed.mesh.devices.insert(placed.mesh.devices.end(), row.begin(),
                                   row.end());
      }
      if (found < rows) {
        const bool others =
            avoid_other_hosts && !share_hosts && !placed_so_far.empty();
        if (others && rows + static_cast<int64_t>(placed_so_far.hosts.size()) >
                          topology.num_hosts) {
          // Would fit alone; the disjoint-hosts rule is what fails.
          std::vector<std::string> involved = {
              absl::StrCat(name, " ", mesh.ToString())};
          involved.insert(involved.end(), placed_so_far.descriptions.begin(),
                          placed_so_far.descriptions.end());
          return absl::InvalidArgumentError(absl::StrCat(
              JoinWithAnd(involved), " on disjoint hosts need ",
              rows + placed_so_far.hosts.size(), " hosts; cluster has ",
              ClusterText(topology),
              " (to share hosts: allow_overlap in the job, --allow-overlap "
              "for meshctl)"));
        }
        std::string apart;
        if (others) {
          std::vector<std::string> owners;
          for (const std::string& owner : placed_so_far.names) {
            owners.push_back(absl::StrCat(owner, "'s"));
          }
          apart = absl::StrCat(" apart from ", JoinWithAnd(owners));
        }
        return absl::UnavailableError(
            absl::StrCat(name, " ", mesh.ToString(), " needs ", rows,
                         " live hosts with ", cols, " free devices", apart));
      }
    }
  }
  for (int d : placed.mesh.devices) {
    placed.devices.insert(d);
    placed.hosts.insert(topology.HostOf(d));
  }
  return placed;
}

absl::StatusOr<Placement> PlaceImpl(const PlacementRequest& request,
                                    const Topology& topology,
                                    const Availability& avail) {
  const int n = static_cast<int>(request.meshes.size());
  // Fixed meshes first, so that placed meshes can steer around them.
  std::vector<int> order;
  for (int i = 0; i < n; ++i) {
    if (IsFixed(request.meshes[i])) order.push_back(i);
  }
  for (int i = 0; i < n; ++i) {
    if (!IsFixed(request.meshes[i])) order.push_back(i);
  }
  PlacedSoFar so_far;
  Placement result;
  result.meshes.resize(n);
  for (int i : order) {
    const std::string name = request.NameOf(i);
    ASSIGN_OR_RETURN(PlacedMesh mesh,
                     PlaceOne(name, request.meshes[i], topology, avail, so_far,
                              request.allow_overlap, request.share_hosts));
    so_far.Add(mesh, name, request.meshes[i]);
    result.meshes[i] = std::move(mesh.mesh);
  }
  result.devices.assign(so_far.devices.begin(), so_far.devices.end());
  std::sort(result.devices.begin(), result.devices.end());
  for (int d : result.devices) {
    const int host = topology.HostOf(d);
    if (result.hosts.empty() || result.hosts.back() != host) {
      result.hosts.push_back(host);
    }
  }
  return result;
}

}  // namespace

std::string MeshRequest::ToString() const {
  std::string text = absl::StrJoin(shape, "x");
  if (!devices.empty()) {
    absl::StrAppend(&text, "[", absl::StrJoin(devices, ","), "]");
  } else if (first_host >= 0) {
    absl::StrAppend(&text, "@", first_host);
  }
  return text;
}

std::string PlacementRequest::NameOf(int i) const {
  if (i >= 0 && i < static_cast<int>(names.size()) && !names[i].empty()) {
    return names[i];
  }
  return absl::StrCat("meshes[", i, "]");
}

absl::Status DeviceAllocator::CheckFits(const PlacementRequest& request,
                                        const Topology& topology) {
  return PlaceOnIdleCluster(request, topology).status();
}

absl::StatusOr<Placement> DeviceAllocator::PlaceOnIdleCluster(
    const PlacementRequest& request, const Topology& topology) {
  if (topology.num_hosts < 1 || topology.devices_per_host < 1) {
    return absl::FailedPreconditionError(
        "the cluster has no workers; start meshcast-worker on each host "
        "first");
  }
  if (request.meshes.empty()) {
    return absl::InvalidArgumentError(
        "the job asks for no meshes; a job places at least one");
  }
  for (int i = 0; i < static_cast<int>(request.meshes.size()); ++i) {
    RETURN_IF_ERROR(CheckShape(request.NameOf(i), request.meshes[i], topology));
  }
  absl::StatusOr<Placement> placement =
      PlaceImpl(request, topology, Availability{});
  if (!placement.ok()) {
    // On an idle cluster every shortage is permanent.
    return absl::InvalidArgumentError(placement.status().message());
  }
  return placement;
}

absl::StatusOr<Placement> DeviceAllocator::Place(
    const PlacementRequest& request, const Topology& topology,
    const absl::flat_hash_set<int>& unavailable_hosts) const {
  RETURN_IF_ERROR(CheckFits(request, topology));
  absl::StatusOr<Placement> placement =
      PlaceImpl(request, topology, Availability{&busy_, &unavailable_hosts});
  if (!placement.ok()) {
    return absl::UnavailableError(
        absl::StrCat("waiting for devices: ", placement.status().message()));
  }
  return placement;
}

absl::StatusOr<Placement> DeviceAllocator::Acquire(
    const PlacementRequest& request, const Topology& topology,
    const absl::flat_hash_set<int>& unavailable_hosts) {
  absl::StatusOr<Placement> placement =
      Place(request, topology, unavailable_hosts);
  if (placement.ok()) {
    busy_.insert(placement->devices.begin(), placement->devices.end());
  }
  return placement;
}

void DeviceAllocator::Release(const std::vector<int>& devices) {
  for (int d : devices) busy_.erase(d);
}

}  // namespace meshcast
