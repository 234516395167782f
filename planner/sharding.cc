#include "planner/sharding.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"
#include "util/text_safety.h"

namespace meshcast {
namespace {

constexpr absl::string_view kAllowedForms =
    "allowed: R (replicated) or S<axes> (sharded over those mesh axes, most "
    "significant first), e.g. S0, S1, S01; one per tensor dimension, written "
    "S0RR or S0,R,R";

// Parses one token starting at text[*pos], advancing *pos past it. In
// compact form a token ends where the next R or S begins; `whole_piece`
// (comma form) requires the token to span all of `text`.
absl::StatusOr<DimSharding> ParseToken(absl::string_view text, size_t* pos,
                                       size_t position_offset,
                                       absl::string_view spec_text,
                                       int dimension, bool whole_piece) {
  const size_t start = *pos;
  const char lead = absl::ascii_toupper(text[start]);
  const auto unknown = [&](absl::string_view token) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown token '", token, "' at position ", start + position_offset + 1,
        " of ", QuotePrefix(spec_text), " (tensor dimension ", dimension, "); ",
        kAllowedForms));
  };
  DimSharding dim;
  if (lead == 'R') {
    *pos = start + 1;
  } else if (lead == 'S') {
    size_t end = start + 1;
    while (end < text.size() && absl::ascii_isdigit(text[end])) {
      dim.mesh_axes.push_back(text[end] - '0');
      ++end;
    }
    if (dim.mesh_axes.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token 'S' at position ", start + position_offset + 1,
                       " of ", QuotePrefix(spec_text), " (tensor dimension ",
                       dimension,
                       ") names no mesh axis; ", kAllowedForms));
    }
    *pos = end;
  } else {
    if (whole_piece) return unknown(text);
    // Report the run of characters up to the next R or S, e.g. 'X1'.
    size_t end = start + 1;
    while (end < text.size() && absl::ascii_toupper(text[end]) != 'R' &&
           absl::ascii_toupper(text[end]) != 'S') {
      ++end;
    }
    return unknown(text.substr(start, end - start));
  }
  if (whole_piece && *pos != text.size()) return unknown(text);
  return dim;
}

}  // namespace

absl::StatusOr<ShardingSpec> ShardingSpec::Parse(absl::string_view text) {
  const absl::string_view stripped = absl::StripAsciiWhitespace(text);
  if (stripped.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty sharding spec; ", kAllowedForms));
  }
  ShardingSpec spec;
  if (stripped.find(',') != absl::string_view::npos) {
    size_t piece_start = 0;
    while (piece_start <= stripped.size()) {
      size_t comma = stripped.find(',', piece_start);
      if (comma == absl::string_view::npos) comma = stripped.size();
      absl::string_view piece =
          stripped.substr(piece_start, comma - piece_start);
      // Keep positions exact while tolerating "S0, R, R".
      size_t offset = piece_start;
      while (!piece.empty() && absl::ascii_isspace(piece.front())) {
        piece.remove_prefix(1);
        ++offset;
      }
      while (!piece.empty() && absl::ascii_isspace(piece.back())) {
        piece.remove_suffix(1);
      }
      if (piece.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "empty token at position ", offset + 1, " of ",
            QuotePrefix(stripped), " (tensor dimension ", spec.rank(), "); ",
            kAllowedForms));
      }
      size_t pos = 0;
      ASSIGN_OR_RETURN(DimSharding dim,
                       ParseToken(piece, &pos, offset, stripped, spec.rank(),
                                  /*whole_piece=*/true));
      spec.dims.push_back(std::move(dim));
      piece_start = comma + 1;
    }
  } else {
    size_t pos = 0;
    while (pos < stripped.size()) {
      ASSIGN_OR_RETURN(DimSharding dim,
                       ParseToken(stripped, &pos, 0, stripped, spec.rank(),
                                  /*whole_piece=*/false));
      spec.dims.push_back(std::move(dim));
    }
  }
  // A mesh axis sharding two dimensions (or one twice) would give a device
  // two different pieces of the same index space.
  std::vector<int> dim_of_axis(10, -1);
  for (int d = 0; d < spec.rank(); ++d) {
    for (int axis : spec.dims[d].mesh_axes) {
      if (dim_of_axis[axis] != -1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "duplicate mesh axis ", axis, " in ", QuotePrefix(stripped),
            ": used by tensor dimension ", dim_of_axis[axis],
            dim_of_axis[axis] == d ? " twice" : absl::StrCat(" and ", d),
            "; each mesh axis may shard at most one dimension, once"));
      }
      dim_of_axis[axis] = d;
    }
  }
  return spec;
}

std::string ShardingSpec::ToString() const {
  std::string out;
  for (const DimSharding& dim : dims) {
    if (dim.mesh_axes.empty()) {
      out += 'R';
    } else {
      absl::StrAppend(&out, "S", absl::StrJoin(dim.mesh_axes, ""));
    }
  }
  return out;
}

absl::Status ShardingSpec::Validate(const TensorSpec& tensor,
                                    const DeviceMesh& mesh) const {
  if (rank() != static_cast<int>(tensor.shape.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec ", ToString(), " has ", rank(),
        " dimension(s) but the tensor shape ", absl::StrJoin(tensor.shape, "x"),
        " has ", tensor.shape.size(),
        "; give one entry (R or S<axes>) per tensor dimension"));
  }
  std::vector<bool> used(10, false);
  for (int d = 0; d < rank(); ++d) {
    for (int axis : dims[d].mesh_axes) {
      if (axis < 0 || axis >= mesh.rank()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "spec ", ToString(), " shards tensor dimension ", d,
            " over mesh axis ", axis, " but the mesh ",
            absl::StrJoin(mesh.shape, "x"), " has axes 0..", mesh.rank() - 1));
      }
      if (used[axis]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "spec ", ToString(), " uses mesh axis ", axis, " more than once"));
      }
      used[axis] = true;
    }
  }
  return absl::OkStatus();
}

int64_t NumShards(const DimSharding& dim, const DeviceMesh& mesh) {
  int64_t count = 1;
  for (int axis : dim.mesh_axes) count *= mesh.shape[axis];
  return count;
}

Interval ShardInterval(int64_t extent, int64_t num_shards, int64_t k) {
  const int64_t chunk = (extent + num_shards - 1) / num_shards;
  const int64_t begin = std::min(k * chunk, extent);
  const int64_t end = std::min(begin + chunk, extent);
  return Interval{begin, end};
}

int64_t ShardIndex(const DimSharding& dim, const DeviceMesh& mesh, int index) {
  const std::vector<int> coords = mesh.CoordsOf(index);
  int64_t k = 0;
  for (int axis : dim.mesh_axes) k = k * mesh.shape[axis] + coords[axis];
  return k;
}

Box DeviceBox(const TensorSpec& tensor, const DeviceMesh& mesh,
              const ShardingSpec& spec, int index) {
  Box box(tensor.shape.size());
  const std::vector<int> coords = mesh.CoordsOf(index);
  for (size_t d = 0; d < box.size(); ++d) {
    const DimSharding& dim = spec.dims[d];
    int64_t k = 0;
    for (int axis : dim.mesh_axes) k = k * mesh.shape[axis] + coords[axis];
    box[d] = ShardInterval(tensor.shape[d], NumShards(dim, mesh), k);
  }
  return box;
}

absl::StatusOr<std::vector<Tile>> ComputeTiles(const TensorSpec& tensor,
                                               const DeviceMesh& mesh,
                                               const ShardingSpec& spec) {
  RETURN_IF_ERROR(spec.Validate(tensor, mesh));
  int64_t mesh_size = 1;
  for (int extent : mesh.shape) {
    if (extent < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh ", mesh.ToString(), ": extents must be >= 1"));
    }
    mesh_size *= extent;
  }
  if (mesh.shape.empty() || mesh_size != mesh.num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh ", mesh.ToString(), ": shape and device count disagree"));
  }
  for (int64_t extent : tensor.shape) {
    if (extent < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor shape ", absl::StrJoin(tensor.shape, "x"),
                       ": extents must be >= 1"));
    }
  }
  // Tiles are identified by their shard index per dimension, flattened
  // row-major; a mesh axis shards one dimension at most, so the grid has at
  // most mesh.num_devices() cells.
  const int rank = spec.rank();
  std::vector<int64_t> shards(rank);
  int64_t cells = 1;
  for (int d = 0; d < rank; ++d) {
    shards[d] = NumShards(spec.dims[d], mesh);
    cells *= shards[d];
  }
  std::vector<int> tile_of_cell(cells, -1);
  std::vector<int64_t> cell_of_tile;
  std::vector<Tile> tiles;
  for (int index = 0; index < mesh.num_devices(); ++index) {
    const std::vector<int> coords = mesh.CoordsOf(index);
    int64_t cell = 0;
    Box box(rank);
    for (int d = 0; d < rank; ++d) {
      int64_t k = 0;
      for (int axis : spec.dims[d].mesh_axes) {
        k = k * mesh.shape[axis] + coords[axis];
      }
      cell = cell * shards[d] + k;
      box[d] = ShardInterval(tensor.shape[d], shards[d], k);
    }
    if (IsEmpty(box)) continue;
    if (tile_of_cell[cell] == -1) {
      tile_of_cell[cell] = static_cast<int>(tiles.size());
      cell_of_tile.push_back(cell);
      tiles.push_back(Tile{std::move(box), {}});
    }
    tiles[tile_of_cell[cell]].devices.push_back(mesh.devices[index]);
  }
  for (Tile& tile : tiles) std::sort(tile.devices.begin(), tile.devices.end());
  // Grid order (row-major over tensor dimensions) makes the result
  // independent of how the mesh lists its devices.
  std::vector<int> order(tiles.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return cell_of_tile[a] < cell_of_tile[b]; });
  std::vector<Tile> sorted;
  sorted.reserve(tiles.size());
  for (int i : order) sorted.push_back(std::move(tiles[i]));
  return sorted;
}

}  // namespace meshcast
