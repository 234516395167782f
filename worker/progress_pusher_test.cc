#include "worker/progress_pusher.h"

#include <atomic>
#include <functional>

#include "absl/synchronization/mutex.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "worker/testing/fake_controller.h"

namespace meshcast::worker {
namespace {

// Polls `condition` for up to 10 s.
bool Eventually(const std::function<bool()>& condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return condition();
}

// The running tasks a test scripts; read by the pusher's thread.
class ScriptedTasks {
 public:
  void Set(std::vector<v1::TaskProgress> tasks) {
    absl::MutexLock lock(&mu_);
    tasks_ = std::move(tasks);
  }
  std::vector<v1::TaskProgress> Get() {
    absl::MutexLock lock(&mu_);
    ++reads_;
    return tasks_;
  }
  int reads() {
    absl::MutexLock lock(&mu_);
    return reads_;
  }
  ProgressSource Source() {
    return [this] { return Get(); };
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::TaskProgress> tasks_ ABSL_GUARDED_BY(mu_);
  int reads_ ABSL_GUARDED_BY(mu_) = 0;
};

v1::TaskProgress MakeTask(const std::string& job, int steps_done,
                          int steps_total, const std::string& phase = "") {
  v1::TaskProgress task;
  task.set_job_id(job);
  task.set_steps_done(steps_done);
  task.set_steps_total(steps_total);
  task.set_bytes_done(int64_t{100} * steps_done);
  task.set_bytes_total(int64_t{100} * steps_total);
  task.set_phase(phase);
  return task;
}

ProgressPusherOptions Options() {
  ProgressPusherOptions options;
  options.name = "node-a";
  options.push_interval = absl::Milliseconds(100);
  options.sample_interval = absl::Milliseconds(5);
  options.rpc_timeout = absl::Seconds(5);
  return options;
}

class ProgressPusherTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(controller_.Start().ok()); }
  std::unique_ptr<ProgressPusher> NewPusher(ProgressPusherOptions options) {
    return std::make_unique<ProgressPusher>(
        grpc::CreateChannel(controller_.address(),
                            grpc::InsecureChannelCredentials()),
        tasks_.Source(), options);
  }

  testing::FakeController controller_;
  ScriptedTasks tasks_;
};

TEST(PhaseOfTest, TakesTheTasksPhaseOrInfersItFromTheSteps) {
  EXPECT_EQ(PhaseOf(MakeTask("j", 0, 0)), "setup");  // not parsed yet
  EXPECT_EQ(PhaseOf(MakeTask("j", 0, 4)), "data");
  EXPECT_EQ(PhaseOf(MakeTask("j", 3, 4)), "data");
  EXPECT_EQ(PhaseOf(MakeTask("j", 4, 4)), "verify");
  EXPECT_EQ(PhaseOf(MakeTask("j", 0, 4, "connect")), "connect");
}

TEST_F(ProgressPusherTest, SendsNothingWhileIdle) {
  auto pusher = NewPusher(Options());
  pusher->Start();
  // Many samples, no task: no report.
  ASSERT_TRUE(Eventually([&] { return tasks_.reads() >= 20; }));
  EXPECT_EQ(pusher->reports_sent(), 0);
  EXPECT_TRUE(controller_.progress_reports().empty());
}

TEST_F(ProgressPusherTest, PushesEveryRunningTaskAtTheIntervalWithItsPhase) {
  ProgressPusherOptions options = Options();
  options.push_interval = absl::Milliseconds(50);
  auto pusher = NewPusher(options);
  tasks_.Set({MakeTask("job-1", 1, 4), MakeTask("job-2", 0, 0)});
  const absl::Time start = absl::Now();
  pusher->Start();
  ASSERT_TRUE(
      Eventually([&] { return controller_.progress_reports().size() >= 5; }));
  const absl::Duration elapsed = absl::Now() - start;
  const std::vector<v1::ReportProgressRequest> reports =
      controller_.progress_reports();
  // The first report goes at once (new tasks), then one per interval: five
  // take at least four intervals.
  EXPECT_GE(elapsed, absl::Milliseconds(4 * 50 - 10));
  for (const v1::ReportProgressRequest& report : reports) {
    EXPECT_EQ(report.worker(), "node-a");
    ASSERT_EQ(report.tasks_size(), 2);
    EXPECT_EQ(report.tasks(0).job_id(), "job-1");
    EXPECT_EQ(report.tasks(0).steps_done(), 1);
    EXPECT_EQ(report.tasks(0).bytes_total(), 400);
    EXPECT_EQ(report.tasks(0).phase(), "data");
    EXPECT_EQ(report.tasks(1).job_id(), "job-2");
    EXPECT_EQ(report.tasks(1).phase(), "setup");
  }
  // Idle again: the reports stop.
  tasks_.Set({});
  absl::SleepFor(absl::Milliseconds(20));  // a report may be in flight
  const size_t count = controller_.progress_reports().size();
  const int reads = tasks_.reads();
  ASSERT_TRUE(Eventually([&] { return tasks_.reads() >= reads + 20; }));
  EXPECT_EQ(controller_.progress_reports().size(), count);
}

TEST_F(ProgressPusherTest, APhaseChangeIsReportedAtOnce) {
  ProgressPusherOptions options = Options();
  options.push_interval = absl::Hours(1);  // only changes go out
  auto pusher = NewPusher(options);
  tasks_.Set({MakeTask("job-1", 0, 4, "connect")});
  pusher->Start();
  ASSERT_TRUE(
      Eventually([&] { return controller_.progress_reports().size() == 1; }));
  // Progress alone does not trigger a report ...
  tasks_.Set({MakeTask("job-1", 2, 4, "connect")});
  const int reads = tasks_.reads();
  ASSERT_TRUE(Eventually([&] { return tasks_.reads() >= reads + 10; }));
  EXPECT_EQ(controller_.progress_reports().size(), 1u);
  // ... a new phase does, with the figures of that moment.
  tasks_.Set({MakeTask("job-1", 4, 4)});  // inferred: verify
  ASSERT_TRUE(
      Eventually([&] { return controller_.progress_reports().size() == 2; }));
  const v1::TaskProgress last = controller_.progress_reports()[1].tasks(0);
  EXPECT_EQ(last.phase(), "verify");
  EXPECT_EQ(last.steps_done(), 4);
  // So does a task that starts beside it.
  tasks_.Set({MakeTask("job-1", 4, 4), MakeTask("job-2", 0, 0)});
  ASSERT_TRUE(
      Eventually([&] { return controller_.progress_reports().size() == 3; }));
  EXPECT_EQ(controller_.progress_reports()[2].tasks_size(), 2);
}

// A phase the task sets goes through as it is, even where the counts
// would say otherwise (setup with every step done: a task's phases come
// from the task, e.g. a second set-up after connecting), and so do the
// verify counters.
TEST_F(ProgressPusherTest, ForwardsTheTasksOwnPhaseAndVerifyCounters) {
  ProgressPusherOptions options = Options();
  options.push_interval = absl::Hours(1);  // only changes go out
  auto pusher = NewPusher(options);
  tasks_.Set({MakeTask("job-1", 0, 0, "connect")});  // inferred: setup
  pusher->Start();
  ASSERT_TRUE(
      Eventually([&] { return controller_.progress_reports().size() == 1; }));
  EXPECT_EQ(controller_.progress_reports()[0].tasks(0).phase(), "connect");
  tasks_.Set({MakeTask("job-1", 4, 4, "setup")});  // inferred: verify
  ASSERT_TRUE(
      Eventually([&] { return controller_.progress_reports().size() == 2; }));
  EXPECT_EQ(controller_.progress_reports()[1].tasks(0).phase(), "setup");
  v1::TaskProgress verifying = MakeTask("job-1", 4, 4, "verify");
  verifying.set_verify_done(1234);
  verifying.set_verify_total(5678);
  tasks_.Set({verifying});
  ASSERT_TRUE(
      Eventually([&] { return controller_.progress_reports().size() == 3; }));
  const v1::TaskProgress last = controller_.progress_reports()[2].tasks(0);
  EXPECT_EQ(last.phase(), "verify");
  EXPECT_EQ(last.verify_done(), 1234);
  EXPECT_EQ(last.verify_total(), 5678);
}

TEST_F(ProgressPusherTest, DropsReportsWhileOneIsInFlight) {
  ProgressPusherOptions options = Options();
  options.push_interval = absl::Milliseconds(5);
  auto pusher = NewPusher(options);
  controller_.HoldProgressReports(true);
  tasks_.Set({MakeTask("job-1", 1, 4)});
  pusher->Start();
  // The first report hangs in the controller; later ones are dropped, and
  // the source is still read (the pusher's thread never waits on the RPC).
  ASSERT_TRUE(Eventually([&] { return pusher->reports_dropped() >= 10; }));
  EXPECT_EQ(pusher->reports_sent(), 1);
  EXPECT_TRUE(controller_.progress_reports().empty());
  // Released, the reports flow again.
  controller_.HoldProgressReports(false);
  ASSERT_TRUE(
      Eventually([&] { return controller_.progress_reports().size() >= 3; }));
  EXPECT_EQ(pusher->reports_failed(), 0);
}

TEST_F(ProgressPusherTest, StopsPromptlyWithAReportInFlight) {
  ProgressPusherOptions options = Options();
  options.rpc_timeout = absl::Seconds(30);
  auto pusher = NewPusher(options);
  controller_.HoldProgressReports(true);
  tasks_.Set({MakeTask("job-1", 1, 4)});
  pusher->Start();
  ASSERT_TRUE(Eventually([&] { return pusher->reports_dropped() >= 1; }));
  const absl::Time start = absl::Now();
  pusher->Stop();
  // Far below the report's 30 s deadline: Stop cancelled it (5 s of slack
  // for a loaded CI machine).
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(pusher->reports_sent(), 1);
  controller_.HoldProgressReports(false);
  // The held report may still be recorded once released (the server does
  // not always see that its caller gave up); nothing is sent after Stop.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_LE(controller_.progress_reports().size(), 1u);
  EXPECT_EQ(pusher->reports_sent(), 1);
}

TEST_F(ProgressPusherTest, AControllerWithoutReportProgressDisablesIt) {
  controller_.set_progress_unimplemented(true);
  ProgressPusherOptions options = Options();
  options.push_interval = absl::Milliseconds(5);
  auto pusher = NewPusher(options);
  tasks_.Set({MakeTask("job-1", 1, 4)});
  pusher->Start();
  ASSERT_TRUE(Eventually([&] { return pusher->disabled(); }));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(pusher->reports_sent(), 1);
  EXPECT_EQ(pusher->reports_failed(), 1);
}

TEST_F(ProgressPusherTest, AnUnreachableControllerCostsNothingButLogs) {
  ProgressPusherOptions options = Options();
  options.push_interval = absl::Milliseconds(5);
  options.rpc_timeout = absl::Milliseconds(200);
  const std::string address = controller_.address();
  controller_.Stop();
  ProgressPusher pusher(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()),
      tasks_.Source(), options);
  tasks_.Set({MakeTask("job-1", 1, 4)});
  pusher.Start();
  ASSERT_TRUE(Eventually([&] { return pusher.reports_failed() >= 2; }));
  EXPECT_FALSE(pusher.disabled());
  const absl::Time start = absl::Now();
  pusher.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

}  // namespace
}  // namespace meshcast::worker
