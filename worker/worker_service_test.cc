#include "worker/worker_service.h"

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "worker/controller_kv_store.h"
#include "worker/in_memory_kv_store.h"
#include "worker/testing/fake_controller.h"
#include "worker/testing/test_job.h"

namespace meshcast::worker {
namespace {

using testing::TestJob;

// One worker daemon's service stack on 127.0.0.1, without the agent.
class ServedWorker {
 public:
  // `customize` (optional) edits the service's options.
  ServedWorker(
      const std::string& name, int devices, const std::string& controller,
      const std::function<void(WorkerServiceOptions&)>& customize = nullptr)
      : kv_(grpc::CreateChannel(controller,
                                grpc::InsecureChannelCredentials())),
        service_(Options(name, devices, customize), &kv_) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    stub_ = v1::Worker::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }
  ~ServedWorker() {
    service_.Shutdown("test over");
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(1));
  }

  v1::Worker::Stub& stub() { return *stub_; }
  WorkerService& service() { return service_; }

  v1::RunTaskResponse RunTask(const v1::WorkerProgram& program) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    v1::RunTaskRequest request;
    *request.mutable_program() = program;
    v1::RunTaskResponse response;
    grpc::Status status = stub_->RunTask(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

 private:
  static WorkerServiceOptions Options(
      const std::string& name, int devices,
      const std::function<void(WorkerServiceOptions&)>& customize) {
    WorkerServiceOptions options;
    options.name = name;
    options.num_devices = devices;
    options.task.executor.relay.chunk_bytes = 4096;
    options.task.gloo.rendezvous_timeout = absl::Seconds(10);
    options.task.gloo.op_timeout = absl::Seconds(10);
    if (customize) customize(options);
    return options;
  }

  ControllerKvStore kv_;
  WorkerService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Worker::Stub> stub_;
};

TestJob TwoWorkerBroadcast(const std::string& job_id) {
  TestJob job(2, 2, job_id);
  const int t = job.AddTensor({{128, 100}, DType::kFloat16});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  for (int d : {1, 2, 3}) {
    job.AddBuffer(d, t, job.FullBox(t), BufferRole::kDestination);
  }
  job.AddTransfer(t, job.FullBox(t), {0, 1, 2, 3});
  return job;
}

TEST(WorkerServiceTest, RunsAJobAcrossTwoWorkersLikeTheController) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  ServedWorker a("a", 2, controller.address());
  ServedWorker b("b", 2, controller.address());
  TestJob job = TwoWorkerBroadcast("job-1");
  v1::RunTaskResponse responses[2];
  std::thread other([&] { responses[1] = b.RunTask(job.ProgramFor(1)); });
  responses[0] = a.RunTask(job.ProgramFor(0));
  other.join();
  for (const v1::RunTaskResponse& response : responses) {
    EXPECT_TRUE(response.ok()) << response.error();
    EXPECT_EQ(response.result().mismatches(), 0);
    ASSERT_EQ(response.result().steps_size(), 1);
    EXPECT_EQ(response.result().steps(0).bytes(), 128 * 100 * 2);
  }
  EXPECT_EQ(responses[0].result().elements_verified(), 128 * 100);
  EXPECT_EQ(responses[1].result().elements_verified(), 2 * 128 * 100);
  EXPECT_TRUE(a.service().RunningJobs().empty());
}

TEST(WorkerServiceTest, MismatchesMakeTheTaskFailWithTheResult) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  ServedWorker a("a", 2, controller.address());
  TestJob job(1, 2, "job-bad");
  const int t = job.AddTensor({{10}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, {{0, 7}}, {0, 1});
  v1::RunTaskResponse response = a.RunTask(job.ProgramFor(0));
  EXPECT_FALSE(response.ok());
  EXPECT_EQ(response.result().mismatches(), 3);
  EXPECT_NE(response.error().find("3 mismatching"), std::string::npos)
      << response.error();
}

TEST(WorkerServiceTest, RejectsProgramsItCannotRun) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  ServedWorker a("a", 1, controller.address());
  TestJob job = TwoWorkerBroadcast("job-2");
  v1::RunTaskResponse too_many_devices = a.RunTask(job.ProgramFor(0));
  EXPECT_FALSE(too_many_devices.ok());
  EXPECT_NE(too_many_devices.error().find("local_devices"), std::string::npos);

  v1::WorkerProgram unsupported = TestJob(1, 1, "job-3").ProgramFor(0);
  unsupported.mutable_plan()->add_tensors()->set_dtype(v1::DTYPE_UNSPECIFIED);
  v1::RunTaskResponse bad_dtype = a.RunTask(unsupported);
  EXPECT_FALSE(bad_dtype.ok());
  EXPECT_NE(bad_dtype.error().find("plan.tensors[0]"), std::string::npos)
      << bad_dtype.error();
}

TEST(WorkerServiceTest, AnAbortBeforeTheProgramRefusesItLater) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  ServedWorker a("node-a", 2, controller.address());
  TestJob job = TwoWorkerBroadcast("job-late");
  grpc::ClientContext context;
  v1::AbortTaskRequest abort;
  abort.set_job_id("job-late");
  abort.set_reason("worker node-b lost");
  v1::AbortTaskResponse aborted;
  ASSERT_TRUE(a.stub().AbortTask(&context, abort, &aborted).ok());
  EXPECT_FALSE(aborted.found());
  // Its peer never comes; without the remembered abort this would wait in
  // the rendezvous.
  const absl::Time start = absl::Now();
  v1::RunTaskResponse response = a.RunTask(job.ProgramFor(0));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_FALSE(response.ok());
  EXPECT_NE(response.error().find("aborted before its program arrived"),
            std::string::npos)
      << response.error();
  EXPECT_NE(response.error().find("worker node-b lost"), std::string::npos);
  // Another job is not affected.
  TestJob other(1, 2, "job-other");
  const int t = other.AddTensor({{10}, DType::kInt32});
  other.AddBuffer(0, t, other.FullBox(t), BufferRole::kSource);
  other.AddBuffer(1, t, other.FullBox(t), BufferRole::kDestination);
  other.AddTransfer(t, other.FullBox(t), {0, 1});
  EXPECT_TRUE(a.RunTask(other.ProgramFor(0)).ok());
}

TEST(WorkerServiceTest, AbortTaskStopsARunningJobAndGetStatusListsIt) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  ServedWorker a("node-a", 2, controller.address());
  TestJob job = TwoWorkerBroadcast("job-stuck");
  // Worker 1 never runs: worker 0 waits in the rendezvous.
  v1::RunTaskResponse response;
  std::thread run([&] { response = a.RunTask(job.ProgramFor(0)); });

  v1::GetStatusResponse status;
  // Until the task is listed with its program's totals (set once parsed).
  for (int i = 0; i < 200 && (status.tasks_size() == 0 ||
                              status.tasks(0).steps_total() == 0);
       ++i) {
    grpc::ClientContext context;
    ASSERT_TRUE(a.stub().GetStatus(&context, {}, &status).ok());
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(status.name(), "node-a");
  EXPECT_EQ(status.num_devices(), 2);
  ASSERT_EQ(status.running_jobs_size(), 1);
  EXPECT_EQ(status.running_jobs(0), "job-stuck");
  // Its progress: nothing done yet, one step of the program to do.
  ASSERT_EQ(status.tasks_size(), 1);
  EXPECT_EQ(status.tasks(0).job_id(), "job-stuck");
  EXPECT_EQ(status.tasks(0).steps_done(), 0);
  EXPECT_EQ(status.tasks(0).steps_total(),
            job.ProgramFor(0).plan().steps_size());
  EXPECT_GT(status.tasks(0).bytes_total(), 0);
  EXPECT_EQ(status.tasks(0).bytes_done(), 0);

  const absl::Time start = absl::Now();
  grpc::ClientContext context;
  v1::AbortTaskRequest abort;
  abort.set_job_id("job-stuck");
  abort.set_reason("cancelled by user");
  v1::AbortTaskResponse aborted;
  ASSERT_TRUE(a.stub().AbortTask(&context, abort, &aborted).ok());
  EXPECT_TRUE(aborted.found());
  run.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_FALSE(response.ok());
  EXPECT_NE(response.error().find("CANCELLED"), std::string::npos)
      << response.error();

  grpc::ClientContext again;
  ASSERT_TRUE(a.stub().AbortTask(&again, abort, &aborted).ok());
  EXPECT_FALSE(aborted.found());
}

TEST(WorkerServiceTest, CancelledRunTaskCallAbortsTheTask) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  ServedWorker a("a", 2, controller.address());
  TestJob job = TwoWorkerBroadcast("job-cancelled-call");
  grpc::ClientContext context;
  v1::RunTaskRequest request;
  *request.mutable_program() = job.ProgramFor(0);
  v1::RunTaskResponse response;
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));
    context.TryCancel();
  });
  grpc::Status status = a.stub().RunTask(&context, request, &response);
  canceller.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  // The task goes away soon after.
  for (int i = 0; i < 300 && !a.service().RunningJobs().empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(a.service().RunningJobs().empty());
}

// A one-worker job whose fill is made slow (40 ms a 4 KiB slice: ~10 s on
// 4 threads), to stop in the middle.
TestJob SlowFillJob(const std::string& job_id) {
  TestJob job(1, 2, job_id);
  const int t = job.AddTensor({{2048, 1024}, DType::kUInt8});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 1});
  return job;
}

std::function<void(WorkerServiceOptions&)> SlowFill(std::atomic<int>& slices) {
  return [&slices](WorkerServiceOptions& options) {
    options.task.executor.slicing.bytes = 4096;
    options.task.executor.slicing.before_slice = [&slices] {
      ++slices;
      absl::SleepFor(absl::Milliseconds(40));
    };
  };
}

// Until the task has done some of its fill (up to ~10 s).
void AwaitSlices(const std::atomic<int>& slices) {
  for (int i = 0; i < 1000 && slices.load() < 8; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
}

// RunTask of SlowFillJob(job_id) on another thread, started and waited for
// until the fill is under way; Join() returns when RunTask has answered.
class SlowTaskInFlight {
 public:
  SlowTaskInFlight(ServedWorker& worker, const std::string& job_id,
                   const std::atomic<int>& slices)
      : thread_([this, &worker, job_id] {
          response_ = worker.RunTask(SlowFillJob(job_id).ProgramFor(0));
          returned_ = absl::Now();
        }) {
    AwaitSlices(slices);
  }
  ~SlowTaskInFlight() {
    if (thread_.joinable()) thread_.join();
  }
  // The RunTask answer and when it came.
  const v1::RunTaskResponse& Join() {
    thread_.join();
    return response_;
  }
  absl::Time returned() const { return returned_; }

 private:
  v1::RunTaskResponse response_;
  absl::Time returned_;
  std::thread thread_;
};

TEST(WorkerServiceTest, AbortDuringASlowFillReleasesTheTaskPromptly) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  std::atomic<int> slices{0};
  ServedWorker a("a", 2, controller.address(), SlowFill(slices));
  SlowTaskInFlight run(a, "job-slow", slices);
  ASSERT_EQ(a.service().RunningJobs(), std::vector<std::string>{"job-slow"});
  const absl::Time start = absl::Now();
  grpc::ClientContext context;
  v1::AbortTaskRequest abort;
  abort.set_job_id("job-slow");
  abort.set_reason("cancelled by user");
  v1::AbortTaskResponse aborted;
  ASSERT_TRUE(a.stub().AbortTask(&context, abort, &aborted).ok());
  EXPECT_TRUE(aborted.found());
  const v1::RunTaskResponse& response = run.Join();
  EXPECT_LT(run.returned() - start, absl::Seconds(3));
  EXPECT_FALSE(response.ok());
  EXPECT_NE(response.error().find("CANCELLED: cancelled by user"),
            std::string::npos)
      << response.error();
  // Released (and its tiles freed) by the time RunTask answered.
  EXPECT_TRUE(a.service().RunningJobs().empty());
  EXPECT_LT(slices.load(), 2 * 512 / 2);
}

// What the daemon does on SIGTERM: Shutdown aborts a task in the middle of
// its fill, and RunTask answers at once.
TEST(WorkerServiceTest, ShutdownDuringASlowFillEndsTheTaskPromptly) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  std::atomic<int> slices{0};
  ServedWorker a("a", 2, controller.address(), SlowFill(slices));
  SlowTaskInFlight run(a, "job-interrupted", slices);
  const absl::Time start = absl::Now();
  a.service().Shutdown("worker shutting down");
  const v1::RunTaskResponse& response = run.Join();
  EXPECT_LT(run.returned() - start, absl::Seconds(3));
  EXPECT_FALSE(response.ok());
  EXPECT_NE(response.error().find("worker shutting down"), std::string::npos)
      << response.error();
  EXPECT_TRUE(a.service().RunningJobs().empty());
}

// Refused before the rendezvous: worker 1 never runs, yet worker 0 answers
// at once instead of waiting for it.
TEST(WorkerServiceTest, JobTooBigForTheHostIsResourceExhaustedAtOnce) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  ServedWorker a("a", 1, controller.address(),
                 [](WorkerServiceOptions& options) {
                   options.task.executor.available_memory = [] {
                     return int64_t{3} << 20;  // 3 MiB
                   };
                 });
  TestJob job(2, 1, "job-big");
  const int t = job.AddTensor({{2048, 2048}, DType::kUInt8});  // 4 MiB
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 1});
  const absl::Time start = absl::Now();
  v1::RunTaskResponse response = a.RunTask(job.ProgramFor(0));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // rendezvous: 10 s
  EXPECT_FALSE(response.ok());
  EXPECT_NE(response.error().find("RESOURCE_EXHAUSTED: worker worker0: job "
                                  "job-big needs 4.0 MiB for its tiles, 3.0 "
                                  "MiB available"),
            std::string::npos)
      << response.error();
}

TEST(TaskTest, ProgressCountsEveryFinishedStepAndItsBytes) {
  TestJob job(1, 3, "job-progress");
  const int t = job.AddTensor({{16, 8}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(1, t, job.FullBox(t), BufferRole::kDestination);
  job.AddBuffer(2, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {0, 1});
  job.AddTransfer(t, job.FullBox(t), {0, 2});
  const TaskOptions options;
  Task task(job.ProgramFor(0), nullptr, options);
  const v1::TaskProgress before = task.progress();
  EXPECT_EQ(before.job_id(), "job-progress");
  EXPECT_EQ(before.steps_done(), 0);
  EXPECT_EQ(before.steps_total(), 0);  // not parsed yet
  ASSERT_TRUE(task.Run().ok());
  const v1::TaskProgress after = task.progress();
  EXPECT_EQ(after.steps_done(), 2);
  EXPECT_EQ(after.steps_total(), 2);
  EXPECT_EQ(after.bytes_done(), 2 * 16 * 8 * 4);
  EXPECT_EQ(after.bytes_total(), 2 * 16 * 8 * 4);
  EXPECT_EQ(before.phase(), "");
  EXPECT_EQ(after.phase(), "verify");
  EXPECT_EQ(after.verify_done(), 2 * 16 * 8);
  EXPECT_EQ(after.verify_total(), 2 * 16 * 8);
}

// The phases a task goes through as GetStatus sees them: each Record()
// reads the task's progress under one lock and appends its phase when it
// differs from the last one appended, so the list is in the order they
// came.
class TaskPhaseRecorder {
 public:
  std::string Record() {
    absl::MutexLock lock(&mu_);
    const std::string phase = task_->progress().phase();
    if (phases_.empty() || phases_.back() != phase) phases_.push_back(phase);
    return phase;
  }
  void set_task(const Task* task) { task_ = task; }
  std::vector<std::string> phases() {
    absl::MutexLock lock(&mu_);
    return phases_;
  }

 private:
  const Task* task_ = nullptr;
  absl::Mutex mu_;
  std::vector<std::string> phases_ ABSL_GUARDED_BY(mu_);
};

// Task 0 of a two-worker job records its phase at every memory check and
// before every fill, copy, chunk and verify slice. The test holds it where
// no slice runs: in the rendezvous (task 1 starts only once task 0 is seen
// connecting) and in the start barrier (task 1 waits in its own set-up
// until task 0 is seen there).
TEST(TaskTest, ProgressNamesEveryPhaseInOrderAndCountsVerification) {
  TestJob job = TwoWorkerBroadcast("job-phases");
  InMemoryKvStore kv;
  TaskOptions base;
  base.gloo.rendezvous_timeout = absl::Seconds(10);
  base.gloo.op_timeout = absl::Seconds(10);
  base.executor.relay.chunk_bytes = 4096;
  base.executor.slicing.bytes = 4096;
  constexpr int64_t kPlenty = int64_t{1} << 40;

  TaskPhaseRecorder recorder;
  TaskOptions options0 = base;
  options0.executor.available_memory = [&recorder] {
    recorder.Record();
    return kPlenty;
  };
  options0.executor.slicing.before_slice = [&recorder] { recorder.Record(); };
  Task task0(job.ProgramFor(0), &kv, options0);
  recorder.set_task(&task0);

  // Task 1's second memory check is its executor's, after the rendezvous.
  absl::Notification release;
  std::atomic<int> checks{0};
  TaskOptions options1 = base;
  options1.executor.available_memory = [&] {
    if (++checks == 2) release.WaitForNotificationWithTimeout(absl::Seconds(10));
    return kPlenty;
  };
  Task task1(job.ProgramFor(1), &kv, options1);

  EXPECT_EQ(recorder.Record(), "");  // before Run
  absl::StatusOr<v1::JobResult> results[2];
  std::thread run0([&] { results[0] = task0.Run(); });
  auto await_phases = [&](size_t count) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      recorder.Record();
      if (recorder.phases().size() >= count) return;
      absl::SleepFor(absl::Milliseconds(1));
    }
  };
  await_phases(3);  // "", setup, connect (the rendezvous)
  std::thread run1([&] { results[1] = task1.Run(); });
  await_phases(5);  // ..., setup (tiles), connect (the barrier)
  release.Notify();
  run0.join();
  run1.join();
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(results[w].ok()) << "task " << w << ": " << results[w].status();
    EXPECT_EQ(results[w]->mismatches(), 0);
  }
  recorder.Record();
  EXPECT_EQ(recorder.phases(),
            (std::vector<std::string>{"", "setup", "connect", "setup",
                                      "connect", "data", "verify"}));
  // Worker 0 holds one destination of 128 x 100, checked in full.
  const v1::TaskProgress done = task0.progress();
  EXPECT_EQ(done.phase(), "verify");
  EXPECT_EQ(results[0]->elements_verified(), 128 * 100);
  EXPECT_EQ(done.verify_total(), 128 * 100);
  EXPECT_EQ(done.verify_done(), 128 * 100);
  EXPECT_EQ(done.steps_done(), done.steps_total());
}

// GetStatus names the phase: a task whose peer never comes is connecting.
TEST(WorkerServiceTest, GetStatusNamesTheTasksPhase) {
  testing::FakeController controller;
  ASSERT_TRUE(controller.Start().ok());
  ServedWorker a("node-a", 2, controller.address());
  TestJob job = TwoWorkerBroadcast("job-waiting");
  v1::RunTaskResponse response;
  std::thread run([&] { response = a.RunTask(job.ProgramFor(0)); });
  v1::GetStatusResponse status;
  for (int i = 0; i < 500 && (status.tasks_size() == 0 ||
                              status.tasks(0).phase() != "connect");
       ++i) {
    grpc::ClientContext context;
    ASSERT_TRUE(a.stub().GetStatus(&context, {}, &status).ok());
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(status.tasks_size(), 1);
  EXPECT_EQ(status.tasks(0).phase(), "connect");
  EXPECT_EQ(status.tasks(0).verify_done(), 0);
  EXPECT_EQ(status.tasks(0).verify_total(), 0);
  a.service().Shutdown("test over");
  run.join();
  EXPECT_FALSE(response.ok());
}

}  // namespace
}  // namespace meshcast::worker
