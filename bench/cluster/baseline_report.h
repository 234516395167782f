// The machine-readable line gloo_collective_baseline prints per measured
// collective and cluster_bench reads back: one line, `key=value` fields
// separated by spaces, after the word `gloo_baseline`, so the output can be
// grepped, diffed and parsed without a JSON library:
//
//   gloo_baseline op=all_reduce algorithm=ring ranks=4 bytes=1048576
//     count=262144 type=float32 iters=10 median_s=0.00123 min_s=0.0011
//     max_s=0.0015 status=ok                        (one line in the output)
//
//   std::cout << FormatBaselineLine(result) << "\n";
//   ASSIGN_OR_RETURN(std::vector<BaselineResult> all,
//                    ParseBaselineOutput(captured_stdout));
//
// Times are seconds per iteration: each iteration's time is its slowest
// rank's (as the `collective` job kind takes a step's time), and the line
// gives their median, minimum and maximum. status is `ok`, `unsupported`
// (this Gloo has no such collective: no times) or `mismatch` (the output
// was wrong; times still given).
//
// Errors: INVALID_ARGUMENT naming the line and the field for a malformed
// `gloo_baseline` line; other lines are ignored.
//
// Thread safety: pure functions; thread-safe.
#ifndef MESHCAST_BENCH_CLUSTER_BASELINE_REPORT_H_
#define MESHCAST_BENCH_CLUSTER_BASELINE_REPORT_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshcast::bench {

struct BaselineResult {
  std::string op;         // all_reduce, ... (as collective_cases.h names them)
  std::string algorithm;  // what Gloo ran: ring, halving_doubling, ...
  int ranks = 0;
  int64_t bytes = 0;  // nccl-tests' size: count x element size
  int64_t count = 0;  // elements per rank (nccl-tests' count)
  std::string type = "float32";
  int iters = 0;
  double median_seconds = NAN;
  double min_seconds = NAN;
  double max_seconds = NAN;
  std::string status = "ok";
  bool ok() const { return status == "ok"; }
};

std::string FormatBaselineLine(const BaselineResult& result);

// One line as FormatBaselineLine writes it (fields in any order; unknown
// keys are ignored so later versions can add some).
absl::StatusOr<BaselineResult> ParseBaselineLine(absl::string_view line);

// Every `gloo_baseline` line of `output`, in order.
absl::StatusOr<std::vector<BaselineResult>> ParseBaselineOutput(
    absl::string_view output);

}  // namespace meshcast::bench

#endif  // MESHCAST_BENCH_CLUSTER_BASELINE_REPORT_H_
