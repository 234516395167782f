// The rows of cluster_bench's `collective` section: which collectives it
// runs, at which sizes, on which mesh, and the job spec it submits for each;
// shared with gloo_collective_baseline so that both count sizes and bus
// bandwidth the same way (nccl-tests' definitions, as the `collective` job
// kind reports them).
//
//   ASSIGN_OR_RETURN(std::vector<std::string> ops,
//                    ParseCollectiveOps("all_reduce,broadcast"));
//   ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
//                    ParseSizeList("1MiB,16MiB", "collective_sizes"));
//   ASSIGN_OR_RETURN(MeshShape mesh, ParseMeshShape("4x1"));
//   ASSIGN_OR_RETURN(v1::JobSpec spec,
//                    PinnedCollectiveSpec("all_reduce", sizes[0], mesh,
//                                         /*num_hosts=*/4,
//                                         /*devices_per_host=*/4,
//                                         /*iterations=*/5));
//
// Sizes follow nccl-tests: the per-rank output of all_reduce and all_gather,
// the per-rank input of reduce_scatter, the per-rank send buffer of
// all_to_all, the buffer of broadcast; all_gather, reduce_scatter and
// all_to_all round the element count down to a multiple of the rank count.
// Bus bandwidth = algbw x factor: all_reduce 2(n-1)/n; all_gather,
// reduce_scatter, all_to_all (n-1)/n; broadcast 1.
//
// Errors: INVALID_ARGUMENT naming the flag or field and the allowed values.
//
// Thread safety: pure functions; thread-safe.
#ifndef MESHCAST_BENCH_CLUSTER_COLLECTIVE_CASES_H_
#define MESHCAST_BENCH_CLUSTER_COLLECTIVE_CASES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshcast/v1/job.pb.h"

namespace meshcast::bench {

// all_reduce, all_gather, reduce_scatter, all_to_all, broadcast.
const std::vector<std::string>& CollectiveOps();

// The ops in `text` (comma-separated, in the order given; "all" for every
// op). INVALID_ARGUMENT naming an unknown op and listing the allowed ones.
absl::StatusOr<std::vector<std::string>> ParseCollectiveOps(
    absl::string_view text);

// nccl-tests' bus-bandwidth factor of `op` on n ranks; NaN for an unknown
// op or n < 1.
double BusFactor(absl::string_view op, int n);

// Elements per rank that run for `bytes` of `element_size`-byte elements on
// n ranks (rounded down to a multiple of n where the op splits the buffer);
// 0 for an unknown op or non-positive arguments.
int64_t CollectiveCount(absl::string_view op, int64_t bytes,
                        int64_t element_size, int n);

// Byte counts as written on command lines ("1MiB,16MiB,64MiB", "4096"),
// each > 0. `flag` names the flag in errors.
absl::StatusOr<std::vector<int64_t>> ParseSizeList(absl::string_view text,
                                                   absl::string_view flag);

// A 2-D mesh: rows on consecutive hosts, cols devices on each.
struct MeshShape {
  int rows = 1;
  int cols = 1;
  int ranks() const { return rows * cols; }
  std::string ToString() const;  // "4x1"
};

// "4x1", "2x2" (rows x devices per row, each >= 1).
absl::StatusOr<MeshShape> ParseMeshShape(absl::string_view text);

// A `collective` job of `op` with `bytes` float32 (as the size string) on
// `mesh` pinned with explicit devices: row r on host r, columns on the
// host's first devices (device id = host * devices_per_host + local), rank
// order row-major; reduction sum, `iterations` back to back, full
// verification. INVALID_ARGUMENT when the mesh does not fit the cluster,
// naming what it needs, or for an unknown op, bytes < 1 or iterations < 1.
absl::StatusOr<v1::JobSpec> PinnedCollectiveSpec(
    const std::string& op, int64_t bytes, const MeshShape& mesh, int num_hosts,
    int devices_per_host, int iterations);

}  // namespace meshcast::bench

#endif  // MESHCAST_BENCH_CLUSTER_COLLECTIVE_CASES_H_
