// WorkerService: the gRPC Worker service (proto/meshcast/v1/worker.proto),
// a thin layer over Task.
//
// - RunTask runs the program and blocks until it finished. Failures are
//   answered with ok=false and `error` (gRPC status OK), so the controller
//   reads one shape of reply. A run that verified with mismatches is also
//   ok=false (error names the first mismatch) but carries the full result.
//   If the controller cancels the call, the task is aborted.
// - AbortTask aborts a running job (found=false if none by that id). An
//   abort for a job that is not running here is remembered (the last
//   kRememberedAborts ids), so a RunTask for it that arrives later — the
//   controller aborts every worker of a failed job, some before their
//   program reached them — is refused at once instead of waiting in the
//   rendezvous for peers that are gone.
// - GetStatus: name, devices, running jobs.
// - RegisterBuffer, UnregisterBuffer, ListBuffers: user buffers
//   (user_buffers.h), only for callers on the worker's local Unix socket
//   (a peer "unix:..."); PERMISSION_DENIED over TCP, so no remote caller
//   can make the worker map a file. Programs that name user buffers run
//   on CPU devices only (FAILED_PRECONDITION with a device backend).
// Communicators are kept across jobs on the same workers unless
// WorkerServiceOptions::cache_communicators is false.
// Each task's start and end are logged to stderr; with
// WorkerServiceOptions::metrics set, every program's outcome is counted and
// the executor reports its steps there (worker_metrics.h).
//
//   WorkerService service(options, &kv);
//   builder.RegisterService(&service);
//
// Thread safety: thread-safe (gRPC calls it from many threads).
#ifndef MESHCAST_WORKER_WORKER_SERVICE_H_
#define MESHCAST_WORKER_WORKER_SERVICE_H_

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "meshcast/v1/worker.grpc.pb.h"
#include "worker/kv_store.h"
#include "worker/task.h"
#include "worker/user_buffers.h"
#include "worker/worker_metrics.h"

namespace meshcast::worker {

struct WorkerServiceOptions {
  std::string name;
  // Under TLS: the CN of the controller's certificate; RunTask, AbortTask
  // and GetStatus from any other peer are PERMISSION_DENIED
  // (security/call_guard.h). Empty: no check (--insecure, tests).
  std::string controller_identity;
  int num_devices = 0;
  TaskOptions task;
  // Optional; must outlive the service. Also handed to every task's
  // executor (task.executor.metrics).
  WorkerMetrics* metrics = nullptr;
  // Keep communicators across jobs (communicator_cache.h): when
  // task.communicators is null and the tasks run on CPU devices, the
  // service makes a cache with `communicator_cache` (closing on
  // task.closer). Every worker of a cluster must do alike.
  bool cache_communicators = true;
  CommunicatorCacheOptions communicator_cache;
  // Where RegisterBuffer keeps user buffers; null: the service makes its
  // own. Handed to every task's executor with num_devices.
  std::shared_ptr<UserBuffers> user_buffers;
};

class WorkerService final : public v1::Worker::Service {
 public:
  // `kv` (the controller's rendezvous store) must outlive the service.
  WorkerService(WorkerServiceOptions options, KvStore* kv);

  grpc::Status RunTask(grpc::ServerContext* context,
                       const v1::RunTaskRequest* request,
                       v1::RunTaskResponse* response) override;
  grpc::Status AbortTask(grpc::ServerContext* context,
                         const v1::AbortTaskRequest* request,
                         v1::AbortTaskResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext* context,
                         const v1::GetStatusRequest* request,
                         v1::GetStatusResponse* response) override;
  grpc::Status RegisterBuffer(grpc::ServerContext* context,
                              const v1::RegisterBufferRequest* request,
                              v1::RegisterBufferResponse* response) override;
  grpc::Status UnregisterBuffer(grpc::ServerContext* context,
                                const v1::UnregisterBufferRequest* request,
                                v1::UnregisterBufferResponse* response) override;
  grpc::Status ListBuffers(grpc::ServerContext* context,
                           const v1::ListBuffersRequest* request,
                           v1::ListBuffersResponse* response) override;

  // Aborts every running task (daemon shutdown); new tasks are refused.
  void Shutdown(absl::string_view reason);

  std::vector<std::string> RunningJobs() const;

 private:
  // PERMISSION_DENIED unless the peer is the controller (when
  // options_.controller_identity is set).
  grpc::Status CheckCaller(const grpc::ServerContext* context,
                           absl::string_view method) const;
  // PERMISSION_DENIED unless the peer came in over a Unix socket (in-process
  // callers pass a null context and are local too).
  static grpc::Status CheckLocalCaller(const grpc::ServerContext* context,
                                       absl::string_view method);
  // The tasks running now, by job id.
  std::vector<std::shared_ptr<Task>> RunningTasks() const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the task on its own thread while watching `context` for
  // cancellation; returns its result.
  absl::StatusOr<v1::JobResult> RunWatched(grpc::ServerContext* context,
                                           Task& task);
  // Counts a program's outcome in the metrics (if any). Steps of a device
  // backend that does not report live (DeviceBackend::ReportsMetrics) are
  // recorded from `result`.
  void CountTask(const v1::WorkerProgram& program,
                 const absl::StatusOr<v1::JobResult>& result);

  const WorkerServiceOptions options_;
  KvStore* const kv_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Task>> running_
      ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::string shutdown_reason_ ABSL_GUARDED_BY(mu_);
  // Jobs aborted before their RunTask arrived: id -> reason, and the ids
  // oldest first so the memory stays bounded.
  absl::flat_hash_map<std::string, std::string> aborted_early_
      ABSL_GUARDED_BY(mu_);
  std::deque<std::string> aborted_early_order_ ABSL_GUARDED_BY(mu_);

 public:
  static constexpr size_t kRememberedAborts = 1024;
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_WORKER_SERVICE_H_
