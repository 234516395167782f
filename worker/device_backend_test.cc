// Task's DeviceBackend hook, with a fake backend: runs without a GPU.
#include "worker/device_backend.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "worker/task.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker {
namespace {

using testing::TestJob;

// Records what Task hands it; Run blocks until aborted when told to.
struct FakeJobLog {
  std::atomic<int> runs{0};
  std::string job_id;
  int local_devices = 0;
  KvStore* kv = nullptr;
  std::string abort_reason;
};

class FakeJob : public DeviceJob {
 public:
  FakeJob(FakeJobLog* log, bool block) : log_(log), block_(block) {}

  absl::StatusOr<v1::JobResult> Run(const ParsedProgram& program,
                                    KvStore* kv) override {
    ++log_->runs;
    log_->job_id = program.job_id;
    log_->local_devices = static_cast<int>(program.local_devices.size());
    log_->kv = kv;
    if (block_) {
      aborted_.WaitForNotificationWithTimeout(absl::Seconds(10));
      return absl::CancelledError(log_->abort_reason);
    }
    v1::JobResult result;
    result.set_elements_verified(42);
    return result;
  }
  void Abort(absl::string_view reason) override {
    log_->abort_reason = std::string(reason);
    if (!aborted_.HasBeenNotified()) aborted_.Notify();
  }
  ExecutorTimings timings() const override {
    ExecutorTimings timings;
    timings.tile_bytes = 1234;
    return timings;
  }

 private:
  FakeJobLog* log_;
  const bool block_;
  absl::Notification aborted_;
};

class FakeBackend : public DeviceBackend {
 public:
  FakeBackend(FakeJobLog* log, bool block) : log_(log), block_(block) {}
  std::unique_ptr<DeviceJob> NewJob() override {
    return std::make_unique<FakeJob>(log_, block_);
  }

 private:
  FakeJobLog* log_;
  const bool block_;
};

v1::WorkerProgram SmallProgram() {
  TestJob job(1, 3, "device-job");
  const int t = job.AddTensor({{8, 8}, DType::kFloat32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(2, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 2});
  return job.ProgramFor(0);
}

TEST(DeviceBackendTest, TaskRunsTheJobOnTheBackend) {
  FakeJobLog log;
  TaskOptions options;
  options.device_backend = std::make_shared<FakeBackend>(&log, false);
  Task task(SmallProgram(), nullptr, options);
  absl::StatusOr<v1::JobResult> result = task.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->elements_verified(), 42);
  EXPECT_EQ(log.runs, 1);
  EXPECT_EQ(log.job_id, "device-job");
  EXPECT_EQ(log.local_devices, 3);
  EXPECT_EQ(task.timings().tile_bytes, 1234);
}

TEST(DeviceBackendTest, TaskAbortReachesTheRunningJob) {
  FakeJobLog log;
  TaskOptions options;
  options.device_backend = std::make_shared<FakeBackend>(&log, true);
  Task task(SmallProgram(), nullptr, options);
  std::thread aborter([&] {
    // Abort while the job runs (an earlier Abort never starts it).
    const absl::Time give_up = absl::Now() + absl::Seconds(5);
    while (log.runs.load() == 0 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    task.Abort("stop the GPUs");
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::JobResult> result = task.Run();
  aborter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(log.abort_reason, "stop the GPUs");
}

TEST(DeviceBackendTest, AbortBeforeRunNeverStartsTheJob) {
  FakeJobLog log;
  TaskOptions options;
  options.device_backend = std::make_shared<FakeBackend>(&log, false);
  Task task(SmallProgram(), nullptr, options);
  task.Abort("early");
  EXPECT_EQ(task.Run().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(log.runs, 0);
}

}  // namespace
}  // namespace meshcast::worker
