// ShardingSpec and tiles.
//
// A spec has one entry per tensor dimension: R (replicated), S0 / S1 / ...
// (sharded over that mesh axis), S01 (sharded over axes 0 then 1, axis 0 most
// significant). Written "S0RR" or "S0,R,R". A dimension of length L split n
// ways uses chunk = ceil(L/n); shard k covers [k*chunk, min((k+1)*chunk, L)),
// possibly empty (torch.chunk / DTensor semantics).
//
//   ASSIGN_OR_RETURN(ShardingSpec spec, ShardingSpec::Parse("S0,R,R"));
//   ASSIGN_OR_RETURN(std::vector<Tile> tiles,
//                    ComputeTiles(tensor, mesh, spec));
//
// Thread safety: plain value types and pure functions.
#ifndef MESHCAST_PLANNER_SHARDING_H_
#define MESHCAST_PLANNER_SHARDING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/mesh.h"
#include "planner/tensor.h"

namespace meshcast {

struct DimSharding {
  // Mesh axes this tensor dimension is split over, most significant first.
  // Empty means replicated.
  std::vector<int> mesh_axes;
  bool operator==(const DimSharding&) const = default;
};

struct ShardingSpec {
  std::vector<DimSharding> dims;

  // Accepts "S0RR", "S0,R,R", "RS01R", "R"; errors name the offending token
  // and the allowed forms. A mesh axis may be used by one dimension only.
  static absl::StatusOr<ShardingSpec> Parse(absl::string_view text);
  std::string ToString() const;  // canonical compact form, e.g. "S0RR"
  int rank() const { return static_cast<int>(dims.size()); }
  bool operator==(const ShardingSpec&) const = default;

  // Checks rank matches the tensor and every axis exists in the mesh.
  absl::Status Validate(const TensorSpec& tensor, const DeviceMesh& mesh) const;
};

// The box of tensor elements that mesh device `index` (position in
// mesh.devices) holds under `spec`. Possibly empty.
Box DeviceBox(const TensorSpec& tensor, const DeviceMesh& mesh,
              const ShardingSpec& spec, int index);

// How many pieces `dim` cuts its tensor dimension into on `mesh`: the product
// of the extents of its mesh axes (1 when replicated). Axes must exist.
int64_t NumShards(const DimSharding& dim, const DeviceMesh& mesh);

// Shard `k` of a dimension of length `extent` split `num_shards` ways:
// [k*chunk, min((k+1)*chunk, extent)) with chunk = ceil(extent/num_shards),
// clamped so that trailing shards are empty ranges at `extent`.
Interval ShardInterval(int64_t extent, int64_t num_shards, int64_t k);

// Index of the shard of dimension `dim` that mesh device `index` holds
// (mixed radix over the dimension's mesh axes, most significant first).
int64_t ShardIndex(const DimSharding& dim, const DeviceMesh& mesh, int index);

// A distinct piece of the tensor and every device holding a replica of it.
struct Tile {
  Box box;
  std::vector<int> devices;  // global device ids, ascending
};

// Every distinct non-empty tile of the layout, with its replicas.
absl::StatusOr<std::vector<Tile>> ComputeTiles(const TensorSpec& tensor,
                                               const DeviceMesh& mesh,
                                               const ShardingSpec& spec);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_SHARDING_H_
