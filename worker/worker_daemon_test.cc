// Real meshcast-worker processes on 127.0.0.1 against an in-process fake
// controller: registration, a job across two daemons, a peer killed in the
// middle of a job, and clean shutdown on SIGTERM.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "meshcast/v1/worker.grpc.pb.h"
#include "worker/testing/fake_controller.h"
#include "worker/testing/test_job.h"

extern char** environ;

namespace meshcast::worker {
namespace {

using testing::FakeController;
using testing::TestJob;

class Daemon {
 public:
  Daemon(const std::string& name, const std::string& controller) {
    std::vector<std::string> args = {MESHCAST_WORKER_BINARY,
                                     "--controller=" + controller,
                                     "--name=" + name,
                                     "--devices=cpu:2",
                                     "--listen=127.0.0.1:0",
                                     "--chunk-bytes=8192",
                                     "--rendezvous-timeout-seconds=20",
                                     "--op_timeout_seconds=60",
                                     "--insecure"};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    spawned_ = posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(),
                           environ) == 0;
  }
  ~Daemon() {
    if (running()) {
      kill(pid_, SIGKILL);
      Wait();
    }
  }

  bool spawned() const { return spawned_; }
  // True once the process has exited (without blocking).
  bool Exited() {
    if (exited_) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) exited_ = true;
    return exited_;
  }
  bool running() const { return spawned_ && !exited_; }
  void Signal(int signal) { kill(pid_, signal); }
  // Waits for the process; returns its wait status.
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    exited_ = true;
    return status;
  }

 private:
  pid_t pid_ = 0;
  bool spawned_ = false;
  bool exited_ = false;
};

// The Worker-service address `name` registered, waiting up to 20 s (or
// until its daemon exits).
std::string RegisteredAddress(const FakeController& controller,
                              const std::string& name, Daemon& daemon) {
  for (int i = 0; i < 2000 && !daemon.Exited(); ++i) {
    const std::string address = controller.worker(name).address();
    if (!address.empty()) return address;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return "";
}

std::unique_ptr<v1::Worker::Stub> StubFor(const std::string& address) {
  return v1::Worker::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

struct Call {
  grpc::Status status;
  v1::RunTaskResponse response;
  absl::Duration elapsed;
};

Call RunTask(v1::Worker::Stub& stub, const v1::WorkerProgram& program) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
  v1::RunTaskRequest request;
  *request.mutable_program() = program;
  Call call;
  const absl::Time start = absl::Now();
  call.status = stub.RunTask(&context, request, &call.response);
  call.elapsed = absl::Now() - start;
  return call;
}

class WorkerDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(controller_.Start().ok());
    for (int w = 0; w < 2; ++w) {
      daemons_.push_back(std::make_unique<Daemon>(absl::StrCat("w", w),
                                                  controller_.address()));
      ASSERT_TRUE(daemons_.back()->spawned());
    }
    for (int w = 0; w < 2; ++w) {
      const std::string address =
          RegisteredAddress(controller_, absl::StrCat("w", w), *daemons_[w]);
      ASSERT_FALSE(address.empty()) << "worker w" << w << " never registered";
      stubs_.push_back(StubFor(address));
    }
  }

  FakeController controller_;
  std::vector<std::unique_ptr<Daemon>> daemons_;
  std::vector<std::unique_ptr<v1::Worker::Stub>> stubs_;
};

TEST_F(WorkerDaemonTest, RegistersAndRunsAJobAcrossTwoProcesses) {
  const v1::WorkerInfo info = controller_.worker("w0");
  EXPECT_EQ(info.num_devices(), 2);
  EXPECT_EQ(info.device_kind(), "cpu");
  EXPECT_EQ(info.data_address(), "127.0.0.1");

  TestJob job(2, 2, "daemon-job");
  const std::vector<int64_t> shape = {97, 64, 3};
  const int t = job.AddTensor({shape, DType::kBFloat16});
  for (int k = 0; k < 2; ++k) {
    job.AddBuffer(k, t, TestJob::ShardBox(shape, 0, 2, k), BufferRole::kSource);
  }
  for (int k = 0; k < 2; ++k) {
    job.AddBuffer(2 + k, t, TestJob::ShardBox(shape, 1, 2, k),
                  BufferRole::kDestination);
  }
  job.AddSendRecvTransfers(t);
  Call calls[2];
  std::thread other([&] { calls[1] = RunTask(*stubs_[1], job.ProgramFor(1)); });
  calls[0] = RunTask(*stubs_[0], job.ProgramFor(0));
  other.join();
  for (const Call& call : calls) {
    ASSERT_TRUE(call.status.ok()) << call.status.error_message();
    EXPECT_TRUE(call.response.ok()) << call.response.error();
    EXPECT_EQ(call.response.result().mismatches(), 0);
  }
  EXPECT_EQ(calls[1].response.result().elements_verified(), 97 * 64 * 3);
}

// Both workers wait for data from each other (a program that can never
// finish); killing one makes the other fail within seconds, not at the
// 60 s operation timeout.
TEST_F(WorkerDaemonTest, PeerKilledMidJobFailsTheOtherQuickly) {
  TestJob job(2, 2, "doomed-job");
  const int t = job.AddTensor({{64, 64}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kDestination);
  job.AddBuffer(2, t, job.FullBox(t), BufferRole::kDestination);
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(2, t, job.FullBox(t), BufferRole::kSource);
  job.AddTransfer(t, job.FullBox(t), {2, 0});  // worker 0 receives
  job.AddTransfer(t, job.FullBox(t), {0, 2});  // worker 1 receives
  v1::WorkerProgram program0 = job.ProgramFor(0);
  v1::WorkerProgram program1 = job.ProgramFor(1);
  // Drop each worker's sending step: both only wait.
  program0.mutable_plan()->mutable_steps()->RemoveLast();
  program1.mutable_plan()->mutable_steps()->DeleteSubrange(0, 1);

  Call calls[2];
  std::thread first([&] { calls[0] = RunTask(*stubs_[0], program0); });
  std::thread second([&] { calls[1] = RunTask(*stubs_[1], program1); });
  absl::SleepFor(absl::Milliseconds(700));
  const absl::Time killed = absl::Now();
  daemons_[1]->Signal(SIGKILL);
  daemons_[1]->Wait();
  first.join();
  second.join();
  ASSERT_TRUE(calls[0].status.ok()) << calls[0].status.error_message();
  EXPECT_FALSE(calls[0].response.ok());
  EXPECT_FALSE(calls[0].response.error().empty());
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10))
      << calls[0].response.error();
  EXPECT_FALSE(calls[1].status.ok());  // its daemon is gone
}

// SIGTERM in the data phase of a job that would run until its operation
// timeout (both workers wait for a transfer the other never sends): the
// daemon still exits within 2 s.
TEST_F(WorkerDaemonTest, SigtermDuringTheDataPhaseExitsWithinTwoSeconds) {
  TestJob job(2, 2, "endless-job");
  const int t = job.AddTensor({{64, 64}, DType::kInt32});
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kDestination);
  job.AddBuffer(2, t, job.FullBox(t), BufferRole::kDestination);
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(2, t, job.FullBox(t), BufferRole::kSource);
  job.AddTransfer(t, job.FullBox(t), {2, 0});
  job.AddTransfer(t, job.FullBox(t), {0, 2});
  v1::WorkerProgram program0 = job.ProgramFor(0);
  v1::WorkerProgram program1 = job.ProgramFor(1);
  program0.mutable_plan()->mutable_steps()->RemoveLast();
  program1.mutable_plan()->mutable_steps()->DeleteSubrange(0, 1);
  Call calls[2];
  std::thread first([&] { calls[0] = RunTask(*stubs_[0], program0); });
  std::thread second([&] { calls[1] = RunTask(*stubs_[1], program1); });
  // Until worker 0 reports the data phase (connected, waiting to receive).
  bool in_data = false;
  const absl::Time wait_until = absl::Now() + absl::Seconds(10);
  while (!in_data && absl::Now() < wait_until) {
    for (const v1::ReportProgressRequest& report :
         controller_.progress_reports()) {
      for (const v1::TaskProgress& task : report.tasks()) {
        in_data |= report.worker() == "w0" && task.phase() == "data";
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(in_data) << "worker 0 never reached the data phase";
  const absl::Time start = absl::Now();
  daemons_[0]->Signal(SIGTERM);
  const int status = daemons_[0]->Wait();
  const absl::Duration stop = absl::Now() - start;
  daemons_[1]->Signal(SIGKILL);  // ends the other call at once
  daemons_[1]->Wait();
  first.join();
  second.join();
  EXPECT_LT(stop, absl::Seconds(2));
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A request whose string field is not UTF-8 does not parse; the daemon
// answers INVALID_ARGUMENT naming the field, as the controller does.
TEST_F(WorkerDaemonTest, InvalidUtf8IsInvalidArgumentNamingTheField) {
  const std::string address =
      RegisteredAddress(controller_, "w0", *daemons_[0]);
  grpc::GenericStub stub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  // AbortTaskRequest{job_id: "\xff"} on the wire: field 1, length 1.
  const std::string wire = "\x0a\x01\xff";
  grpc::Slice slice(wire.data(), wire.size());
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, "/meshcast.v1.Worker/AbortTask",
                 grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_message();
  EXPECT_NE(status.error_message().find("job_id"), std::string::npos)
      << status.error_message();
  EXPECT_FALSE(daemons_[0]->Exited());
}

TEST_F(WorkerDaemonTest, SigtermShutsDownCleanly) {
  daemons_[0]->Signal(SIGTERM);
  const int status = daemons_[0]->Wait();
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A task waiting for a peer does not keep the daemon from stopping.
TEST_F(WorkerDaemonTest, SigtermDuringATaskAbortsItAndExits) {
  TestJob job(2, 2, "interrupted-job");
  const int t = job.AddTensor({{8, 8}, DType::kUInt8});
  job.AddBuffer(2, t, job.FullBox(t), BufferRole::kSource);
  job.AddBuffer(0, t, job.FullBox(t), BufferRole::kDestination);
  job.AddTransfer(t, job.FullBox(t), {2, 0});
  Call call;
  // Worker 1 is never asked: worker 0 waits in the rendezvous.
  std::thread run([&] { call = RunTask(*stubs_[0], job.ProgramFor(0)); });
  absl::SleepFor(absl::Milliseconds(300));
  // While the task waits, the daemon pushes its progress (at once when it
  // starts, then about every 250 ms); the idle worker 1 pushes nothing.
  const std::vector<v1::ReportProgressRequest> reports =
      controller_.progress_reports();
  ASSERT_FALSE(reports.empty());
  for (const v1::ReportProgressRequest& report : reports) {
    EXPECT_EQ(report.worker(), "w0");
    ASSERT_EQ(report.tasks_size(), 1);
    EXPECT_EQ(report.tasks(0).job_id(), "interrupted-job");
    EXPECT_FALSE(report.tasks(0).phase().empty());
  }
  EXPECT_EQ(reports.back().tasks(0).steps_total(), 1);
  EXPECT_EQ(reports.back().tasks(0).steps_done(), 0);
  const absl::Time start = absl::Now();
  daemons_[0]->Signal(SIGTERM);
  const int status = daemons_[0]->Wait();
  const absl::Duration stop = absl::Now() - start;
  run.join();
  // The bound: a worker exits within 2 s of SIGTERM.
  EXPECT_LT(stop, absl::Seconds(2));
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  if (call.status.ok()) {
    EXPECT_FALSE(call.response.ok());
    EXPECT_NE(call.response.error().find("shutting down"), std::string::npos)
        << call.response.error();
  }
}

}  // namespace
}  // namespace meshcast::worker
