// GrpcWorkerClient against an in-process fake Worker service, and the whole
// controller pushing programs to such workers over real gRPC.
#include "controller/grpc_worker_client.h"

#include <grpcpp/grpcpp.h>

#include <thread>

#include "controller/controller_server.h"
#include "util/log.h"
#include "controller/program_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshcast/v1/controller.grpc.pb.h"
#include "meshcast/v1/worker.grpc.pb.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

// Verifies nothing; reports every destination element verified, or blocks
// until AbortTask / cancellation when told to.
class FakeWorkerService final : public v1::Worker::Service {
 public:
  grpc::Status RunTask(grpc::ServerContext* context,
                       const v1::RunTaskRequest* request,
                       v1::RunTaskResponse* response) override {
    const v1::WorkerProgram& program = request->program();
    {
      absl::MutexLock lock(&mu_);
      ++runs_;
      if (block_) {
        const std::string job = program.job_id();
        while (!aborted_.contains(job) && !context->IsCancelled()) {
          // Polls IsCancelled every 10 ms; AbortTask wakes it early.
          mu_.AwaitWithTimeout(absl::Condition(&wake_), absl::Milliseconds(10));
          wake_ = false;
        }
        response->set_ok(false);
        response->set_error("aborted");
        return grpc::Status::OK;
      }
    }
    response->set_ok(true);
    response->mutable_result()->set_seconds(0.01);
    response->mutable_result()->set_elements_verified(
        DestinationElements(program.plan()));
    return grpc::Status::OK;
  }
  grpc::Status AbortTask(grpc::ServerContext*,
                         const v1::AbortTaskRequest* request,
                         v1::AbortTaskResponse* response) override {
    absl::MutexLock lock(&mu_);
    aborted_.insert(request->job_id());
    wake_ = true;
    response->set_found(true);
    return grpc::Status::OK;
  }
  void set_block(bool block) {
    absl::MutexLock lock(&mu_);
    block_ = block;
  }
  int runs() {
    absl::MutexLock lock(&mu_);
    return runs_;
  }
  bool aborted(const std::string& job) {
    absl::MutexLock lock(&mu_);
    return aborted_.contains(job);
  }

 private:
  absl::Mutex mu_;
  bool block_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  int runs_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<std::string> aborted_ ABSL_GUARDED_BY(mu_);
};

// A fake worker serving on 127.0.0.1:<free port>.
struct FakeWorker {
  FakeWorker() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~FakeWorker() {
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::seconds(1));
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  FakeWorkerService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

v1::WorkerProgram Program(const std::string& job) {
  v1::WorkerProgram program;
  program.set_job_id(job);
  v1::Buffer* b = program.mutable_plan()->add_buffers();
  b->set_role(v1::Buffer::ROLE_DESTINATION);
  b->add_box()->set_end(10);
  return program;
}

TEST(GrpcWorkerClientTest, RunsAndAborts) {
  SetLogQuiet(true);
  FakeWorker worker;
  ASSERT_GT(worker.port, 0);
  GrpcWorkerClient client;
  CallCanceller canceller;
  absl::StatusOr<v1::RunTaskResponse> r =
      client.RunTask({"w", worker.address()}, Program("job-1"),
                     absl::Now() + absl::Seconds(10), &canceller);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok());
  EXPECT_EQ(r->result().elements_verified(), 10);
  EXPECT_TRUE(client
                  .AbortTask({"w", worker.address()}, "job-1", "test",
                             absl::Now() + absl::Seconds(5))
                  .ok());
  EXPECT_TRUE(worker.service.aborted("job-1"));
}

TEST(GrpcWorkerClientTest, CancellerCutsABlockedCallShort) {
  FakeWorker worker;
  worker.service.set_block(true);
  GrpcWorkerClient client;
  CallCanceller canceller;
  std::thread cancel([&] {
    while (worker.service.runs() == 0) absl::SleepFor(absl::Milliseconds(1));
    canceller.Cancel();
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::RunTaskResponse> r =
      client.RunTask({"w", worker.address()}, Program("job-2"),
                     absl::Now() + absl::Seconds(30), &canceller);
  cancel.join();
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // A canceller that already fired cancels new calls at once.
  r = client.RunTask({"w", worker.address()}, Program("job-3"),
                     absl::Now() + absl::Seconds(30), &canceller);
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
}

TEST(GrpcWorkerClientTest, DeadlinesAndUnreachableWorkers) {
  FakeWorker worker;
  worker.service.set_block(true);
  GrpcWorkerClient client;
  CallCanceller canceller;
  absl::StatusOr<v1::RunTaskResponse> r =
      client.RunTask({"w", worker.address()}, Program("job-4"),
                     absl::Now() + absl::Milliseconds(100), &canceller);
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  // Nothing listens on port 1.
  r = client.RunTask({"gone", "127.0.0.1:1"}, Program("job-5"),
                     absl::Now() + absl::Seconds(5), &canceller);
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
}

// The controller with its real gRPC worker client and two fake workers.
TEST(ControllerOverGrpcTest, JobRunsOnRemoteWorkersAndCancelAborts) {
  SetLogQuiet(true);
  FakeWorker w0, w1;
  ControllerConfig config;
  config.listen = "127.0.0.1:0";
  config.db_path = ":memory:";
  config.jobs.schedule_interval = absl::Milliseconds(10);
  absl::StatusOr<std::unique_ptr<ControllerServer>> server =
      ControllerServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Controller::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()),
                          grpc::InsecureChannelCredentials()));
  for (FakeWorker* w : {&w0, &w1}) {
    v1::RegisterWorkerRequest request;
    request.mutable_worker()->set_name(w == &w0 ? "w0" : "w1");
    request.mutable_worker()->set_address(w->address());
    request.mutable_worker()->set_num_devices(2);
    v1::RegisterWorkerResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(stub->RegisterWorker(&context, request, &response).ok());
  }
  v1::SubmitJobRequest submit;
  v1::ReshardSpec* r = submit.mutable_spec()->mutable_reshard();
  r->mutable_tensor()->add_shape(6);
  r->mutable_tensor()->set_dtype(v1::DTYPE_INT8);
  r->mutable_src_mesh()->add_shape(2);
  r->mutable_src_spec()->set_text("S0");
  r->mutable_dst_mesh()->add_shape(2);
  r->mutable_dst_spec()->set_text("R");
  auto run = [&]() {
    v1::SubmitJobResponse submitted;
    grpc::ClientContext context;
    EXPECT_TRUE(stub->SubmitJob(&context, submit, &submitted).ok());
    return submitted.job().id();
  };
  auto wait = [&](const std::string& id) {
    v1::GetJobResponse got;
    for (int i = 0; i < 2000; ++i) {
      grpc::ClientContext context;
      v1::GetJobRequest get;
      get.set_id(id);
      EXPECT_TRUE(stub->GetJob(&context, get, &got).ok());
      const v1::JobState s = got.job().state();
      if (s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
          s == v1::JOB_STATE_CANCELLED) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return got.job();
  };
  v1::Job done = wait(run());
  EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.message();
  EXPECT_EQ(done.result().elements_verified(), 12);
  EXPECT_EQ(w0.service.runs(), 1);
  EXPECT_EQ(w1.service.runs(), 1);

  w0.service.set_block(true);
  w1.service.set_block(true);
  const std::string id = run();
  while (w0.service.runs() < 2 || w1.service.runs() < 2) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  v1::CancelJobRequest cancel;
  cancel.set_id(id);
  v1::CancelJobResponse cancelled;
  grpc::ClientContext context;
  ASSERT_TRUE(stub->CancelJob(&context, cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.job().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(w0.service.aborted(id));
  EXPECT_TRUE(w1.service.aborted(id));
  (*server)->Shutdown();
}

}  // namespace
}  // namespace meshcast
