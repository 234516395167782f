#include "util/parallel_for.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

TEST(ParallelForTest, RunsEveryTaskOnce) {
  for (int threads : {0, 1, 3, 16}) {
    std::vector<std::atomic<int>> runs(100);
    ASSERT_TRUE(ParallelFor(100, threads, [&](int i) {
                  runs[i]++;
                  return absl::OkStatus();
                }).ok());
    for (int i = 0; i < 100; ++i) EXPECT_EQ(runs[i].load(), 1) << i;
  }
}

TEST(ParallelForTest, NoTasksIsOk) {
  EXPECT_TRUE(ParallelFor(0, 4, [](int) {
                return absl::InternalError("never called");
              }).ok());
}

TEST(ParallelForTest, UsesUpToThreadsAtOnce) {
  absl::Mutex mu;
  int running = 0, most = 0;
  ASSERT_TRUE(ParallelFor(12, 3, [&](int) {
                {
                  absl::MutexLock lock(&mu);
                  most = std::max(most, ++running);
                }
                absl::SleepFor(absl::Milliseconds(20));
                absl::MutexLock lock(&mu);
                --running;
                return absl::OkStatus();
              }).ok());
  EXPECT_GE(most, 2);  // more than the caller alone
  EXPECT_LE(most, 3);
}

TEST(ParallelForTest, ReturnsTheErrorAndStartsNothingAfterIt) {
  std::atomic<int> started{0};
  const absl::Status status = ParallelFor(1000, 1, [&](int i) {
    started++;
    return i == 5 ? absl::DataLossError("task 5") : absl::OkStatus();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(started.load(), 6);  // one thread: tasks 0..5, then stop
}

}  // namespace
}  // namespace meshcast
