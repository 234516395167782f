#include "worker/worker_service.h"

#include <algorithm>
#include <exception>
#include <new>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/server_context.h"
#include "security/call_guard.h"
#include "util/grpc_status.h"
#include "util/log.h"
#include "worker/host_memory.h"

namespace meshcast::worker {
namespace {

void Reject(WorkerMetrics* metrics, v1::RunTaskResponse* response,
            const std::string& job_id, const std::string& error) {
  if (metrics != nullptr) {
    metrics->TaskFinished(WorkerMetrics::TaskResult::kFailed, 0, 0);
  }
  JobLogWarning(job_id, "rejected: ", error);
  response->set_ok(false);
  response->set_error(error);
}

WorkerServiceOptions WithDefaults(WorkerServiceOptions options) {
  options.task.executor.metrics = options.metrics;
  if (options.user_buffers == nullptr) {
    options.user_buffers = std::make_shared<UserBuffers>();
  }
  options.task.executor.user_buffers = options.user_buffers;
  options.task.executor.devices_per_worker = options.num_devices;
  if (options.cache_communicators && options.task.communicators == nullptr &&
      options.task.device_backend == nullptr) {
    options.task.communicators = std::make_shared<CommunicatorCache>(
        options.communicator_cache, options.task.closer);
  }
  return options;
}

}  // namespace

WorkerService::WorkerService(WorkerServiceOptions options, KvStore* kv)
    : options_(WithDefaults(std::move(options))), kv_(kv) {}

grpc::Status WorkerService::CheckCaller(const grpc::ServerContext* context,
                                        absl::string_view method) const {
  // In-process callers (tests) pass no context and set no identity.
  if (options_.controller_identity.empty()) return grpc::Status::OK;
  if (context == nullptr) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "no caller");
  }
  return security::AdmitController(
      false, options_.controller_identity, *context,
      absl::StrCat("/meshcast.v1.Worker/", method));
}

grpc::Status WorkerService::CheckLocalCaller(
    const grpc::ServerContext* context, absl::string_view method) {
  if (context == nullptr || absl::StartsWith(context->peer(), "unix:")) {
    return grpc::Status::OK;
  }
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat(method, " is served only on the worker's local socket "
                           "(--local_socket), not to ", context->peer()));
}

grpc::Status WorkerService::RegisterBuffer(
    grpc::ServerContext* context, const v1::RegisterBufferRequest* request,
    v1::RegisterBufferResponse*) {
  if (grpc::Status s = CheckLocalCaller(context, "RegisterBuffer"); !s.ok()) {
    return s;
  }
  const v1::UserBuffer& buffer = request->buffer();
  if (buffer.device() >= options_.num_devices) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("buffer.device ", buffer.device(), ": this worker has ",
                     options_.num_devices, " devices (0 .. ",
                     options_.num_devices - 1, ")"));
  }
  UserBuffers::Info info;
  info.name = buffer.name();
  info.device = buffer.device();
  info.path = buffer.path();
  info.size_bytes = buffer.size_bytes();
  const absl::Status status = options_.user_buffers->Register(info);
  if (status.ok()) {
    LogInfo("user buffer '", info.name, "' of device ", info.device, ": ",
            info.size_bytes, " bytes of ", info.path);
  }
  return ToGrpcStatus(status);
}

grpc::Status WorkerService::UnregisterBuffer(
    grpc::ServerContext* context, const v1::UnregisterBufferRequest* request,
    v1::UnregisterBufferResponse*) {
  if (grpc::Status s = CheckLocalCaller(context, "UnregisterBuffer");
      !s.ok()) {
    return s;
  }
  return ToGrpcStatus(
      options_.user_buffers->Unregister(request->name(), request->device()));
}

grpc::Status WorkerService::ListBuffers(grpc::ServerContext* context,
                                        const v1::ListBuffersRequest*,
                                        v1::ListBuffersResponse* response) {
  if (grpc::Status s = CheckLocalCaller(context, "ListBuffers"); !s.ok()) {
    return s;
  }
  for (const UserBuffers::Info& info : options_.user_buffers->List()) {
    v1::UserBuffer* buffer = response->add_buffers();
    buffer->set_name(info.name);
    buffer->set_device(info.device);
    buffer->set_path(info.path);
    buffer->set_size_bytes(info.size_bytes);
    buffer->set_jobs_using(info.jobs_using);
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::RunTask(grpc::ServerContext* context,
                                    const v1::RunTaskRequest* request,
                                    v1::RunTaskResponse* response) {
  if (grpc::Status s = CheckCaller(context, "RunTask"); !s.ok()) return s;
  const v1::WorkerProgram& program = request->program();
  const std::string& job_id = program.job_id();
  if (job_id.empty()) {
    Reject(options_.metrics, response, job_id, "program.job_id is empty");
    return grpc::Status::OK;
  }
  if (program.local_devices_size() > options_.num_devices) {
    Reject(
        options_.metrics, response, job_id,
        absl::StrCat("program.local_devices has ", program.local_devices_size(),
                     " devices but this worker drives ", options_.num_devices));
    return grpc::Status::OK;
  }
  if (options_.task.device_backend != nullptr &&
      std::any_of(program.plan().buffers().begin(),
                  program.plan().buffers().end(),
                  [](const v1::Buffer& b) { return !b.user_buffer().empty(); })) {
    Reject(options_.metrics, response, job_id,
           "the plan names user buffers, which this worker takes on CPU "
           "devices only (not on its GPUs)");
    return grpc::Status::OK;
  }
  auto task = std::make_shared<Task>(program, kv_, options_.task);
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      Reject(options_.metrics, response, job_id,
             absl::StrCat("worker is shutting down: ", shutdown_reason_));
      return grpc::Status::OK;
    }
    if (auto early = aborted_early_.find(job_id);
        early != aborted_early_.end()) {
      Reject(options_.metrics, response, job_id,
             absl::StrCat("job ", job_id,
                          " was aborted before its program arrived here: ",
                          early->second));
      return grpc::Status::OK;
    }
    if (!running_.emplace(job_id, task).second) {
      Reject(options_.metrics, response, job_id,
             absl::StrCat("job ", job_id, " is already running here"));
      return grpc::Status::OK;
    }
  }
  JobLogInfo(job_id, absl::StrFormat(
      "started (rank %d of %d, %d devices, %d buffers, %d steps)",
      program.rank(), std::max(1, program.world_size()),
      program.local_devices_size(), program.plan().buffers_size(),
      program.plan().steps_size()));

  absl::StatusOr<v1::JobResult> result = RunWatched(context, *task);
  {
    absl::MutexLock lock(&mu_);
    running_.erase(job_id);
  }
  CountTask(program, result);

  if (!result.ok()) {
    JobLogWarning(job_id, "failed: ", result.status().ToString());
    response->set_ok(false);
    response->set_error(result.status().ToString());
    return grpc::Status::OK;
  }
  const ExecutorTimings timings = task->timings();
  const Task::ConnectInfo connect = task->connect_info();
  *response->mutable_result() = *result;
  JobLogInfo(job_id, absl::StrFormat(
      "data plane %.3f s, %d bytes received, %d elements verified, "
      "%d mismatches (communicator %s %.3f s, set-up %.3f s, waiting for "
      "peers %.3f s, verify %.3f s, %d tile bytes)",
      result->seconds(), result->bytes_moved(),
      result->elements_verified(), result->mismatches(), connect.how,
      connect.seconds, timings.setup_seconds, timings.barrier_seconds,
      timings.verify_seconds, timings.tile_bytes));
  if (result->mismatches() > 0) {
    response->set_ok(false);
    response->set_error(
        absl::StrCat("verification failed: ", result->mismatches(),
                     " mismatching elements; first: ", timings.first_mismatch));
    JobLogWarning(job_id, response->error());
    return grpc::Status::OK;
  }
  response->set_ok(true);
  JobLogInfo(job_id, "succeeded");
  return grpc::Status::OK;
}

void WorkerService::CountTask(const v1::WorkerProgram& program,
                              const absl::StatusOr<v1::JobResult>& result) {
  WorkerMetrics* const metrics = options_.metrics;
  if (metrics == nullptr) return;
  if (!result.ok()) {
    metrics->TaskFinished(absl::IsCancelled(result.status())
                              ? WorkerMetrics::TaskResult::kAborted
                              : WorkerMetrics::TaskResult::kFailed,
                          0, 0);
    return;
  }
  if (options_.task.device_backend != nullptr &&
      !options_.task.device_backend->ReportsMetrics()) {
    // A backend that did not report its steps live: record them from the
    // result. Parsing succeeded once already (the task ran it).
    absl::StatusOr<ParsedProgram> parsed = ParseProgram(program);
    if (parsed.ok()) {
      absl::flat_hash_map<int, const StepDesc*> steps;
      for (const StepDesc& step : parsed->steps) steps[step.id] = &step;
      for (const v1::StepResult& step : result->steps()) {
        auto it = steps.find(step.step());
        if (it != steps.end()) {
          metrics->StepFinished(*parsed, *it->second, step.seconds());
        }
      }
    }
  }
  metrics->TaskFinished(result->mismatches() > 0
                            ? WorkerMetrics::TaskResult::kFailed
                            : WorkerMetrics::TaskResult::kOk,
                        result->elements_verified(), result->mismatches());
}

absl::StatusOr<v1::JobResult> WorkerService::RunWatched(
    grpc::ServerContext* context, Task& task) {
  absl::StatusOr<v1::JobResult> result;
  absl::Notification done;
  std::thread runner([&] {
    // An exception escaping this thread would end the daemon; fail the job.
    // The executor reports running out of memory itself; this catches an
    // allocation that fails anywhere else the same way.
    try {
      result = task.Run();
    } catch (const std::bad_alloc&) {
      const AvailableMemoryFn& injected =
          options_.task.executor.available_memory;
      const absl::StatusOr<int64_t> available =
          injected ? injected() : ReadMemAvailable();
      result = absl::ResourceExhaustedError(absl::StrCat(
          "worker ", options_.name, ": job ", task.job_id(),
          " ran out of host memory (std::bad_alloc), ",
          available.ok() ? FormatBytes(*available) : "unknown", " available"));
    } catch (const std::exception& e) {
      result = absl::InternalError(absl::StrCat("job ", task.job_id(),
                                                ": unexpected error: ",
                                                e.what()));
    }
    done.Notify();
  });
  bool aborted = false;
  while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    if (!aborted && context != nullptr && context->IsCancelled()) {
      aborted = true;
      JobLogWarning(task.job_id(),
                    "RunTask call cancelled by the caller; aborting");
      task.Abort("RunTask call cancelled by the controller");
    }
  }
  runner.join();
  return result;
}

grpc::Status WorkerService::AbortTask(grpc::ServerContext* context,
                                      const v1::AbortTaskRequest* request,
                                      v1::AbortTaskResponse* response) {
  if (grpc::Status s = CheckCaller(context, "AbortTask"); !s.ok()) return s;
  const std::string reason = request->reason().empty()
                                 ? "aborted by the controller"
                                 : request->reason();
  std::shared_ptr<Task> task;
  {
    absl::MutexLock lock(&mu_);
    auto it = running_.find(request->job_id());
    if (it != running_.end()) {
      task = it->second;
    } else if (!request->job_id().empty() &&
               aborted_early_.emplace(request->job_id(), reason).second) {
      aborted_early_order_.push_back(request->job_id());
      if (aborted_early_order_.size() > kRememberedAborts) {
        aborted_early_.erase(aborted_early_order_.front());
        aborted_early_order_.pop_front();
      }
    }
  }
  response->set_found(task != nullptr);
  if (task == nullptr) {
    JobLogInfo(request->job_id(),
               "abort requested but it is not running here");
    return grpc::Status::OK;
  }
  JobLogWarning(request->job_id(), "aborting: ", reason);
  task->Abort(reason);
  return grpc::Status::OK;
}

grpc::Status WorkerService::GetStatus(grpc::ServerContext* context,
                                      const v1::GetStatusRequest*,
                                      v1::GetStatusResponse* response) {
  if (grpc::Status s = CheckCaller(context, "GetStatus"); !s.ok()) return s;
  response->set_name(options_.name);
  response->set_num_devices(options_.num_devices);
  for (const std::shared_ptr<Task>& task : RunningTasks()) {
    response->add_running_jobs(task->job_id());
    *response->add_tasks() = task->progress();
  }
  return grpc::Status::OK;
}

void WorkerService::Shutdown(absl::string_view reason) {
  std::vector<std::shared_ptr<Task>> tasks;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    shutdown_reason_ = std::string(reason);
    for (const auto& [job, task] : running_) tasks.push_back(task);
  }
  for (const auto& task : tasks) {
    JobLogWarning(task->job_id(), "aborting: ", reason);
    task->Abort(reason);
  }
}

std::vector<std::shared_ptr<Task>> WorkerService::RunningTasks() const {
  std::vector<std::shared_ptr<Task>> tasks;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [job, task] : running_) tasks.push_back(task);
  }
  std::sort(tasks.begin(), tasks.end(),
            [](const std::shared_ptr<Task>& a, const std::shared_ptr<Task>& b) {
              return a->job_id() < b->job_id();
            });
  return tasks;
}

std::vector<std::string> WorkerService::RunningJobs() const {
  std::vector<std::string> jobs;
  for (const std::shared_ptr<Task>& task : RunningTasks()) {
    jobs.push_back(task->job_id());
  }
  return jobs;
}

}  // namespace meshcast::worker
