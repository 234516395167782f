// The public reshard suite (docs/conventions.md): the cross-mesh resharding
// paper's reference workloads, read from their one copy,
// bench/workloads/public_suite.txt (its header describes the format). The
// planner's and meshctl's tests, reshard_plan_bench, cluster_bench and
// gpu_bench all take their cases from here instead of writing them out.
//
//   ASSIGN_OR_RETURN(std::vector<PublicSuiteCase> suite, LoadPublicSuite());
//   for (const PublicSuiteCase& c : CasesTagged(suite, "paper")) {
//     // c.shape (int32), c.src_mesh.At(0) "2x4@0", c.src_spec "RS0R",
//     // c.dst_mesh.At(c.dst_first_host()) "2x4@2", c.dst_spec "S0RR"
//   }
//
// Where the file is: LoadPublicSuite() reads DefaultPublicSuitePath(), which
// is $MESHCAST_PUBLIC_SUITE when set, else the file in the source tree this
// binary was built from (a compile definition), so tests and benchmarks find
// it from any working directory; benchmarks also take a flag naming it.
//
// Errors: NOT_FOUND when the file cannot be read (naming it and the
// variable); INVALID_ARGUMENT for a malformed file, as "FILE:LINE: column
// 'NAME': what is wrong", for duplicate names and for a file without cases.
//
// Thread safety: pure functions (LoadPublicSuite reads the file each call);
// thread-safe.
#ifndef MESHCAST_BENCH_WORKLOADS_PUBLIC_SUITE_H_
#define MESHCAST_BENCH_WORKLOADS_PUBLIC_SUITE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshcast {

// The environment variable that overrides where the suite file is.
inline constexpr char kPublicSuiteEnv[] = "MESHCAST_PUBLIC_SUITE";

// A mesh of the suite: `hosts` rows of `devices_per_host` devices each.
struct SuiteMesh {
  int hosts = 0;
  int devices_per_host = 0;

  int num_devices() const { return hosts * devices_per_host; }
  // "2x4", meshctl's --src-mesh syntax.
  std::string ToString() const;
  // "2x4@2": the mesh pinned to start at `first_host`.
  std::string At(int first_host) const;
  bool operator==(const SuiteMesh& other) const = default;
};

struct PublicSuiteCase {
  std::string name;               // "case1", "1-to-m(2,2)"
  std::vector<std::string> tags;  // "paper", "1-to-m", "gpu"
  std::vector<int64_t> shape;     // full size, int32 elements
  SuiteMesh src_mesh;             // starts at host 0
  std::string src_spec;
  SuiteMesh dst_mesh;             // starts at host dst_first_host()
  std::string dst_spec;
  std::vector<int64_t> small_shape;  // the cluster tests' few-MiB variant

  bool HasTag(absl::string_view tag) const;
  // The next free host after the source mesh.
  int dst_first_host() const { return src_mesh.hosts; }
  // Bytes of the full-size tensor (4 per element).
  int64_t num_bytes() const;
};

// "1024x1024x512", meshctl's --shape syntax.
std::string ShapeText(const std::vector<int64_t>& shape);

// $MESHCAST_PUBLIC_SUITE when set and non-empty, else the source tree's
// bench/workloads/public_suite.txt.
std::string DefaultPublicSuitePath();

// Reads and parses the suite file at `path` / at DefaultPublicSuitePath().
absl::StatusOr<std::vector<PublicSuiteCase>> LoadPublicSuite(
    const std::string& path);
absl::StatusOr<std::vector<PublicSuiteCase>> LoadPublicSuite();

// Parses the file's text; `file` names it in errors.
absl::StatusOr<std::vector<PublicSuiteCase>> ParsePublicSuite(
    absl::string_view text, absl::string_view file);

// The cases carrying `tag`, in file order.
std::vector<PublicSuiteCase> CasesTagged(
    const std::vector<PublicSuiteCase>& cases, absl::string_view tag);

}  // namespace meshcast

#endif  // MESHCAST_BENCH_WORKLOADS_PUBLIC_SUITE_H_
