#include "controller/controller_service.h"

#include <algorithm>
#include <cmath>

#include "absl/time/clock.h"
#include "controller/clock.h"
#include "controller/grpc_worker_client.h"
#include "planner/ir/spec_convert.h"

namespace meshcast {
namespace {

bool IsFinal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

v1::JobEvent EventOf(const v1::Job& job) {
  v1::JobEvent event;
  event.set_job_id(job.id());
  event.set_state(job.state());
  event.set_message(job.message());
  event.set_progress(job.progress());
  const double t =
      std::max({job.created_unix(), job.started_unix(), job.finished_unix()});
  event.set_time_unix(t);
  return event;
}

}  // namespace

ControllerService::ControllerService(WorkerRegistry* registry, JobManager* jobs,
                                     KvStore* kv)
    : registry_(registry), jobs_(jobs), kv_(kv) {}

grpc::Status ControllerService::RegisterWorker(
    grpc::ServerContext*, const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  const v1::WorkerInfo& info = request->worker();
  WorkerRecord record;
  record.name = info.name();
  record.address = info.address();
  record.data_address = info.data_address();
  record.device_kind = info.device_kind();
  record.num_devices = info.num_devices();
  record.memory_bytes = info.memory_bytes();
  record.incarnation = info.incarnation();
  absl::StatusOr<WorkerRecord> stored = registry_->Register(record);
  if (!stored.ok()) return ToGrpcStatus(stored.status());
  response->set_host_index(stored->host_index);
  response->set_lease_seconds(
      absl::ToDoubleSeconds(registry_->options().lease));
  response->set_heartbeat_seconds(
      absl::ToDoubleSeconds(registry_->options().heartbeat));
  return grpc::Status::OK;
}

grpc::Status ControllerService::Heartbeat(grpc::ServerContext*,
                                          const v1::HeartbeatRequest* request,
                                          v1::HeartbeatResponse* response) {
  response->set_known(registry_->Heartbeat(request->name()));
  return grpc::Status::OK;
}

grpc::Status ControllerService::SubmitJob(grpc::ServerContext*,
                                          const v1::SubmitJobRequest* request,
                                          v1::SubmitJobResponse* response) {
  if (!request->has_spec()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "spec is required");
  }
  absl::StatusOr<v1::Job> job = jobs_->Submit(request->spec());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response->mutable_job() = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status ControllerService::GetJob(grpc::ServerContext*,
                                       const v1::GetJobRequest* request,
                                       v1::GetJobResponse* response) {
  absl::StatusOr<v1::Job> job = jobs_->Get(request->id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response->mutable_job() = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status ControllerService::ListJobs(grpc::ServerContext*,
                                         const v1::ListJobsRequest* request,
                                         v1::ListJobsResponse* response) {
  absl::StatusOr<std::vector<v1::Job>> jobs = jobs_->List(request->limit());
  if (!jobs.ok()) return ToGrpcStatus(jobs.status());
  for (v1::Job& job : *jobs) *response->add_jobs() = std::move(job);
  return grpc::Status::OK;
}

grpc::Status ControllerService::WatchJob(
    grpc::ServerContext* context, const v1::WatchJobRequest* request,
    grpc::ServerWriter<v1::JobEvent>* writer) {
  absl::StatusOr<JobManager::Watch> watch = jobs_->WatchJob(request->id());
  if (!watch.ok()) return ToGrpcStatus(watch.status());
  if (!writer->Write(EventOf(watch->job))) return grpc::Status::OK;
  if (IsFinal(watch->job.state())) return grpc::Status::OK;
  while (true) {
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
    }
    if (shutting_down_ || watch->events->closed()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "controller is shutting down");
    }
    // Short waits so that a client that went away is noticed.
    std::optional<v1::JobEvent> event =
        watch->events->Next(absl::Milliseconds(250));
    if (!event.has_value()) continue;
    if (!writer->Write(*event)) return grpc::Status::OK;
    if (IsFinal(event->state())) return grpc::Status::OK;
  }
}

grpc::Status ControllerService::CancelJob(grpc::ServerContext*,
                                          const v1::CancelJobRequest* request,
                                          v1::CancelJobResponse* response) {
  absl::StatusOr<v1::Job> job = jobs_->Cancel(request->id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response->mutable_job() = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status ControllerService::Plan(grpc::ServerContext*,
                                     const v1::PlanRequest* request,
                                     v1::PlanResponse* response) {
  v1::JobSpec spec;
  if (request->has_spec()) {
    spec = request->spec();
  } else if (request->has_reshard()) {
    // The older form: a reshard spec alone.
    *spec.mutable_reshard() = request->reshard();
  } else {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "spec is required (a JobSpec of any kind; the older "
                        "reshard field is still accepted)");
  }
  absl::StatusOr<DryRunResult> result = jobs_->DryRun(spec);
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response->mutable_plan() = std::move(result->plan);
  for (const PlanAlternative& alternative : result->alternatives) {
    v1::StrategyRow* out = response->add_rows();
    out->set_strategy(alternative.name);
    out->set_predicted_seconds(alternative.predicted_seconds);
    out->set_lower_bound_seconds(alternative.lower_bound_seconds);
    out->set_transfers(alternative.steps);
    out->set_bytes(alternative.bytes);
    out->set_chosen(alternative.chosen);
  }
  *response->mutable_topology() = TopologyToProto(result->topology);
  for (const DeviceMesh& mesh : result->placed_meshes) {
    *response->add_placed_meshes() = MeshToProto(mesh);
  }
  // The fields older clients read for a reshard plan.
  if (result->kind == "reshard" && result->placed_meshes.size() == 2) {
    *response->mutable_placed_src_mesh() =
        MeshToProto(result->placed_meshes[0]);
    *response->mutable_placed_dst_mesh() =
        MeshToProto(result->placed_meshes[1]);
  }
  return grpc::Status::OK;
}

grpc::Status ControllerService::GetCluster(grpc::ServerContext*,
                                           const v1::GetClusterRequest*,
                                           v1::GetClusterResponse* response) {
  *response->mutable_topology() = TopologyToProto(registry_->topology());
  const std::vector<int> busy = jobs_->BusyHosts();
  for (const WorkerRecord& w : registry_->Workers()) {
    v1::WorkerInfo* info = response->add_workers();
    info->set_name(w.name);
    info->set_address(w.address);
    info->set_data_address(w.data_address);
    info->set_device_kind(w.device_kind);
    info->set_num_devices(w.num_devices);
    info->set_memory_bytes(w.memory_bytes);
    info->set_host_index(w.host_index);
    info->set_last_heartbeat_unix(UnixSecondsOf(w.last_heartbeat));
    if (w.lost) {
      info->set_state(v1::WorkerInfo::STATE_LOST);
    } else if (std::binary_search(busy.begin(), busy.end(), w.host_index)) {
      info->set_state(v1::WorkerInfo::STATE_BUSY);
    } else {
      info->set_state(v1::WorkerInfo::STATE_READY);
    }
  }
  return grpc::Status::OK;
}

grpc::Status ControllerService::KvSet(grpc::ServerContext*,
                                      const v1::KvSetRequest* request,
                                      v1::KvSetResponse*) {
  return ToGrpcStatus(kv_->Set(request->key(), request->value()));
}

grpc::Status ControllerService::KvGet(grpc::ServerContext* context,
                                      const v1::KvGetRequest* request,
                                      v1::KvGetResponse* response) {
  // NaN, negative and huge timeouts are clamped; the client's own deadline
  // bounds the wait too.
  double seconds = request->timeout_seconds();
  if (!(seconds > 0)) seconds = 0;
  seconds = std::min(seconds, kMaxKvWaitSeconds);
  absl::Duration timeout = absl::Seconds(seconds);
  const absl::Time client_deadline = absl::FromChrono(context->deadline());
  timeout = std::min(
      timeout, std::max(absl::ZeroDuration(), client_deadline - absl::Now()));
  absl::StatusOr<std::string> value = kv_->Get(request->key(), timeout);
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(*std::move(value));
  return grpc::Status::OK;
}

grpc::Status ControllerService::ReportProgress(
    grpc::ServerContext*, const v1::ReportProgressRequest* request,
    v1::ReportProgressResponse*) {
  const std::vector<v1::TaskProgress> tasks(request->tasks().begin(),
                                            request->tasks().end());
  absl::StatusOr<int> counted = jobs_->ReportProgress(request->worker(), tasks);
  return counted.ok() ? grpc::Status::OK : ToGrpcStatus(counted.status());
}

}  // namespace meshcast
