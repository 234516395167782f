#include "controller/controller_service.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "controller/clock.h"
#include "planner/ir/spec_convert.h"
#include "planner/kinds/job_kind.h"
#include "security/authorizer.h"
#include "security/call_guard.h"
#include "util/grpc_status.h"

#ifndef MESHCAST_VERSION
#define MESHCAST_VERSION "unknown"
#endif

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

// Authentication and authorization of one call to Controller/`method`
// (security/call_guard.h).
grpc::Status AdmitCall(const security::Authenticator* authenticator,
                       const grpc::ServerContextBase& context,
                       absl::string_view method, security::Principal* caller) {
  return security::Admit(authenticator, context,
                         absl::StrCat("/meshcast.v1.Controller/", method),
                         caller);
}

// A worker speaks only for the worker named in its certificate (its CN):
// no registering, heartbeating, reporting or writing keys as another.
grpc::Status CheckWorkerName(const security::Principal& caller,
                             const std::string& name) {
  if (caller.kind != security::Principal::Kind::kWorker ||
      caller.name == name) {
    return grpc::Status::OK;
  }
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat("worker name \"", absl::CHexEscape(name.substr(0, 64)),
                   "\" is not the name in the caller's certificate (CN ",
                   caller.name, ")"));
}

// What an unknown job id gets, so that another user's job looks the same.
grpc::Status JobNotFound(const std::string& id) {
  return grpc::Status(
      grpc::StatusCode::NOT_FOUND,
      absl::StrCat("job ", absl::CHexEscape(id.substr(0, 64)), " not found"));
}

// The owner recorded in the spec, shown on the Job.
v1::Job WithOwner(v1::Job job) {
  job.set_owner(job.spec().owner());
  return job;
}

}  // namespace

ControllerService::ControllerService(WorkerRegistry* registry, JobManager* jobs,
                                     KvStore* kv)
    : registry_(registry), jobs_(jobs), kv_(kv), kv_service_(jobs, kv) {}

grpc::Status ControllerService::RegisterWorker(
    grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  security::Principal caller;
  if (grpc::Status s =
          AdmitCall(authenticator_, *context, "RegisterWorker", &caller);
      !s.ok()) {
    return s;
  }
  const v1::WorkerInfo& info = request->worker();
  if (grpc::Status s = CheckWorkerName(caller, info.name()); !s.ok()) return s;
  WorkerRecord record;
  record.name = info.name();
  record.address = info.address();
  record.data_address = info.data_address();
  record.device_kind = info.device_kind();
  record.num_devices = info.num_devices();
  record.memory_bytes = info.memory_bytes();
  record.incarnation = info.incarnation();
  record.probed_host_copy_bytes_per_second =
      info.probed_host_copy_bytes_per_second();
  record.probed_device_flops = info.probed_device_flops();
  record.machine_id = info.machine_id();
  record.cpu_cores = info.cpu_cores();
  absl::StatusOr<WorkerRecord> stored = registry_->Register(record);
  if (!stored.ok()) return ToGrpcStatus(stored.status());
  response->set_host_index(stored->host_index);
  response->set_lease_seconds(
      absl::ToDoubleSeconds(registry_->options().lease));
  response->set_heartbeat_seconds(
      absl::ToDoubleSeconds(registry_->options().heartbeat));
  return grpc::Status::OK;
}

grpc::Status ControllerService::Heartbeat(grpc::ServerContext* context,
                                          const v1::HeartbeatRequest* request,
                                          v1::HeartbeatResponse* response) {
  security::Principal caller;
  if (grpc::Status s = AdmitCall(authenticator_, *context, "Heartbeat", &caller);
      !s.ok()) {
    return s;
  }
  if (grpc::Status s = CheckWorkerName(caller, request->name()); !s.ok()) {
    return s;
  }
  response->set_known(registry_->Heartbeat(request->name()));
  return grpc::Status::OK;
}

grpc::Status ControllerService::SubmitJob(grpc::ServerContext* context,
                                          const v1::SubmitJobRequest* request,
                                          v1::SubmitJobResponse* response) {
  security::Principal caller;
  if (grpc::Status s = AdmitCall(authenticator_, *context, "SubmitJob", &caller);
      !s.ok()) {
    return s;
  }
  if (!request->has_spec()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "spec is required");
  }
  // The owner is the caller, whatever the request says.
  v1::JobSpec spec = request->spec();
  spec.set_owner(caller.name);
  absl::StatusOr<v1::Job> job = jobs_->Submit(spec);
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response->mutable_job() = WithOwner(*std::move(job));
  return grpc::Status::OK;
}

grpc::Status ControllerService::GetJob(grpc::ServerContext* context,
                                       const v1::GetJobRequest* request,
                                       v1::GetJobResponse* response) {
  security::Principal caller;
  if (grpc::Status s = AdmitCall(authenticator_, *context, "GetJob", &caller);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<v1::Job> job = jobs_->Get(request->id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  if (!security::CanAccessJob(caller, job->spec().owner())) {
    return JobNotFound(request->id());
  }
  *response->mutable_job() = WithOwner(*std::move(job));
  return grpc::Status::OK;
}

grpc::Status ControllerService::ListJobs(grpc::ServerContext* context,
                                         const v1::ListJobsRequest* request,
                                         v1::ListJobsResponse* response) {
  security::Principal caller;
  if (grpc::Status s = AdmitCall(authenticator_, *context, "ListJobs", &caller);
      !s.ok()) {
    return s;
  }
  // Every admitted caller may list (its own) jobs, so the version rides
  // here too for `meshctl version` with a user's token.
  context->AddInitialMetadata(kVersionMetadataKey, MESHCAST_VERSION);
  // A user's limit applies to its own jobs: list all, then filter.
  const bool everyone = security::CanAccessEveryJob(caller);
  absl::StatusOr<std::vector<v1::Job>> jobs =
      jobs_->List(everyone ? request->limit() : 0);
  if (!jobs.ok()) return ToGrpcStatus(jobs.status());
  for (v1::Job& job : *jobs) {
    if (!security::CanAccessJob(caller, job.spec().owner())) continue;
    if (request->limit() > 0 && response->jobs_size() >= request->limit()) {
      break;
    }
    *response->add_jobs() = WithOwner(std::move(job));
  }
  return grpc::Status::OK;
}

grpc::Status ControllerService::WatchJob(
    grpc::ServerContext* context, const v1::WatchJobRequest* request,
    grpc::ServerWriter<v1::JobEvent>* writer) {
  security::Principal caller;
  if (grpc::Status s = AdmitCall(authenticator_, *context, "WatchJob", &caller);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<JobManager::Watch> watch = jobs_->WatchJob(request->id());
  if (!watch.ok()) return ToGrpcStatus(watch.status());
  if (!security::CanAccessJob(caller, watch->job.spec().owner())) {
    return JobNotFound(request->id());
  }
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

grpc::Status ControllerService::CancelJob(grpc::ServerContext* context,
                                          const v1::CancelJobRequest* request,
                                          v1::CancelJobResponse* response) {
  security::Principal caller;
  if (grpc::Status s = AdmitCall(authenticator_, *context, "CancelJob", &caller);
      !s.ok()) {
    return s;
  }
  if (!security::CanAccessEveryJob(caller)) {
    // Only the owner may cancel: look first (the owner never changes).
    absl::StatusOr<v1::Job> existing = jobs_->Get(request->id());
    if (!existing.ok()) return ToGrpcStatus(existing.status());
    if (!security::CanAccessJob(caller, existing->spec().owner())) {
      return JobNotFound(request->id());
    }
  }
  absl::StatusOr<v1::Job> job = jobs_->Cancel(request->id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response->mutable_job() = WithOwner(*std::move(job));
  return grpc::Status::OK;
}

grpc::Status ControllerService::Plan(grpc::ServerContext* context,
                                     const v1::PlanRequest* request,
                                     v1::PlanResponse* response) {
  security::Principal caller;
  if (grpc::Status s = AdmitCall(authenticator_, *context, "Plan", &caller);
      !s.ok()) {
    return s;
  }
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
    *response->add_rows() = AlternativeToRow(alternative);
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

grpc::Status ControllerService::GetCluster(grpc::ServerContext* context,
                                           const v1::GetClusterRequest*,
                                           v1::GetClusterResponse* response) {
  security::Principal caller;
  if (grpc::Status s =
          AdmitCall(authenticator_, *context, "GetCluster", &caller);
      !s.ok()) {
    return s;
  }
  // The controller's version travels as initial metadata, so clients of any
  // age can read it without a field in the API (`meshctl version`).
  context->AddInitialMetadata(kVersionMetadataKey, MESHCAST_VERSION);
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
    info->set_probed_host_copy_bytes_per_second(
        w.probed_host_copy_bytes_per_second);
    info->set_probed_device_flops(w.probed_device_flops);
    info->set_machine_id(w.machine_id);
    info->set_cpu_cores(w.cpu_cores);
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

grpc::Status ControllerService::KvSet(grpc::ServerContext* context,
                                      const v1::KvSetRequest* request,
                                      v1::KvSetResponse*) {
  // Security hook: only workers, and only under their certificate's name,
  // so request->worker() below is verified whenever TLS is on.
  security::Principal caller;
  if (grpc::Status s = AdmitCall(authenticator_, *context, "KvSet", &caller);
      !s.ok()) {
    return s;
  }
  if (grpc::Status s = CheckWorkerName(caller, request->worker()); !s.ok()) {
    return s;
  }
  // The writer: the request's worker name, which CheckWorkerName above has
  // matched with the certificate's CN when TLS is on (kv_service.h checks
  // it is one of the job's workers).
  return ToGrpcStatus(
      kv_service_.Set(request->worker(), request->key(), request->value()));
}

grpc::ServerUnaryReactor* ControllerService::KvGet(
    grpc::CallbackServerContext* context, const v1::KvGetRequest* request,
    v1::KvGetResponse* response) {
  // Security hook, as for KvSet.
  security::Principal caller;
  grpc::Status admitted =
      AdmitCall(authenticator_, *context, "KvGet", &caller);
  if (admitted.ok()) admitted = CheckWorkerName(caller, request->worker());
  if (!admitted.ok()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(admitted);
    return reactor;
  }
  // The reader, verified as for KvSet.
  return kv_service_.Get(context, request->worker(), *request, response);
}

grpc::Status ControllerService::ReportProgress(
    grpc::ServerContext* context, const v1::ReportProgressRequest* request,
    v1::ReportProgressResponse*) {
  security::Principal caller;
  if (grpc::Status s =
          AdmitCall(authenticator_, *context, "ReportProgress", &caller);
      !s.ok()) {
    return s;
  }
  if (grpc::Status s = CheckWorkerName(caller, request->worker()); !s.ok()) {
    return s;
  }
  const std::vector<v1::TaskProgress> tasks(request->tasks().begin(),
                                            request->tasks().end());
  absl::StatusOr<int> counted = jobs_->ReportProgress(request->worker(), tasks);
  return counted.ok() ? grpc::Status::OK : ToGrpcStatus(counted.status());
}

}  // namespace meshcast
