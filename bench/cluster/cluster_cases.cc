#include "bench/cluster/cluster_cases.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "meshcast/v1/types.pb.h"

namespace meshcast::bench {
namespace {

// The paper's last dimension, scaled by size_mib / 2048 and kept >= 1.
int64_t ScaledExtent(int64_t full, double size_mib) {
  return std::max<int64_t>(1, std::llround(full * size_mib / 2048.0));
}

// Splits "a,b,1-to-m(2,2)" on the commas outside parentheses.
std::vector<std::string> SplitNames(absl::string_view names) {
  std::vector<std::string> out;
  std::string current;
  int depth = 0;
  for (char c : names) {
    if (c == '(') ++depth;
    if (c == ')') depth = std::max(0, depth - 1);
    if (c == ',' && depth == 0) {
      if (!current.empty()) out.push_back(current);
      current.clear();
      continue;
    }
    if (c != ' ') current.push_back(c);
  }
  if (!current.empty()) out.push_back(current);
  return out;
}

// One mesh, rows on consecutive hosts from first_host, each on the first
// `cols` devices of its host.
void FillPinnedMesh(int first_host, int rows, int cols, int devices_per_host,
                    v1::DeviceMesh* mesh) {
  mesh->add_shape(rows);
  mesh->add_shape(cols);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      mesh->add_devices((first_host + r) * devices_per_host + c);
    }
  }
  mesh->set_first_host(-1);  // the device list is the placement
}

}  // namespace

int64_t ClusterCase::num_bytes() const {
  int64_t elements = 1;
  for (int64_t extent : shape) elements *= extent;
  return elements * 4;
}

int ClusterCase::devices_per_host_needed() const {
  return std::max(src_devices, dst_devices);
}

std::string ClusterCase::MeshesText() const {
  return absl::StrFormat("(%d,%d)->(%d,%d)", src_hosts, src_devices, dst_hosts,
                         dst_devices);
}

std::vector<ClusterCase> ScaledPublicCases(
    const std::vector<PublicSuiteCase>& suite, double size_mib) {
  std::vector<ClusterCase> cases;
  for (const PublicSuiteCase& c : suite) {
    std::vector<int64_t> shape = c.shape;
    shape.back() = ScaledExtent(shape.back(), size_mib);
    cases.push_back({c.name, std::move(shape), c.src_mesh.hosts,
                     c.src_mesh.devices_per_host, c.src_spec, c.dst_mesh.hosts,
                     c.dst_mesh.devices_per_host, c.dst_spec});
  }
  return cases;
}

absl::StatusOr<std::vector<ClusterCase>> SelectCases(
    const std::vector<ClusterCase>& cases, absl::string_view names) {
  if (names == "all") return cases;
  std::vector<ClusterCase> selected;
  std::vector<std::string> unknown;
  for (const std::string& name : SplitNames(names)) {
    auto it =
        std::find_if(cases.begin(), cases.end(),
                     [&](const ClusterCase& c) { return c.name == name; });
    if (it == cases.end()) {
      unknown.push_back(name);
    } else {
      selected.push_back(*it);
    }
  }
  if (!unknown.empty() || selected.empty()) {
    std::vector<std::string> allowed;
    for (const ClusterCase& c : cases) allowed.push_back(c.name);
    return absl::InvalidArgumentError(absl::StrCat(
        "--cases: ", unknown.empty() ? "no case named" : "unknown ",
        absl::StrJoin(unknown, ", "), "; allowed: all or ",
        absl::StrJoin(allowed, ", ")));
  }
  return selected;
}

absl::StatusOr<v1::ReshardSpec> PinnedReshardSpec(const ClusterCase& c,
                                                  const std::string& strategy,
                                                  int num_hosts,
                                                  int devices_per_host) {
  if (c.hosts_needed() > num_hosts ||
      c.devices_per_host_needed() > devices_per_host) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s %s needs %d hosts x %d devices; the cluster has %d x %d (start "
        "it with more --workers / --devices-per-worker, or drop the case)",
        c.name, c.MeshesText(), c.hosts_needed(), c.devices_per_host_needed(),
        num_hosts, devices_per_host));
  }
  v1::ReshardSpec spec;
  for (int64_t extent : c.shape) spec.mutable_tensor()->add_shape(extent);
  spec.mutable_tensor()->set_dtype(v1::DTYPE_INT32);
  FillPinnedMesh(0, c.src_hosts, c.src_devices, devices_per_host,
                 spec.mutable_src_mesh());
  FillPinnedMesh(c.src_hosts, c.dst_hosts, c.dst_devices, devices_per_host,
                 spec.mutable_dst_mesh());
  spec.mutable_src_spec()->set_text(c.src_spec);
  spec.mutable_dst_spec()->set_text(c.dst_spec);
  spec.set_strategy(strategy);
  return spec;
}

v1::ReshardSpec TinyReshardSpec(int64_t bytes) {
  v1::ReshardSpec spec;
  spec.mutable_tensor()->add_shape(std::max<int64_t>(1, bytes / 4));
  spec.mutable_tensor()->set_dtype(v1::DTYPE_INT32);
  for (v1::DeviceMesh* mesh :
       {spec.mutable_src_mesh(), spec.mutable_dst_mesh()}) {
    mesh->add_shape(1);
    mesh->add_shape(1);
    mesh->set_first_host(-1);  // placed by the controller
  }
  spec.mutable_src_spec()->set_text("R");
  spec.mutable_dst_spec()->set_text("R");
  spec.set_strategy("auto");
  return spec;
}

}  // namespace meshcast::bench
