// Runs the real gloo_collective_baseline binary: every op on 2 and 3 local
// ranks (3: the element count rounds down and halving-doubling takes its
// non-power-of-two path), each output checked by the binary itself.
#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/cluster/baseline_report.h"
#include "bench/cluster/collective_cases.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::bench {
namespace {

struct BaselineRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

BaselineRun RunBaseline(const std::string& args) {
  BaselineRun run;
  const std::string command =
      absl::StrCat(MESHCAST_GLOO_BASELINE_BINARY, " ", args, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    run.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

class GlooBaselineTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooBaselineTest, EveryOpRunsAndVerifies) {
  const int ranks = GetParam();
  const std::vector<int64_t> sizes = {1000, 64 << 10};
  const BaselineRun run = RunBaseline(
      absl::StrCat("--ranks=", ranks,
                   " --ops=all --sizes=1000B,64KiB --iters=3 --warmup=1 "
                   "--timeout_s=30"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  absl::StatusOr<std::vector<BaselineResult>> results =
      ParseBaselineOutput(run.output);
  ASSERT_TRUE(results.ok()) << results.status() << "\n" << run.output;
  ASSERT_EQ(results->size(), CollectiveOps().size() * sizes.size())
      << run.output;
  size_t i = 0;
  for (const std::string& op : CollectiveOps()) {
    for (int64_t size : sizes) {
      const BaselineResult& r = (*results)[i++];
      EXPECT_EQ(r.op, op);
      EXPECT_EQ(r.ranks, ranks);
      EXPECT_EQ(r.count, CollectiveCount(op, size, 4, ranks)) << op;
      EXPECT_EQ(r.bytes, r.count * 4) << op;
      EXPECT_EQ(r.iters, 3);
      EXPECT_EQ(r.status, "ok") << op << " " << size;
      EXPECT_FALSE(r.algorithm.empty());
      EXPECT_GT(r.median_seconds, 0) << op;
      EXPECT_LE(r.min_seconds, r.median_seconds) << op;
      EXPECT_LE(r.median_seconds, r.max_seconds) << op;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooBaselineTest, ::testing::Values(2, 3));

TEST(GlooBaselineCheckTest, AWrongOutputFailsTheRun) {
  const BaselineRun run = RunBaseline(
      "--ranks=2 --ops=all_reduce,broadcast --sizes=4KiB --iters=1 "
      "--warmup=0 --timeout_s=30 --inject_error_for_test");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  absl::StatusOr<std::vector<BaselineResult>> results =
      ParseBaselineOutput(run.output);
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 2u) << run.output;
  EXPECT_EQ((*results)[0].status, "mismatch");
  EXPECT_EQ((*results)[1].status, "mismatch");
}

TEST(GlooBaselineCheckTest, BadFlagsExitTwo) {
  EXPECT_EQ(RunBaseline("--ranks=1").exit_code, 2);
  EXPECT_EQ(RunBaseline("--ops=gather").exit_code, 2);
  EXPECT_EQ(RunBaseline("--sizes=big").exit_code, 2);
}

}  // namespace
}  // namespace meshcast::bench
