// Starts the real controller gRPC server in-process on 127.0.0.1:0 (fake
// workers behind it) and drives it through a real channel.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "controller/controller_server.h"
#include "controller/fake_worker_client.h"
#include "util/log.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshcast/v1/controller.grpc.pb.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

bool IsFinal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

v1::JobSpec SmallJob() {
  v1::JobSpec job;
  job.set_name("rpc");
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

class ControllerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogQuiet(true);
    db_ = ::testing::TempDir() + "/controller_service_test_" +
          std::to_string(getpid()) + ".db";
    RemoveDb();
    ControllerConfig config;
    config.listen = "127.0.0.1:0";
    config.db_path = db_;
    config.registry.lease = absl::Seconds(30);
    config.jobs.schedule_interval = absl::Milliseconds(10);
    config.jobs.abort_timeout = absl::Seconds(1);
    auto client = std::make_unique<FakeWorkerClient>();
    client_ = client.get();
    absl::StatusOr<std::unique_ptr<ControllerServer>> server =
        ControllerServer::Start(config, std::move(client));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_GT(server_->port(), 0);
    channel_ =
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                            grpc::InsecureChannelCredentials());
    stub_ = v1::Controller::NewStub(channel_);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    RemoveDb();
  }
  void RemoveDb() {
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::remove((db_ + suffix).c_str());
    }
  }
  // A context with a deadline, so that no test can hang on a call.
  static std::unique_ptr<grpc::ClientContext> Context(int seconds = 10) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(seconds));
    return context;
  }
  grpc::Status Register(const std::string& name, int devices,
                        v1::RegisterWorkerResponse* response) {
    v1::RegisterWorkerRequest request;
    request.mutable_worker()->set_name(name);
    request.mutable_worker()->set_address("127.0.0.1:1");
    request.mutable_worker()->set_num_devices(devices);
    request.mutable_worker()->set_device_kind("cpu");
    return stub_->RegisterWorker(Context().get(), request, response);
  }
  void RegisterTwo() {
    v1::RegisterWorkerResponse response;
    ASSERT_TRUE(Register("alpha", 2, &response).ok());
    EXPECT_EQ(response.host_index(), 0);
    EXPECT_DOUBLE_EQ(response.lease_seconds(), 30);
    EXPECT_GT(response.heartbeat_seconds(), 0);
    ASSERT_TRUE(Register("beta", 2, &response).ok());
    EXPECT_EQ(response.host_index(), 1);
  }
  v1::Job Submit(const v1::JobSpec& spec) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    v1::SubmitJobResponse response;
    grpc::Status status = stub_->SubmitJob(Context().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.job();
  }
  v1::Job WaitForFinal(const std::string& id) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    v1::GetJobResponse response;
    while (absl::Now() < deadline) {
      v1::GetJobRequest request;
      request.set_id(id);
      grpc::Status status = stub_->GetJob(Context().get(), request, &response);
      EXPECT_TRUE(status.ok()) << status.error_message();
      if (!status.ok() || IsFinal(response.job().state())) break;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return response.job();
  }

  std::string db_;
  FakeWorkerClient* client_ = nullptr;
  std::unique_ptr<ControllerServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Controller::Stub> stub_;
};

TEST_F(ControllerServiceTest, RegisterHeartbeatAndCluster) {
  RegisterTwo();
  v1::HeartbeatRequest heartbeat;
  v1::HeartbeatResponse known;
  heartbeat.set_name("alpha");
  ASSERT_TRUE(stub_->Heartbeat(Context().get(), heartbeat, &known).ok());
  EXPECT_TRUE(known.known());
  heartbeat.set_name("stranger");
  ASSERT_TRUE(stub_->Heartbeat(Context().get(), heartbeat, &known).ok());
  EXPECT_FALSE(known.known());

  v1::RegisterWorkerResponse response;
  grpc::Status mismatch = Register("gamma", 3, &response);
  EXPECT_EQ(mismatch.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(mismatch.error_message(), HasSubstr("same device count"));

  v1::GetClusterResponse cluster;
  ASSERT_TRUE(
      stub_->GetCluster(Context().get(), v1::GetClusterRequest(), &cluster)
          .ok());
  EXPECT_EQ(cluster.topology().num_hosts(), 2);
  EXPECT_EQ(cluster.topology().devices_per_host(), 2);
  ASSERT_EQ(cluster.workers_size(), 2);
  EXPECT_EQ(cluster.workers(1).name(), "beta");
  EXPECT_EQ(cluster.workers(1).host_index(), 1);
  EXPECT_EQ(cluster.workers(1).state(), v1::WorkerInfo::STATE_READY);
}

TEST_F(ControllerServiceTest, SubmitGetListWatchAndCancel) {
  RegisterTwo();
  v1::Job job = Submit(SmallJob());
  EXPECT_EQ(job.id(), "job-000001");
  job = WaitForFinal(job.id());
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.message();
  EXPECT_EQ(job.result().elements_verified(), 32);
  // The controller placed both 1x2 meshes, on disjoint hosts.
  EXPECT_THAT(job.placed_src_mesh().shape(), ElementsAre(1, 2));
  EXPECT_THAT(job.placed_src_mesh().devices(), ElementsAre(0, 1));
  EXPECT_THAT(job.placed_dst_mesh().shape(), ElementsAre(1, 2));
  EXPECT_THAT(job.placed_dst_mesh().devices(), ElementsAre(2, 3));

  v1::ListJobsResponse list;
  ASSERT_TRUE(
      stub_->ListJobs(Context().get(), v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).id(), job.id());

  // A finished job's watch stream: its final state, then the end.
  v1::WatchJobRequest watch;
  watch.set_id(job.id());
  auto context = Context();
  auto reader = stub_->WatchJob(context.get(), watch);
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_FALSE(reader->Read(&event));
  EXPECT_TRUE(reader->Finish().ok());

  v1::CancelJobRequest cancel;
  v1::CancelJobResponse cancelled;
  cancel.set_id(job.id());
  EXPECT_EQ(stub_->CancelJob(Context().get(), cancel, &cancelled).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  cancel.set_id("job-123456");
  EXPECT_EQ(stub_->CancelJob(Context().get(), cancel, &cancelled).error_code(),
            grpc::StatusCode::NOT_FOUND);
  v1::GetJobRequest get;
  v1::GetJobResponse got;
  get.set_id("nope");
  EXPECT_EQ(stub_->GetJob(Context().get(), get, &got).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(ControllerServiceTest, BadSpecsAreInvalidArgument) {
  RegisterTwo();
  v1::JobSpec bad = SmallJob();
  bad.mutable_reshard()->mutable_dst_spec()->set_text("RS7Q");
  v1::SubmitJobRequest request;
  *request.mutable_spec() = bad;
  v1::SubmitJobResponse response;
  grpc::Status status = stub_->SubmitJob(Context().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("dst_spec"));
  bad = SmallJob();
  bad.mutable_reshard()->mutable_dst_mesh()->set_shape(0, 5);
  *request.mutable_spec() = bad;
  status = stub_->SubmitJob(Context().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("cluster has 2 hosts x 2"));
  status = stub_->SubmitJob(Context().get(), v1::SubmitJobRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ControllerServiceTest, WatchSeesACancelThroughRpc) {
  RegisterTwo();
  client_->SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  v1::Job job = Submit(SmallJob());
  ASSERT_TRUE(client_->WaitForBlocked(2, absl::Seconds(10)));
  v1::WatchJobRequest watch;
  watch.set_id(job.id());
  auto context = Context(20);
  auto reader = stub_->WatchJob(context.get(), watch);
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.state(), v1::JOB_STATE_RUNNING);

  v1::GetClusterResponse cluster;
  ASSERT_TRUE(
      stub_->GetCluster(Context().get(), v1::GetClusterRequest(), &cluster)
          .ok());
  EXPECT_EQ(cluster.workers(0).state(), v1::WorkerInfo::STATE_BUSY);

  v1::CancelJobRequest cancel;
  cancel.set_id(job.id());
  v1::CancelJobResponse cancelled;
  ASSERT_TRUE(stub_->CancelJob(Context().get(), cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.job().state(), v1::JOB_STATE_CANCELLED);
  v1::JobState last = event.state();
  while (reader->Read(&event)) last = event.state();
  EXPECT_EQ(last, v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(reader->Finish().ok());
}

TEST_F(ControllerServiceTest, WorkersPushProgressThroughRpc) {
  RegisterTwo();
  client_->SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  v1::Job job = Submit(SmallJob());
  ASSERT_TRUE(client_->WaitForBlocked(2, absl::Seconds(10)));
  std::vector<v1::WorkerProgram> programs = client_->programs();
  ASSERT_EQ(programs.size(), 2u);
  int all_steps = 0;
  for (const v1::WorkerProgram& p : programs) {
    all_steps += p.plan().steps_size();
  }
  // alpha has moved none of its data yet and says it is connecting; a task
  // of a job it does not run is ignored, not refused.
  const v1::WorkerProgram& alpha =
      programs[0].worker() == "alpha" ? programs[0] : programs[1];
  v1::ReportProgressRequest report;
  report.set_worker("alpha");
  v1::TaskProgress* task = report.add_tasks();
  task->set_job_id(job.id());
  task->set_steps_total(alpha.plan().steps_size());
  task->set_phase("connect");
  report.add_tasks()->set_job_id("job-not-here");
  v1::ReportProgressResponse response;
  grpc::Status status =
      stub_->ReportProgress(Context().get(), report, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  v1::GetJobRequest get;
  get.set_id(job.id());
  v1::GetJobResponse got;
  ASSERT_TRUE(stub_->GetJob(Context().get(), get, &got).ok());
  EXPECT_EQ(got.job().state(), v1::JOB_STATE_RUNNING);
  // The first report comes within the event interval of RUNNING: it may be
  // held back until a later one; resend until the event is out.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (got.job().message().find("phase connect") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(stub_->ReportProgress(Context().get(), report, &response).ok());
    ASSERT_TRUE(stub_->GetJob(Context().get(), get, &got).ok());
  }
  EXPECT_THAT(got.job().message(),
              HasSubstr(absl::StrCat("(0/", all_steps,
                                     " worker steps done), phase connect")));
  // A report must name its worker.
  report.clear_worker();
  status = stub_->ReportProgress(Context().get(), report, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::CancelJobRequest cancel;
  cancel.set_id(job.id());
  v1::CancelJobResponse cancelled;
  ASSERT_TRUE(stub_->CancelJob(Context().get(), cancel, &cancelled).ok());
}

TEST_F(ControllerServiceTest, KeyValueRendezvous) {
  // Keys belong to a running job and only its workers may use them
  // (kv_service_test.cc covers the rule in full).
  RegisterTwo();
  client_->SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  v1::Job job = Submit(SmallJob());
  ASSERT_TRUE(client_->WaitForBlocked(2, absl::Seconds(10)));
  const std::string prefix = absl::StrCat("job/", job.id(), "/");
  v1::KvSetRequest set;
  set.set_worker("alpha");
  set.set_key(prefix + "gloo/0");
  set.set_value(std::string("\x01\x02\x00\x03", 4));
  v1::KvSetResponse set_response;
  ASSERT_TRUE(stub_->KvSet(Context().get(), set, &set_response).ok());
  v1::KvGetRequest get;
  get.set_worker("beta");
  get.set_key(set.key());
  v1::KvGetResponse got;
  ASSERT_TRUE(stub_->KvGet(Context().get(), get, &got).ok());
  EXPECT_EQ(got.value(), set.value());

  // A get that waits for a later set.
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    v1::KvSetRequest later;
    later.set_worker("beta");
    later.set_key(prefix + "late");
    later.set_value("v");
    v1::KvSetResponse r;
    EXPECT_TRUE(stub_->KvSet(Context().get(), later, &r).ok());
  });
  get.set_key(prefix + "late");
  get.set_timeout_seconds(10);
  grpc::Status status = stub_->KvGet(Context().get(), get, &got);
  setter.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(got.value(), "v");

  get.set_key(prefix + "never");
  get.set_timeout_seconds(0.05);
  EXPECT_EQ(stub_->KvGet(Context().get(), get, &got).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  // Not a worker of the job.
  set.set_worker("mallory");
  EXPECT_EQ(stub_->KvSet(Context().get(), set, &set_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::CancelJobRequest cancel;
  cancel.set_id(job.id());
  v1::CancelJobResponse cancelled;
  ASSERT_TRUE(stub_->CancelJob(Context().get(), cancel, &cancelled).ok());
}

TEST_F(ControllerServiceTest, PlanDryRunOnTheLiveTopology) {
  RegisterTwo();
  v1::PlanRequest request;
  *request.mutable_reshard() = SmallJob().reshard();
  v1::PlanResponse response;
  grpc::Status status = stub_->Plan(Context().get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.rows_size(), 5);
  EXPECT_EQ(response.topology().num_hosts(), 2);
  EXPECT_THAT(response.placed_src_mesh().devices(), ElementsAre(0, 1));
  EXPECT_THAT(response.placed_dst_mesh().devices(), ElementsAre(2, 3));
  EXPECT_GT(response.plan().steps_size(), 0);
  int chosen = 0;
  for (const v1::StrategyRow& row : response.rows()) {
    chosen += row.chosen();
    if (row.chosen()) {
      EXPECT_EQ(row.strategy(), response.plan().strategy());
    }
  }
  EXPECT_EQ(chosen, 1);
  ASSERT_EQ(response.placed_meshes_size(), 2);
  EXPECT_THAT(response.placed_meshes(0).devices(), ElementsAre(0, 1));
  EXPECT_THAT(response.placed_meshes(1).devices(), ElementsAre(2, 3));
  // The same job as a JobSpec plans the same.
  v1::PlanRequest by_spec;
  *by_spec.mutable_spec() = SmallJob();
  v1::PlanResponse same;
  status = stub_->Plan(Context().get(), by_spec, &same);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(same.rows_size(), 5);
  EXPECT_EQ(same.plan().steps_size(), response.plan().steps_size());
  EXPECT_THAT(same.placed_src_mesh().devices(), ElementsAre(0, 1));
  EXPECT_EQ(
      stub_->Plan(Context().get(), v1::PlanRequest(), &response).error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ControllerServiceTest, PlanDryRunOfAnotherKind) {
  RegisterTwo();
  v1::PlanRequest request;
  v1::CollectiveSpec* collective = request.mutable_spec()->mutable_collective();
  collective->set_op("all_reduce");
  collective->mutable_mesh()->add_shape(2);
  collective->mutable_mesh()->add_shape(2);
  collective->mutable_mesh()->set_first_host(-1);
  collective->set_size("4KiB");
  collective->set_dtype(v1::DTYPE_FLOAT32);
  v1::PlanResponse response;
  grpc::Status status = stub_->Plan(Context().get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.plan().kind(), "collective");
  EXPECT_GT(response.plan().steps_size(), 0);
  ASSERT_EQ(response.placed_meshes_size(), 1);
  EXPECT_THAT(response.placed_meshes(0).devices(), ElementsAre(0, 1, 2, 3));
  // Only a reshard plan fills the source/destination fields.
  EXPECT_FALSE(response.has_placed_src_mesh());
  EXPECT_FALSE(response.has_placed_dst_mesh());
  collective->set_op("all_shuffle");
  EXPECT_EQ(stub_->Plan(Context().get(), request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ControllerServiceTest, HostileInputsGetErrorsNotCrashes) {
  RegisterTwo();
  v1::RegisterWorkerResponse reg;
  EXPECT_EQ(Register("", 2, &reg).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Register("x", -5, &reg).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Keys outside a running job's namespace are refused at once, whatever
  // the timeout (the clamping of hostile timeouts: kv_service_test.cc).
  v1::KvGetRequest get;
  get.set_key("k");
  get.set_timeout_seconds(std::nan(""));
  v1::KvGetResponse got;
  EXPECT_EQ(stub_->KvGet(Context().get(), get, &got).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  get.set_key("job/job-000001/k");
  get.set_timeout_seconds(-1e300);
  EXPECT_EQ(stub_->KvGet(Context().get(), get, &got).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // Invalid UTF-8 in a string field: INVALID_ARGUMENT naming the field,
  // for a synchronous method and for the callback one (KvGet) alike.
  get.set_key("job/\xFF/k");
  grpc::Status bad_utf8 = stub_->KvGet(Context().get(), get, &got);
  EXPECT_EQ(bad_utf8.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad_utf8.error_message(),
              HasSubstr("string field key of meshcast.v1.KvGetRequest"));
  v1::RegisterWorkerRequest bad_name;
  bad_name.mutable_worker()->set_name("w\xC3");
  bad_name.mutable_worker()->set_num_devices(1);
  bad_utf8 = stub_->RegisterWorker(Context().get(), bad_name, &reg);
  EXPECT_EQ(bad_utf8.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad_utf8.error_message(),
              HasSubstr("string field worker.name of "
                        "meshcast.v1.RegisterWorkerRequest"));
  get.set_timeout_seconds(std::numeric_limits<double>::infinity());
  get.set_key("");
  EXPECT_EQ(stub_->KvGet(Context().get(), get, &got).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::KvSetRequest set;
  v1::KvSetResponse set_response;
  EXPECT_EQ(stub_->KvSet(Context().get(), set, &set_response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  v1::SubmitJobRequest submit;
  v1::SubmitJobResponse submitted;
  *submit.mutable_spec() = SmallJob();
  v1::ReshardSpec* r = submit.mutable_spec()->mutable_reshard();
  r->mutable_tensor()->clear_shape();
  for (int i = 0; i < 1000; ++i) r->mutable_tensor()->add_shape(1 << 30);
  EXPECT_EQ(stub_->SubmitJob(Context().get(), submit, &submitted).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  *submit.mutable_spec() = SmallJob();
  r = submit.mutable_spec()->mutable_reshard();
  r->mutable_src_mesh()->set_shape(0, std::numeric_limits<int>::max());
  r->mutable_src_mesh()->set_shape(1, std::numeric_limits<int>::max());
  EXPECT_EQ(stub_->SubmitJob(Context().get(), submit, &submitted).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  *submit.mutable_spec() = SmallJob();
  r = submit.mutable_spec()->mutable_reshard();
  r->mutable_src_mesh()->set_first_host(std::numeric_limits<int>::max());
  EXPECT_EQ(stub_->SubmitJob(Context().get(), submit, &submitted).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  r->mutable_src_mesh()->set_first_host(1);
  r->mutable_src_mesh()->add_devices(-7);
  r->mutable_src_mesh()->add_devices(1 << 30);
  EXPECT_EQ(stub_->SubmitJob(Context().get(), submit, &submitted).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::ListJobsRequest list;
  list.set_limit(-3);
  v1::ListJobsResponse listed;
  EXPECT_TRUE(stub_->ListJobs(Context().get(), list, &listed).ok());
  v1::WatchJobRequest watch;
  auto context = Context();
  auto reader = stub_->WatchJob(context.get(), watch);
  v1::JobEvent event;
  EXPECT_FALSE(reader->Read(&event));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Still serving.
  EXPECT_EQ(WaitForFinal(Submit(SmallJob()).id()).state(),
            v1::JOB_STATE_SUCCEEDED);
}

TEST_F(ControllerServiceTest, HistorySurvivesARestart) {
  RegisterTwo();
  const std::string done = WaitForFinal(Submit(SmallJob()).id()).id();
  client_->SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  const std::string running = Submit(SmallJob()).id();
  ASSERT_TRUE(client_->WaitForBlocked(2, absl::Seconds(10)));
  // A clean shutdown fails the running job; a new controller on the same
  // database lists both.
  server_->Shutdown();
  server_.reset();
  ControllerConfig config;
  config.listen = "127.0.0.1:0";
  config.db_path = db_;
  absl::StatusOr<std::unique_ptr<ControllerServer>> server =
      ControllerServer::Start(config, std::make_unique<FakeWorkerClient>());
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  stub_ = v1::Controller::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                          grpc::InsecureChannelCredentials()));
  v1::ListJobsResponse list;
  ASSERT_TRUE(
      stub_->ListJobs(Context().get(), v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 2);
  EXPECT_EQ(list.jobs(0).id(), running);
  EXPECT_EQ(list.jobs(0).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(list.jobs(0).message(), "controller shut down");
  EXPECT_EQ(list.jobs(1).id(), done);
  EXPECT_EQ(list.jobs(1).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(list.jobs(1).placed_dst_mesh().devices(), ElementsAre(2, 3));
}

}  // namespace
}  // namespace meshcast
