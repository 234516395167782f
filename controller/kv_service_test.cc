// The key-value access rule on its own, then KvSet/KvGet through a real
// in-process gRPC server whose synchronous thread pool is small (8 threads),
// with a job kept RUNNING by blocking fake workers.
#include "controller/kv_service.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "controller/controller_service.h"
#include "controller/fake_worker_client.h"
#include "util/log.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshcast/v1/controller.grpc.pb.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kWorkers = {"w0", "w1"};

TEST(CheckKvWriteTest, AJobsWorkerMayWriteWhileItRuns) {
  EXPECT_TRUE(CheckKvWrite(v1::JOB_STATE_RUNNING, kWorkers, "w1",
                           "job/job-000001/gloo/0")
                  .ok());
  EXPECT_TRUE(CheckKvRead(v1::JOB_STATE_RUNNING, kWorkers, "w0",
                          "job/job-000001/gloo/0")
                  .ok());
}

TEST(CheckKvWriteTest, KeysOfAJobNotRunningCannotBePreSeeded) {
  for (v1::JobState state :
       {v1::JOB_STATE_QUEUED, v1::JOB_STATE_PLANNING, v1::JOB_STATE_SUCCEEDED,
        v1::JOB_STATE_FAILED, v1::JOB_STATE_CANCELLED}) {
    absl::Status status =
        CheckKvWrite(state, kWorkers, "w0", "job/job-000002/gloo/0");
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
    EXPECT_THAT(status.message(), HasSubstr("\"job/job-000002/\""));
    EXPECT_THAT(status.message(), HasSubstr(v1::JobState_Name(state)));
  }
  // A job that does not exist (yet): no workers, no state.
  absl::Status status = CheckKvWrite(v1::JOB_STATE_UNSPECIFIED, {}, "w0",
                                     "job/job-000099/gloo/0");
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("not queued or running"));
}

TEST(CheckKvWriteTest, OnlyTheJobsWorkersMayWrite) {
  absl::Status status = CheckKvWrite(v1::JOB_STATE_RUNNING, kWorkers,
                                     "intruder", "job/job-000001/gloo/0");
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("\"intruder\""));
  EXPECT_THAT(status.message(), HasSubstr("\"job/job-000001/\""));
  status = CheckKvWrite(v1::JOB_STATE_RUNNING, kWorkers, "",
                        "job/job-000001/gloo/0");
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("names no worker"));
  status = CheckKvRead(v1::JOB_STATE_RUNNING, kWorkers, "intruder",
                       "job/job-000001/gloo/0");
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;
  // A hostile name is quoted escaped and short.
  status = CheckKvWrite(v1::JOB_STATE_RUNNING, kWorkers,
                        "\x1b[2J" + std::string(1000, 'x'), "job/j/k");
  EXPECT_THAT(status.message(), HasSubstr("\"\\x1B[2Jxxx"));
  EXPECT_LT(status.message().size(), 300u);
}

TEST(CheckKvWriteTest, KeysOutsideAJobNamespaceAreRefused) {
  absl::Status status =
      CheckKvWrite(v1::JOB_STATE_RUNNING, kWorkers, "w0", "global/config");
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("job/<job_id>/"));
}

class KvServiceRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogQuiet(true);
    store_ = *JobStore::Open(":memory:");
    WorkerRegistry::Options registry_options;
    registry_options.lease = absl::Seconds(30);
    registry_ =
        std::make_unique<WorkerRegistry>(registry_options, Clock::Real());
    for (const std::string& name : kWorkers) {
      WorkerRecord w;
      w.name = name;
      w.address = "127.0.0.1:1";
      w.num_devices = 2;
      w.device_kind = "cpu";
      ASSERT_TRUE(registry_->Register(w).ok());
    }
    KvStore::Options kv_options;
    kv_options.max_keys_per_job = 8;
    kv_ = std::make_unique<KvStore>(kv_options);
    client_.SetDefaultMode(FakeWorkerClient::Mode::kBlock);
    JobManager::Options options;
    options.schedule_interval = absl::Milliseconds(10);
    options.abort_timeout = absl::Seconds(1);
    jobs_ = std::make_unique<JobManager>(options, store_.get(), registry_.get(),
                                         kv_.get(), &client_, Clock::Real());
    ASSERT_TRUE(jobs_->Start().ok());
    service_ = std::make_unique<ControllerService>(registry_.get(), jobs_.get(),
                                                   kv_.get());
    grpc::ServerBuilder builder;
    // A small synchronous pool: a blocking KvGet would take it all.
    grpc::ResourceQuota quota("kv_service_test");
    quota.SetMaxThreads(8);
    builder.SetResourceQuota(quota);
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Controller::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (jobs_ != nullptr) jobs_->Shutdown("test over");
    if (kv_ != nullptr) kv_->Shutdown();
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::seconds(2));
    }
  }
  static std::unique_ptr<grpc::ClientContext> Context(int seconds = 10) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(seconds));
    return context;
  }
  v1::JobSpec SmallJob() {
    v1::JobSpec job;
    v1::ReshardSpec* r = job.mutable_reshard();
    r->mutable_tensor()->add_shape(8);
    r->mutable_tensor()->add_shape(4);
    r->mutable_tensor()->set_dtype(v1::DTYPE_INT32);
    r->mutable_src_mesh()->add_shape(1);
    r->mutable_src_mesh()->add_shape(2);
    r->mutable_src_mesh()->set_first_host(-1);
    r->mutable_src_spec()->set_text("S1R");
    r->mutable_dst_mesh()->add_shape(1);
    r->mutable_dst_mesh()->add_shape(2);
    r->mutable_dst_mesh()->set_first_host(-1);
    r->mutable_dst_spec()->set_text("RS1");
    return job;
  }
  // Submits a job that takes both workers and stays RUNNING.
  std::string StartRunningJob() {
    absl::StatusOr<v1::Job> job = jobs_->Submit(SmallJob());
    EXPECT_TRUE(job.ok()) << job.status();
    EXPECT_TRUE(client_.WaitForBlocked(2, absl::Seconds(10)));
    EXPECT_EQ(jobs_->Get(job->id())->state(), v1::JOB_STATE_RUNNING);
    return job->id();
  }
  grpc::Status Set(const std::string& worker, const std::string& key,
                   const std::string& value) {
    v1::KvSetRequest request;
    request.set_worker(worker);
    request.set_key(key);
    request.set_value(value);
    v1::KvSetResponse response;
    return stub_->KvSet(Context().get(), request, &response);
  }
  grpc::Status Get(const std::string& worker, const std::string& key,
                   double timeout_seconds, std::string* value) {
    v1::KvGetRequest request;
    request.set_worker(worker);
    request.set_key(key);
    request.set_timeout_seconds(timeout_seconds);
    v1::KvGetResponse response;
    grpc::Status status = stub_->KvGet(Context().get(), request, &response);
    *value = response.value();
    return status;
  }
  bool WaitForWaiters(size_t n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (kv_->waiters() != n && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    return kv_->waiters() == n;
  }
  v1::Job WaitForFinal(const std::string& id) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    v1::Job job = *jobs_->Get(id);
    while (absl::Now() < deadline && (job.state() == v1::JOB_STATE_RUNNING ||
                                      job.state() == v1::JOB_STATE_PLANNING ||
                                      job.state() == v1::JOB_STATE_QUEUED)) {
      absl::SleepFor(absl::Milliseconds(5));
      job = *jobs_->Get(id);
    }
    return job;
  }

  std::unique_ptr<JobStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<KvStore> kv_;
  FakeWorkerClient client_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<ControllerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Controller::Stub> stub_;
};

TEST_F(KvServiceRpcTest, TheJobsWorkersRendezvous) {
  const std::string id = StartRunningJob();
  const std::string key = absl::StrCat("job/", id, "/gloo/0");
  ASSERT_TRUE(Set("w0", key, std::string("\x01\x00\x02", 3)).ok());
  std::string value;
  grpc::Status status = Get("w1", key, 1, &value);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(value, std::string("\x01\x00\x02", 3));
  // Timeouts: a short wait ends with DEADLINE_EXCEEDED; hostile values are
  // clamped.
  EXPECT_EQ(Get("w1", key + "x", 0.05, &value).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(Get("w1", key + "x", std::nan(""), &value).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(Get("w1", key + "x", -1e300, &value).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(Get("w1", "", 1, &value).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(kv_->waiters(), 0u);
}

TEST_F(KvServiceRpcTest, PreSeedingAnotherJobIsRefused) {
  const std::string running = StartRunningJob();
  // A second job needs the same devices: it waits in the queue.
  absl::StatusOr<v1::Job> queued = jobs_->Submit(SmallJob());
  ASSERT_TRUE(queued.ok()) << queued.status();
  ASSERT_EQ(jobs_->Get(queued->id())->state(), v1::JOB_STATE_QUEUED);
  grpc::Status status =
      Set("w0", absl::StrCat("job/", queued->id(), "/gloo/0"), "evil");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("JOB_STATE_QUEUED"));
  EXPECT_THAT(status.error_message(),
              HasSubstr(absl::StrCat("\"job/", queued->id(), "/\"")));
  // The next job id, not submitted yet.
  status = Set("w0", "job/job-999999/gloo/0", "evil");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("not queued or running"));
  // Keys outside every job.
  EXPECT_EQ(Set("w0", "rank0", "v").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(kv_->size(), 0u);
}

TEST_F(KvServiceRpcTest, WritesAndReadsByNonMembersAreRefused) {
  const std::string id = StartRunningJob();
  const std::string key = absl::StrCat("job/", id, "/gloo/0");
  grpc::Status status = Set("intruder", key, "evil");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("\"intruder\""));
  EXPECT_EQ(Set("", key, "evil").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Set("w0", key, "addr").ok());
  std::string value;
  EXPECT_EQ(Get("intruder", key, 0, &value).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(value, "");
  EXPECT_EQ(kv_->size(), 1u);
}

TEST_F(KvServiceRpcTest, PerJobQuotaIsResourceExhausted) {
  const std::string id = StartRunningJob();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(Set("w0", absl::StrCat("job/", id, "/k", i), "v").ok());
  }
  grpc::Status status = Set("w0", absl::StrCat("job/", id, "/k8"), "v");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat("\"", id, "\"")));
  EXPECT_THAT(status.error_message(), HasSubstr("8 keys per job"));
}

TEST_F(KvServiceRpcTest, KeysAndWaitersAreClearedWhenTheJobEnds) {
  const std::string id = StartRunningJob();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Set("w0", absl::StrCat("job/", id, "/k", i), "v").ok());
  }
  EXPECT_EQ(kv_->usage(id).keys, 3u);
  grpc::Status waited;
  std::thread waiter([&] {
    std::string value;
    waited = Get("w1", absl::StrCat("job/", id, "/never"), 30, &value);
  });
  ASSERT_TRUE(WaitForWaiters(1));
  ASSERT_TRUE(jobs_->Cancel(id).ok());
  EXPECT_EQ(WaitForFinal(id).state(), v1::JOB_STATE_CANCELLED);
  waiter.join();
  EXPECT_EQ(waited.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(waited.error_message(), HasSubstr("job ended"));
  EXPECT_EQ(kv_->size(), 0u);
  EXPECT_EQ(kv_->usage(id).keys, 0u);
  EXPECT_EQ(kv_->waiters(), 0u);
  // Nothing can be written into the ended job afterwards.
  EXPECT_EQ(Set("w0", absl::StrCat("job/", id, "/k9"), "v").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(kv_->size(), 0u);
}

TEST_F(KvServiceRpcTest, WaitingGetsHoldNoThread) {
  const std::string id = StartRunningJob();
  const std::string key = absl::StrCat("job/", id, "/late");
  constexpr int kGets = 200;
  struct Call {
    grpc::ClientContext context;
    v1::KvGetRequest request;
    v1::KvGetResponse response;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Call>> calls;
  absl::BlockingCounter done(kGets);
  for (int i = 0; i < kGets; ++i) {
    auto call = std::make_unique<Call>();
    call->context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::seconds(30));
    call->request.set_key(key);
    call->request.set_worker(kWorkers[i % 2]);
    call->request.set_timeout_seconds(30);
    Call* raw = call.get();
    stub_->async()->KvGet(&raw->context, &raw->request, &raw->response,
                          [raw, &done](grpc::Status status) {
                            raw->status = std::move(status);
                            done.DecrementCount();
                          });
    calls.push_back(std::move(call));
  }
  // All 200 wait at once, far more than the 8 server threads.
  ASSERT_TRUE(WaitForWaiters(kGets)) << kv_->waiters();
  // Other calls still answer at once.
  const absl::Time start = absl::Now();
  v1::GetClusterResponse cluster;
  grpc::Status status =
      stub_->GetCluster(Context(2).get(), v1::GetClusterRequest(), &cluster);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(cluster.workers_size(), 2);
  v1::HeartbeatRequest heartbeat;
  heartbeat.set_name("w0");
  v1::HeartbeatResponse known;
  ASSERT_TRUE(stub_->Heartbeat(Context(2).get(), heartbeat, &known).ok());
  EXPECT_TRUE(known.known());
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  // One Set answers them all.
  ASSERT_TRUE(Set("w0", key, "addr").ok());
  done.Wait();
  for (const auto& call : calls) {
    EXPECT_TRUE(call->status.ok()) << call->status.error_message();
    EXPECT_EQ(call->response.value(), "addr");
  }
  EXPECT_EQ(kv_->waiters(), 0u);
}

TEST_F(KvServiceRpcTest, ACancelledClientFreesItsWaiter) {
  const std::string id = StartRunningJob();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  v1::KvGetRequest request;
  request.set_key(absl::StrCat("job/", id, "/never"));
  request.set_worker("w0");
  request.set_timeout_seconds(30);
  v1::KvGetResponse response;
  absl::Notification finished;
  grpc::Status result;
  stub_->async()->KvGet(&context, &request, &response,
                        [&](grpc::Status status) {
                          result = std::move(status);
                          finished.Notify();
                        });
  ASSERT_TRUE(WaitForWaiters(1));
  context.TryCancel();
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(result.error_code(), grpc::StatusCode::CANCELLED);
  // The server notices the cancel and removes the waiter.
  EXPECT_TRUE(WaitForWaiters(0)) << kv_->waiters();
}

}  // namespace
}  // namespace meshcast
