#include "planner/unit_task.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

absl::Status Prefixed(absl::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

}  // namespace

absl::Status ReshardProblem::Validate(const Topology& topology) const {
  RETURN_IF_ERROR(topology.Validate());
  if (tensor.shape.empty()) {
    return absl::InvalidArgumentError("tensor: shape has no dimensions");
  }
  for (int64_t extent : tensor.shape) {
    if (extent < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor: shape ", absl::StrJoin(tensor.shape, "x"),
                       " has an extent < 1"));
    }
  }
  if (DTypeSize(tensor.dtype) == 0) {
    return absl::InvalidArgumentError("tensor: unknown dtype");
  }
  RETURN_IF_ERROR(Prefixed("source mesh: ", src_mesh.Validate(topology)));
  RETURN_IF_ERROR(Prefixed("destination mesh: ", dst_mesh.Validate(topology)));
  RETURN_IF_ERROR(
      Prefixed("source spec: ", src_spec.Validate(tensor, src_mesh)));
  RETURN_IF_ERROR(
      Prefixed("destination spec: ", dst_spec.Validate(tensor, dst_mesh)));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<UnitTask>> ComputeUnitTasks(
    const ReshardProblem& problem, int tensor_index) {
  const TensorSpec& tensor = problem.tensor;
  ASSIGN_OR_RETURN(std::vector<Tile> src_tiles,
                   ComputeTiles(tensor, problem.src_mesh, problem.src_spec));
  ASSIGN_OR_RETURN(std::vector<Tile> dst_tiles,
                   ComputeTiles(tensor, problem.dst_mesh, problem.dst_spec));
  const int rank = static_cast<int>(tensor.shape.size());

  // The source tiles form a grid: along dimension d the tensor is cut into
  // src_shards[d] chunks of src_chunk[d] elements (the last ones possibly
  // short or empty). Index source tiles by their grid cell so a destination
  // tile can find the few it overlaps by arithmetic instead of a search.
  std::vector<int64_t> src_shards(rank);
  std::vector<int64_t> src_chunk(rank);
  int64_t cells = 1;
  for (int d = 0; d < rank; ++d) {
    src_shards[d] = NumShards(problem.src_spec.dims[d], problem.src_mesh);
    src_chunk[d] = (tensor.shape[d] + src_shards[d] - 1) / src_shards[d];
    cells *= src_shards[d];
  }
  std::vector<const Tile*> src_tile_of_cell(cells, nullptr);
  for (const Tile& tile : src_tiles) {
    int64_t cell = 0;
    for (int d = 0; d < rank; ++d) {
      cell = cell * src_shards[d] + tile.box[d].begin / src_chunk[d];
    }
    src_tile_of_cell[cell] = &tile;
  }

  const int64_t element_bytes = DTypeSize(tensor.dtype);
  std::vector<UnitTask> tasks;
  std::vector<int64_t> first(rank);
  std::vector<int64_t> last(rank);
  std::vector<int64_t> k(rank);
  for (const Tile& dst : dst_tiles) {
    for (int d = 0; d < rank; ++d) {
      first[d] = dst.box[d].begin / src_chunk[d];
      last[d] = (dst.box[d].end - 1) / src_chunk[d];
      k[d] = first[d];
    }
    // Odometer over the touched source cells, last dimension fastest.
    while (true) {
      int64_t cell = 0;
      for (int d = 0; d < rank; ++d) cell = cell * src_shards[d] + k[d];
      const Tile* src = src_tile_of_cell[cell];
      if (src != nullptr) {
        UnitTask task;
        task.tensor = tensor_index;
        task.slice = Intersect(dst.box, src->box);
        // Source tiles partition the tensor, so a device holds the slice
        // exactly when it holds this source tile.
        std::set_difference(dst.devices.begin(), dst.devices.end(),
                            src->devices.begin(), src->devices.end(),
                            std::back_inserter(task.receivers));
        if (!task.receivers.empty() && !IsEmpty(task.slice)) {
          task.senders.assign(src->devices.begin(), src->devices.end());
          task.bytes = NumElements(task.slice) * element_bytes;
          tasks.push_back(std::move(task));
        }
      }
      int d = rank - 1;
      while (d >= 0 && k[d] == last[d]) {
        k[d] = first[d];
        --d;
      }
      if (d < 0) break;
      ++k[d];
    }
  }
  return tasks;
}

}  // namespace meshcast
