#include "worker/testing/fake_controller.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/server_builder.h"

namespace meshcast::worker::testing {

absl::Status FakeController::Start(int port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                           grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("fake controller could not bind 127.0.0.1:", port));
  }
  address_ = absl::StrCat("127.0.0.1:", port_);
  return absl::OkStatus();
}

void FakeController::Stop() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(500));
    server_->Wait();
    server_.reset();
  }
}

void FakeController::Forget() {
  absl::MutexLock lock(&mu_);
  workers_.clear();
}

int FakeController::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

int FakeController::heartbeats() const {
  absl::MutexLock lock(&mu_);
  return heartbeats_;
}

v1::WorkerInfo FakeController::worker(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(name);
  return it == workers_.end() ? v1::WorkerInfo() : it->second;
}

void FakeController::set_heartbeat_seconds(double seconds) {
  absl::MutexLock lock(&mu_);
  heartbeat_seconds_ = seconds;
}

grpc::Status FakeController::RegisterWorker(
    grpc::ServerContext*, const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  absl::MutexLock lock(&mu_);
  workers_[request->worker().name()] = request->worker();
  ++registrations_;
  response->set_host_index(static_cast<int>(workers_.size()) - 1);
  response->set_heartbeat_seconds(heartbeat_seconds_);
  response->set_lease_seconds(10 * heartbeat_seconds_);
  return grpc::Status::OK;
}

grpc::Status FakeController::Heartbeat(grpc::ServerContext*,
                                       const v1::HeartbeatRequest* request,
                                       v1::HeartbeatResponse* response) {
  absl::MutexLock lock(&mu_);
  ++heartbeats_;
  response->set_known(workers_.contains(request->name()));
  return grpc::Status::OK;
}

std::vector<v1::ReportProgressRequest> FakeController::progress_reports()
    const {
  absl::MutexLock lock(&mu_);
  return progress_reports_;
}

void FakeController::HoldProgressReports(bool hold) {
  absl::MutexLock lock(&mu_);
  hold_progress_ = hold;
}

void FakeController::set_progress_unimplemented(bool unimplemented) {
  absl::MutexLock lock(&mu_);
  progress_unimplemented_ = unimplemented;
}

grpc::Status FakeController::ReportProgress(
    grpc::ServerContext* context, const v1::ReportProgressRequest* request,
    v1::ReportProgressResponse*) {
  absl::MutexLock lock(&mu_);
  if (progress_unimplemented_) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "ReportProgress");
  }
  // Polled, so that a caller's cancellation ends the wait too.
  while (hold_progress_ && !context->IsCancelled()) {
    mu_.AwaitWithTimeout(absl::Condition(+[](bool* held) { return !*held; },
                                         &hold_progress_),
                         absl::Milliseconds(5));
  }
  if (context->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the caller");
  }
  progress_reports_.push_back(*request);
  return grpc::Status::OK;
}

std::vector<std::string> FakeController::kv_callers() const {
  absl::MutexLock lock(&mu_);
  return kv_callers_;
}

grpc::Status FakeController::KvSet(grpc::ServerContext*,
                                   const v1::KvSetRequest* request,
                                   v1::KvSetResponse*) {
  {
    absl::MutexLock lock(&mu_);
    kv_callers_.push_back(request->worker());
  }
  absl::Status status = kv_.Set(request->key(), request->value());
  return status.ok() ? grpc::Status::OK
                     : grpc::Status(grpc::StatusCode::INTERNAL,
                                    std::string(status.message()));
}

grpc::Status FakeController::KvGet(grpc::ServerContext*,
                                   const v1::KvGetRequest* request,
                                   v1::KvGetResponse* response) {
  {
    absl::MutexLock lock(&mu_);
    kv_callers_.push_back(request->worker());
  }
  absl::StatusOr<std::string> value =
      kv_.Get(request->key(), absl::Seconds(request->timeout_seconds()));
  if (!value.ok()) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        std::string(value.status().message()));
  }
  response->set_value(*std::move(value));
  return grpc::Status::OK;
}

}  // namespace meshcast::worker::testing
