#include "cli/fake_controller.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace meshcast::cli {

FakeController::FakeController() {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port_);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
}

FakeController::~FakeController() {
  if (server_ != nullptr) server_->Shutdown();
}

std::string FakeController::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void FakeController::SetCluster(const v1::GetClusterResponse& cluster) {
  absl::MutexLock lock(&mu_);
  cluster_ = cluster;
}

void FakeController::AddJob(const v1::Job& job) {
  absl::MutexLock lock(&mu_);
  if (jobs_.count(job.id()) == 0) order_.push_back(job.id());
  jobs_[job.id()] = job;
}

void FakeController::SetWatchEvents(const std::string& id,
                                    const std::vector<v1::JobEvent>& events) {
  absl::MutexLock lock(&mu_);
  events_[id] = events;
}

void FakeController::SetSubmitError(grpc::Status status) {
  absl::MutexLock lock(&mu_);
  submit_error_ = std::move(status);
}

void FakeController::SetPlanResponse(const v1::PlanResponse& response) {
  absl::MutexLock lock(&mu_);
  plan_response_ = response;
}

std::vector<v1::JobSpec> FakeController::submitted() const {
  absl::MutexLock lock(&mu_);
  return submitted_;
}

std::vector<v1::ReshardSpec> FakeController::planned() const {
  absl::MutexLock lock(&mu_);
  return planned_;
}

std::vector<v1::PlanRequest> FakeController::plan_requests() const {
  absl::MutexLock lock(&mu_);
  return plan_requests_;
}

grpc::Status FakeController::SubmitJob(grpc::ServerContext*,
                                       const v1::SubmitJobRequest* request,
                                       v1::SubmitJobResponse* response) {
  absl::MutexLock lock(&mu_);
  submitted_.push_back(request->spec());
  if (!submit_error_.ok()) return submit_error_;
  v1::Job job;
  job.set_id(absl::StrCat("job-", submitted_.size()));
  *job.mutable_spec() = request->spec();
  job.set_state(v1::JOB_STATE_QUEUED);
  job.set_created_unix(1.7e9);
  order_.push_back(job.id());
  jobs_[job.id()] = job;
  *response->mutable_job() = job;
  return grpc::Status::OK;
}

void FakeController::SetGetJobError(grpc::Status status) {
  absl::MutexLock lock(&mu_);
  get_job_error_ = std::move(status);
}

grpc::Status FakeController::GetJob(grpc::ServerContext*,
                                    const v1::GetJobRequest* request,
                                    v1::GetJobResponse* response) {
  absl::MutexLock lock(&mu_);
  if (!get_job_error_.ok()) return get_job_error_;
  auto it = jobs_.find(request->id());
  if (it == jobs_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("job ", request->id(), " not found"));
  }
  *response->mutable_job() = it->second;
  return grpc::Status::OK;
}

grpc::Status FakeController::ListJobs(grpc::ServerContext* context,
                                      const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  absl::MutexLock lock(&mu_);
  if (!version_.empty()) {
    context->AddInitialMetadata("meshcast-version", version_);
  }
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    if (request->limit() > 0 && response->jobs_size() >= request->limit()) {
      break;
    }
    *response->add_jobs() = jobs_.at(*it);
  }
  return grpc::Status::OK;
}

grpc::Status FakeController::WatchJob(
    grpc::ServerContext*, const v1::WatchJobRequest* request,
    grpc::ServerWriter<v1::JobEvent>* writer) {
  std::vector<v1::JobEvent> events;
  {
    absl::MutexLock lock(&mu_);
    if (jobs_.count(request->id()) == 0) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("job ", request->id(), " not found"));
    }
    events = events_[request->id()];
  }
  // Like the real controller, the job's record reaches its last state
  // before the stream says so: a client that reads the final event and then
  // calls GetJob must see the same state.
  if (!events.empty()) {
    absl::MutexLock lock(&mu_);
    v1::Job& job = jobs_[request->id()];
    job.set_state(events.back().state());
    job.set_message(events.back().message());
    job.set_progress(events.back().progress());
  }
  for (const v1::JobEvent& event : events) writer->Write(event);
  return grpc::Status::OK;
}

grpc::Status FakeController::CancelJob(grpc::ServerContext*,
                                       const v1::CancelJobRequest* request,
                                       v1::CancelJobResponse* response) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request->id());
  if (it == jobs_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("job ", request->id(), " not found"));
  }
  v1::Job& job = it->second;
  if (job.state() == v1::JOB_STATE_SUCCEEDED ||
      job.state() == v1::JOB_STATE_FAILED ||
      job.state() == v1::JOB_STATE_CANCELLED) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("job ", job.id(), " already finished"));
  }
  job.set_state(v1::JOB_STATE_CANCELLED);
  job.set_message("cancelled by user");
  *response->mutable_job() = job;
  return grpc::Status::OK;
}

grpc::Status FakeController::Plan(grpc::ServerContext*,
                                  const v1::PlanRequest* request,
                                  v1::PlanResponse* response) {
  absl::MutexLock lock(&mu_);
  planned_.push_back(request->reshard());
  plan_requests_.push_back(*request);
  *response = plan_response_;
  return grpc::Status::OK;
}

void FakeController::SetClusterAdminOnly(bool admin_only) {
  absl::MutexLock lock(&mu_);
  cluster_admin_only_ = admin_only;
}

void FakeController::SetVersion(const std::string& version) {
  absl::MutexLock lock(&mu_);
  version_ = version;
}

grpc::Status FakeController::GetCluster(grpc::ServerContext* context,
                                        const v1::GetClusterRequest*,
                                        v1::GetClusterResponse* response) {
  absl::MutexLock lock(&mu_);
  if (cluster_admin_only_) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "GetCluster needs the admin role");
  }
  if (!version_.empty()) {
    context->AddInitialMetadata("meshcast-version", version_);
  }
  *response = cluster_;
  return grpc::Status::OK;
}

}  // namespace meshcast::cli
