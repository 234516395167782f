#include "bench/cluster/collective_cases.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "util/bytes_text.h"
#include "util/status_macros.h"

namespace meshcast::bench {
namespace {

bool SplitsBuffer(absl::string_view op) {
  return op == "all_gather" || op == "reduce_scatter" || op == "all_to_all";
}

bool IsCollectiveOp(absl::string_view op) {
  const std::vector<std::string>& ops = CollectiveOps();
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

}  // namespace

const std::vector<std::string>& CollectiveOps() {
  static const auto* const kOps = new std::vector<std::string>{
      "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"};
  return *kOps;
}

absl::StatusOr<std::vector<std::string>> ParseCollectiveOps(
    absl::string_view text) {
  if (text == "all") return CollectiveOps();
  std::vector<std::string> ops;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    if (!IsCollectiveOp(part)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--collective_ops: unknown '", part, "'; allowed: all or ",
          absl::StrJoin(CollectiveOps(), ", ")));
    }
    ops.emplace_back(part);
  }
  if (ops.empty()) {
    return absl::InvalidArgumentError("--collective_ops: none given");
  }
  return ops;
}

double BusFactor(absl::string_view op, int n) {
  if (n < 1) return NAN;
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (SplitsBuffer(op)) return static_cast<double>(n - 1) / n;
  if (op == "broadcast") return 1.0;
  return NAN;
}

int64_t CollectiveCount(absl::string_view op, int64_t bytes,
                        int64_t element_size, int n) {
  if (!IsCollectiveOp(op) || bytes <= 0 || element_size <= 0 || n < 1) {
    return 0;
  }
  int64_t count = bytes / element_size;
  if (SplitsBuffer(op)) count -= count % n;
  return count;
}

absl::StatusOr<std::vector<int64_t>> ParseSizeList(absl::string_view text,
                                                   absl::string_view flag) {
  std::vector<int64_t> sizes;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    absl::StatusOr<int64_t> bytes = ParseBytes(part);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": ", bytes.status().message()));
    }
    if (*bytes < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": '", part, "' is not a positive byte count"));
    }
    sizes.push_back(*bytes);
  }
  if (sizes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": needs at least one size, e.g. 1MiB,16MiB,64MiB"));
  }
  return sizes;
}

std::string MeshShape::ToString() const {
  return absl::StrFormat("%dx%d", rows, cols);
}

absl::StatusOr<MeshShape> ParseMeshShape(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, 'x');
  MeshShape mesh;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &mesh.rows) ||
      !absl::SimpleAtoi(parts[1], &mesh.cols) || mesh.rows < 1 ||
      mesh.cols < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--collective_mesh: '", text,
        "' is not ROWSxCOLS (hosts x devices per host, each >= 1), e.g. 4x1 "
        "or 2x2"));
  }
  return mesh;
}

absl::StatusOr<v1::JobSpec> PinnedCollectiveSpec(
    const std::string& op, int64_t bytes, const MeshShape& mesh, int num_hosts,
    int devices_per_host, int iterations) {
  if (!IsCollectiveOp(op)) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective op '", op, "' is not one of ",
                     absl::StrJoin(CollectiveOps(), ", ")));
  }
  if (bytes < 1 || iterations < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective ", op, ": bytes (", bytes,
                     ") and iterations (", iterations, ") must be >= 1"));
  }
  if (mesh.ranks() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective mesh ", mesh.ToString(),
                     " has 1 device; a collective needs at least 2"));
  }
  if (mesh.rows > num_hosts || mesh.cols > devices_per_host) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "collective mesh %s needs %d hosts x %d devices; the cluster has %d x "
        "%d (start it with more --workers / --devices-per-worker, or pass a "
        "smaller --collective_mesh)",
        mesh.ToString(), mesh.rows, mesh.cols, num_hosts, devices_per_host));
  }
  v1::JobSpec spec;
  spec.set_name(absl::StrCat("bench collective ", op, " ", bytes, " B ",
                             mesh.ToString()));
  v1::CollectiveSpec& c = *spec.mutable_collective();
  c.set_op(op);
  v1::DeviceMesh& m = *c.mutable_mesh();
  m.add_shape(mesh.rows);
  m.add_shape(mesh.cols);
  for (int r = 0; r < mesh.rows; ++r) {
    for (int col = 0; col < mesh.cols; ++col) {
      m.add_devices(r * devices_per_host + col);
    }
  }
  m.set_first_host(-1);  // the device list is the placement
  c.set_size(absl::StrCat(bytes));
  c.set_dtype(v1::DTYPE_FLOAT32);
  c.set_reduction("sum");
  c.set_iterations(iterations);
  spec.set_verify(v1::VERIFY_MODE_FULL);
  return spec;
}

}  // namespace meshcast::bench
