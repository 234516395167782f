// ControllerMetrics on its own (labels, initial series, state source), and
// inside a real in-process ControllerServer (fake workers) driven through a
// real gRPC channel: RPCs by method and code, job counts and histograms.
#include "controller/controller_metrics.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "controller/controller_server.h"
#include "controller/fake_worker_client.h"
#include "util/log.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshcast/v1/controller.grpc.pb.h"
#include "util/metrics.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;

TEST(ControllerMetricsTest, StartsWithBuildInfoAndZeroedSeries) {
  ControllerMetrics metrics;
  const std::string text = RenderMetrics(*metrics.collectable());
  EXPECT_THAT(FindSample(text, R"(meshcast_build_info{component="controller",)"
                           R"(version=")" MESHCAST_TEST_VERSION R"("})"),
              Optional(1.0))
      << text;
  // One zeroed series per job kind and final state.
  for (const char* type : {"reshard", "collective"}) {
    for (const char* state : {"succeeded", "failed", "cancelled"}) {
      EXPECT_THAT(FindSample(text, absl::StrCat(
                                       R"(meshcast_controller_jobs_finished_total{)"
                                       R"(type=")",
                                       type, R"(",state=")", state, R"("})")),
                  Optional(0.0))
          << type << " " << state;
    }
  }
  for (const char* state : {"ready", "busy", "lost"}) {
    EXPECT_THAT(
        FindSample(text, absl::StrCat(R"(meshcast_controller_workers{state=")",
                                  state, R"("})")),
        Optional(0.0));
  }
  EXPECT_THAT(FindSample(text, "meshcast_controller_queue_depth"), Optional(0.0));
  for (const char* name :
       {"meshcast_controller_planning_seconds",
        "meshcast_controller_job_duration_seconds",
        "meshcast_controller_measured_over_predicted_ratio",
        "meshcast_controller_dataplane_measured_seconds_total",
        "meshcast_controller_dataplane_predicted_seconds_total",
        "meshcast_controller_rpcs_total", "meshcast_controller_devices",
        "meshcast_controller_jobs"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# TYPE ", name, " ")));
  }
}

TEST(ControllerMetricsTest, StateSourceFeedsTheGaugesAtEveryScrape) {
  ControllerMetrics metrics;
  int calls = 0;
  metrics.SetStateSource([&calls] {
    ++calls;
    ControllerState state;
    state.workers_ready = 3;
    state.workers_busy = 1;
    state.workers_lost = calls;  // changes between scrapes
    state.devices_free = 10;
    state.devices_busy = 6;
    state.jobs[v1::JOB_STATE_SUCCEEDED] = 7;
    state.jobs[v1::JOB_STATE_QUEUED] = 2;
    state.queue_depth = 2;
    return state;
  });
  std::string text = RenderMetrics(*metrics.collectable());
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_workers{state="ready"})"),
              Optional(3.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_workers{state="busy"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_workers{state="lost"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_devices{state="free"})"),
              Optional(10.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_devices{state="busy"})"),
              Optional(6.0));
  EXPECT_THAT(
      FindSample(text,
             R"(meshcast_controller_jobs{type="reshard",state="succeeded"})"),
      Optional(7.0));
  EXPECT_THAT(
      FindSample(text,
             R"(meshcast_controller_jobs{type="reshard",state="queued"})"),
      Optional(2.0));
  // States without jobs read 0 rather than disappearing.
  EXPECT_THAT(
      FindSample(text,
             R"(meshcast_controller_jobs{type="reshard",state="failed"})"),
      Optional(0.0));
  EXPECT_THAT(FindSample(text, "meshcast_controller_queue_depth"), Optional(2.0));
  text = RenderMetrics(*metrics.collectable());
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_workers{state="lost"})"),
              Optional(2.0));
}

TEST(ControllerMetricsTest, RecordsJobEvents) {
  ControllerMetrics metrics;
  metrics.JobPlanned(ControllerMetrics::kReshard, 0.002);
  metrics.JobFinished(ControllerMetrics::kReshard, v1::JOB_STATE_SUCCEEDED,
                      1.5);
  metrics.JobFinished(ControllerMetrics::kReshard, v1::JOB_STATE_SUCCEEDED,
                      0.5);
  metrics.JobFinished(ControllerMetrics::kReshard, v1::JOB_STATE_FAILED, 3);
  // Not a final state: ignored.
  metrics.JobFinished(ControllerMetrics::kReshard, v1::JOB_STATE_RUNNING, 3);
  metrics.JobMeasured(ControllerMetrics::kReshard, 3, 2);
  metrics.JobMeasured(ControllerMetrics::kReshard, 3, 0);   // no prediction
  metrics.JobMeasured(ControllerMetrics::kReshard, -1, 2);  // nonsense
  const std::string text = RenderMetrics(*metrics.collectable());
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_jobs_finished_total{)"
                           R"(type="reshard",state="succeeded"})"),
              Optional(2.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_jobs_finished_total{)"
                           R"(type="reshard",state="failed"})"),
              Optional(1.0));
  EXPECT_EQ(FindSample(text, R"(meshcast_controller_jobs_finished_total{)"
                         R"(type="reshard",state="running"})"),
            std::nullopt);
  EXPECT_THAT(text, Not(HasSubstr(R"(job_duration_seconds_count{)"
                                  R"(type="reshard",state="running"})")));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_job_duration_seconds_sum{)"
                           R"(type="reshard",state="succeeded"})"),
              Optional(2.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_job_duration_seconds_count{)"
                           R"(type="reshard",state="succeeded"})"),
              Optional(2.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_planning_seconds_count{)"
                           R"(type="reshard"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_measured_over_predicted_)"
                           R"(ratio_count{type="reshard"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_measured_over_predicted_)"
                           R"(ratio_sum{type="reshard"})"),
              Optional(1.5));
  // 1.5 falls in the le="1.5" bucket, not in le="1.25".
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_measured_over_predicted_)"
                           R"(ratio_bucket{type="reshard",le="1.5"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_measured_over_predicted_)"
                           R"(ratio_bucket{type="reshard",le="1.25"})"),
              Optional(0.0));
  // The seconds counters take only the valid measurement (3 s against 2 s).
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_dataplane_measured_)"
                           R"(seconds_total{type="reshard"})"),
              Optional(3.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_dataplane_predicted_)"
                           R"(seconds_total{type="reshard"})"),
              Optional(2.0));
}

TEST(ControllerMetricsTest, LabelsComeFromFixedSets) {
  ControllerMetrics metrics;
  EXPECT_EQ(metrics.MethodLabel("/meshcast.v1.Controller/SubmitJob"),
            "SubmitJob");
  EXPECT_EQ(metrics.MethodLabel("/meshcast.v1.Controller/KvGet"), "KvGet");
  EXPECT_EQ(metrics.MethodLabel("/grpc.health.v1.Health/Check"), "Check");
  EXPECT_EQ(metrics.MethodLabel("/grpc.reflection.v1alpha.ServerReflection/"
                                "ServerReflectionInfo"),
            "ServerReflectionInfo");
  EXPECT_EQ(metrics.MethodLabel("/meshcast.v1.Controller/NoSuchMethod"),
            "other");
  EXPECT_EQ(metrics.MethodLabel("/evil.Service/job-000042"), "other");
  EXPECT_EQ(metrics.MethodLabel(""), "other");
  EXPECT_EQ(ControllerMetrics::CodeLabel(grpc::StatusCode::OK), "OK");
  EXPECT_EQ(ControllerMetrics::CodeLabel(grpc::StatusCode::NOT_FOUND),
            "NOT_FOUND");
  EXPECT_EQ(ControllerMetrics::CodeLabel(static_cast<grpc::StatusCode>(99)),
            "UNKNOWN");
  EXPECT_EQ(ControllerMetrics::StateLabel(v1::JOB_STATE_CANCELLED),
            "cancelled");
  EXPECT_EQ(ControllerMetrics::StateLabel(static_cast<v1::JobState>(99)),
            "unspecified");
}

v1::JobSpec SmallJob() {
  v1::JobSpec job;
  job.set_name("metrics");
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

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(10));
  return context;
}

class ControllerServerMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogQuiet(true);
    db_ = ::testing::TempDir() + "/controller_metrics_test_" +
          std::to_string(getpid()) + ".db";
    RemoveDb();
    ControllerConfig config;
    config.listen = "127.0.0.1:0";
    config.db_path = db_;
    config.registry.lease = absl::Seconds(30);
    config.jobs.schedule_interval = absl::Milliseconds(10);
    auto client = std::make_unique<FakeWorkerClient>();
    client_ = client.get();
    absl::StatusOr<std::unique_ptr<ControllerServer>> server =
        ControllerServer::Start(config, std::move(client));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::Controller::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                            grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_.reset();
    RemoveDb();
  }
  void RemoveDb() {
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::remove((db_ + suffix).c_str());
    }
  }
  void Register(const std::string& name) {
    v1::RegisterWorkerRequest request;
    request.mutable_worker()->set_name(name);
    request.mutable_worker()->set_address("127.0.0.1:1");
    request.mutable_worker()->set_num_devices(2);
    request.mutable_worker()->set_device_kind("cpu");
    v1::RegisterWorkerResponse response;
    ASSERT_TRUE(
        stub_->RegisterWorker(Context().get(), request, &response).ok());
  }
  v1::Job WaitForState(const std::string& id, v1::JobState state) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    v1::GetJobResponse response;
    while (absl::Now() < deadline) {
      v1::GetJobRequest request;
      request.set_id(id);
      grpc::Status status = stub_->GetJob(Context().get(), request, &response);
      if (status.ok() && response.job().state() == state) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return response.job();
  }
  std::string Scrape() { return RenderMetrics(*server_->metrics().collectable()); }

  std::string db_;
  FakeWorkerClient* client_ = nullptr;
  std::unique_ptr<ControllerServer> server_;
  std::unique_ptr<v1::Controller::Stub> stub_;
};

TEST(ControllerServerMetricsPortTest, ServesMetricsOnItsOwnPortOrFails) {
  SetLogQuiet(true);
  ControllerConfig config;
  config.listen = "127.0.0.1:0";
  config.db_path = ":memory:";
  config.metrics_listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<ControllerServer>> server =
      ControllerServer::Start(config, std::make_unique<FakeWorkerClient>());
  ASSERT_TRUE(server.ok()) << server.status();
  const int metrics_port = (*server)->metrics_port();
  EXPECT_GT(metrics_port, 0);
  EXPECT_NE(metrics_port, (*server)->port());
  // Without metrics_listen nothing is served.
  config.metrics_listen.clear();
  absl::StatusOr<std::unique_ptr<ControllerServer>> quiet =
      ControllerServer::Start(config, std::make_unique<FakeWorkerClient>());
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  EXPECT_EQ((*quiet)->metrics_port(), 0);
  // A taken port is an error naming the flag.
  config.metrics_listen = "127.0.0.1:" + std::to_string(metrics_port);
  absl::StatusOr<std::unique_ptr<ControllerServer>> clash =
      ControllerServer::Start(config, std::make_unique<FakeWorkerClient>());
  ASSERT_FALSE(clash.ok());
  EXPECT_THAT(clash.status().message(), HasSubstr("--metrics-port"));
}

TEST_F(ControllerServerMetricsTest, CountsRpcsJobsWorkersAndDevices) {
  Register("alpha");
  Register("beta");
  std::string text = Scrape();
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_workers{state="ready"})"),
              Optional(2.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_devices{state="free"})"),
              Optional(4.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_rpcs_total{)"
                           R"(method="RegisterWorker",code="OK"})"),
              Optional(2.0));

  // A job that succeeds.
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = SmallJob();
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(stub_->SubmitJob(Context().get(), submit, &submitted).ok());
  v1::Job done = WaitForState(submitted.job().id(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.message();

  // A job held by a blocking worker: devices and workers turn busy.
  client_->SetDefaultMode(FakeWorkerClient::Mode::kBlock);
  v1::SubmitJobResponse blocked;
  ASSERT_TRUE(stub_->SubmitJob(Context().get(), submit, &blocked).ok());
  ASSERT_TRUE(client_->WaitForBlocked(2, absl::Seconds(10)));
  text = Scrape();
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_devices{state="busy"})"),
              Optional(4.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_devices{state="free"})"),
              Optional(0.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_workers{state="busy"})"),
              Optional(2.0));
  EXPECT_THAT(
      FindSample(text,
             R"(meshcast_controller_jobs{type="reshard",state="running"})"),
      Optional(1.0));
  // A third job waits for the devices.
  v1::SubmitJobResponse queued;
  ASSERT_TRUE(stub_->SubmitJob(Context().get(), submit, &queued).ok());
  ASSERT_EQ(WaitForState(queued.job().id(), v1::JOB_STATE_QUEUED).state(),
            v1::JOB_STATE_QUEUED);
  text = Scrape();
  EXPECT_THAT(FindSample(text, "meshcast_controller_queue_depth"), Optional(1.0));
  // Cancel both.
  for (const std::string& id : {queued.job().id(), blocked.job().id()}) {
    v1::CancelJobRequest cancel;
    cancel.set_id(id);
    v1::CancelJobResponse cancelled;
    ASSERT_TRUE(stub_->CancelJob(Context().get(), cancel, &cancelled).ok());
    EXPECT_EQ(WaitForState(id, v1::JOB_STATE_CANCELLED).state(),
              v1::JOB_STATE_CANCELLED);
  }

  // Errors are counted with their code.
  v1::SubmitJobRequest bad = submit;
  bad.mutable_spec()->mutable_reshard()->mutable_src_spec()->set_text("Q");
  EXPECT_EQ(stub_->SubmitJob(Context().get(), bad, &submitted).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::GetJobRequest unknown;
  unknown.set_id("job-999999");
  v1::GetJobResponse got;
  EXPECT_EQ(stub_->GetJob(Context().get(), unknown, &got).error_code(),
            grpc::StatusCode::NOT_FOUND);

  text = Scrape();
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_rpcs_total{)"
                           R"(method="SubmitJob",code="OK"})"),
              Optional(3.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_rpcs_total{)"
                           R"(method="SubmitJob",code="INVALID_ARGUMENT"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_rpcs_total{)"
                           R"(method="GetJob",code="NOT_FOUND"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_rpcs_total{)"
                           R"(method="CancelJob",code="OK"})"),
              Optional(2.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_jobs_finished_total{)"
                           R"(type="reshard",state="succeeded"})"),
              Optional(1.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_jobs_finished_total{)"
                           R"(type="reshard",state="cancelled"})"),
              Optional(2.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_jobs_finished_total{)"
                           R"(type="reshard",state="failed"})"),
              Optional(0.0));
  EXPECT_THAT(
      FindSample(text,
             R"(meshcast_controller_jobs{type="reshard",state="cancelled"})"),
      Optional(2.0));
  EXPECT_THAT(
      FindSample(text,
             R"(meshcast_controller_jobs{type="reshard",state="succeeded"})"),
      Optional(1.0));
  EXPECT_THAT(FindSample(text, "meshcast_controller_queue_depth"), Optional(0.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_devices{state="free"})"),
              Optional(4.0));
  // Two jobs were planned (the queued one never was).
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_planning_seconds_count{)"
                           R"(type="reshard"})"),
              Optional(2.0));
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_job_duration_seconds_count{)"
                           R"(type="reshard",state="cancelled"})"),
              Optional(2.0));
  // Only the succeeded job has a measured/predicted ratio.
  EXPECT_THAT(FindSample(text, R"(meshcast_controller_measured_over_predicted_)"
                           R"(ratio_count{type="reshard"})"),
              Optional(1.0));
  // No label carries a job id.
  EXPECT_THAT(text, Not(HasSubstr("job-")));
}

}  // namespace
}  // namespace meshcast
