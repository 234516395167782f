// Fuzz target: the text parsers users type into — sharding specs ("S0,R"),
// meshes ("2x4@1", explicit device lists), byte counts ("256MiB") — and
// the planner's use of what they accept. Input: lines of text; line 1 a
// spec, line 2 a mesh, line 3 devices, line 4 a byte count, line 5 a shape.
// Invariants: nothing crashes; an accepted spec prints back to a form that
// parses to the same spec; an accepted mesh validates against the topology
// it was parsed for.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "planner/mesh.h"
#include "planner/sharding.h"
#include "planner/topology.h"
#include "util/bytes_text.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  lines.resize(5);
  using meshcast::ShardingSpec;
  absl::StatusOr<ShardingSpec> spec = ShardingSpec::Parse(lines[0]);
  if (spec.ok()) {
    absl::StatusOr<ShardingSpec> again = ShardingSpec::Parse(spec->ToString());
    Check(again.ok() && *again == *spec);
  }
  const meshcast::Topology topology = meshcast::Topology::FromGbps(4, 8, 100, 400);
  absl::StatusOr<meshcast::DeviceMesh> mesh =
      meshcast::ParseMesh(lines[1], topology);
  if (mesh.ok()) Check(mesh->Validate(topology).ok());
  absl::StatusOr<meshcast::DeviceMesh> listed =
      meshcast::MeshFromDevices(lines[2], lines[1], topology);
  if (listed.ok()) Check(listed->Validate(topology).ok());
  (void)meshcast::ParseClusterShape(lines[1]);
  absl::StatusOr<int64_t> bytes = meshcast::ParseBytes(lines[3]);
  if (bytes.ok()) Check(*bytes >= 0);
  // A spec and a mesh that parse, checked against a small tensor: the
  // planner's validation of the combination must not crash either.
  if (spec.ok() && mesh.ok()) {
    std::vector<int64_t> shape;
    for (absl::string_view extent : absl::StrSplit(lines[4], 'x')) {
      int64_t value = 0;
      if (!absl::SimpleAtoi(extent, &value) || value < 1 || value > 64) break;
      shape.push_back(value);
    }
    meshcast::TensorSpec tensor;
    tensor.shape = shape;
    (void)spec->Validate(tensor, *mesh);
  }
  return 0;
}
