// The cross-mesh resharding suite of docs/conventions.md (the paper's public
// microbenchmark; its cases come from bench/workloads/public_suite.txt),
// scaled down for a local cluster, and the reshard job specs cluster_bench
// submits for it.
//
//   ASSIGN_OR_RETURN(std::vector<PublicSuiteCase> suite, LoadPublicSuite());
//   std::vector<ClusterCase> all = ScaledPublicCases(suite, /*size_mib=*/64);
//   ASSIGN_OR_RETURN(std::vector<ClusterCase> cases,
//                    SelectCases(all, "case1,case7,1-to-m(2,2)"));
//   ASSIGN_OR_RETURN(v1::ReshardSpec spec,
//                    PinnedReshardSpec(cases[0], "meshcast", 4, 4));
//
// Scaling follows bench/netcluster: each case's full-size tensor (the 2 GiB
// int32 1024x1024x512 for most) keeps its leading dimensions and its last
// becomes round(last * size_mib / 2048) (at least 1), so every spec splits
// the same dimensions as in the paper; case6's 3072x1024x170 and 1-to-m's
// 1024x1024x256 (half the size, as the paper does) scale the same way. Meshes
// are pinned as in reshard_plan_bench: the source mesh on the first hosts,
// the destination on the next ones, each row on the first devices of its
// host.
//
// Thread safety: pure functions; thread-safe.
#ifndef MESHCAST_BENCH_CLUSTER_CLUSTER_CASES_H_
#define MESHCAST_BENCH_CLUSTER_CLUSTER_CASES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bench/workloads/public_suite.h"
#include "meshcast/v1/job.pb.h"

namespace meshcast::bench {

struct ClusterCase {
  std::string name;            // "case1", "1-to-m(2,2)"
  std::vector<int64_t> shape;  // int32 elements
  int src_hosts = 1;           // source mesh (hosts, devices per host)
  int src_devices = 1;
  std::string src_spec;
  int dst_hosts = 1;
  int dst_devices = 1;
  std::string dst_spec;

  int64_t num_bytes() const;  // 4 bytes per element
  int hosts_needed() const { return src_hosts + dst_hosts; }
  int devices_per_host_needed() const;
  // "(2,4)->(2,4)"
  std::string MeshesText() const;
};

// Every case of `suite` (the public suite file: case1-7, case9, the seven
// 1-to-m targets), with the 2 GiB tensor scaled to about size_mib MiB.
// size_mib must be > 0.
std::vector<ClusterCase> ScaledPublicCases(
    const std::vector<PublicSuiteCase>& suite, double size_mib);

// The cases named in `names` (comma-separated, in the order given; "all"
// for every case; names such as 1-to-m(2,2) keep their commas).
// INVALID_ARGUMENT naming the unknown names and listing the allowed ones.
absl::StatusOr<std::vector<ClusterCase>> SelectCases(
    const std::vector<ClusterCase>& cases, absl::string_view names);

// The case as a reshard job spec with explicit device lists on a cluster of
// num_hosts x devices_per_host (device id = host * devices_per_host +
// local). INVALID_ARGUMENT when the cluster is too small, naming the case
// and what it needs.
absl::StatusOr<v1::ReshardSpec> PinnedReshardSpec(const ClusterCase& c,
                                                  const std::string& strategy,
                                                  int num_hosts,
                                                  int devices_per_host);

// A tiny job for control-plane figures: a 1-D int32 tensor of `bytes`
// (rounded down to whole elements, at least one), replicated on one device
// to replicated on one other, meshes placed by the controller (disjoint
// hosts), strategy auto.
v1::ReshardSpec TinyReshardSpec(int64_t bytes);

}  // namespace meshcast::bench

#endif  // MESHCAST_BENCH_CLUSTER_CLUSTER_CASES_H_
