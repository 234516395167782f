// Task: one job's run on this worker, from program to result: parse the
// program, get the job's communicator (only when world_size > 1): a cached
// one the job's ranks agree on, or a new one bootstrapped through the
// rendezvous store (keys "job/<job_id>/gloo/"), execute, then hand it back
// to the cache (dropped there if the job failed or was aborted) or close it
// (on TaskOptions::closer's thread where one is given).
// Abort works in every phase (rendezvous, fill, steps, verification) and
// ends the run promptly (executor.h). On CPU devices a program that cannot
// fit in the host's available memory fails RESOURCE_EXHAUSTED before the
// rendezvous (Executor::CheckMemory).
// With TaskOptions::device_backend set (GPU workers, docs/gpu.md) the job
// runs on that backend instead of the CPU executor and Gloo.
//
// progress() names the phase exactly (TaskProgress.phase): "setup" from the
// start of Run (parse, memory check), "connect" while the job's
// communicator is bootstrapped or agreed with the peers, then the
// executor's: "setup" (tiles allocated and filled), "connect" (start
// barrier), "data" (steps), "verify" (with verify_done / verify_total). A
// device job's phase is the one its DeviceJob::progress() says; empty if it
// says none.
//
//   Task task(request.program(), &kv, options);
//   absl::StatusOr<v1::JobResult> result = task.Run();   // blocks
//   task.Abort("cancelled by the controller");           // any thread
//
// Thread safety: Run once, from one thread; Abort from any thread.
#ifndef MESHCAST_WORKER_TASK_H_
#define MESHCAST_WORKER_TASK_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "meshcast/v1/job.pb.h"
#include "meshcast/v1/plan.pb.h"
#include "meshcast/v1/worker.pb.h"
#include "worker/cancellation.h"
#include "worker/communicator_cache.h"
#include "worker/deferred_closer.h"
#include "worker/device_backend.h"
#include "worker/executor.h"
#include "worker/gloo_communicator.h"
#include "worker/kv_store.h"

namespace meshcast::worker {

struct TaskOptions {
  ExecutorOptions executor;
  GlooOptions gloo;
  // Null: virtual CPU devices (Executor + Gloo). Otherwise every job runs as
  // a DeviceJob of this backend (e.g. GPUs with NCCL).
  std::shared_ptr<DeviceBackend> device_backend;
  // Where the job's communicator is closed once the result is in: off the
  // reporting path (Gloo takes 10-20 ms to close). Null: closed inline.
  std::shared_ptr<DeferredCloser> closer;
  // Non-null: communicators come from (and go back to) this cache, agreed
  // with the peers under "job/<job_id>/comm/" (communicator_cache.h), for
  // programs that name their ranks' workers. Every worker of a cluster must
  // use a cache or none alike.
  std::shared_ptr<CommunicatorCache> communicators;
};

class Task {
 public:
  // `kv` must outlive the task; it may be null if no job spans workers.
  Task(v1::WorkerProgram program, KvStore* kv, TaskOptions options);

  absl::StatusOr<v1::JobResult> Run();
  void Abort(absl::string_view reason);

  const std::string& job_id() const { return program_.job_id(); }
  // Valid after Run returned a result.
  ExecutorTimings timings() const;
  // How far the program is; any thread, any time (GetStatus): steps and
  // bytes, the phase and verification's counters (see the header).
  v1::TaskProgress progress() const;
  // How the job got its communicator, for the log: "none" (one worker),
  // "new" or "reused", and how long that took. Valid after Run.
  struct ConnectInfo {
    std::string how = "none";
    double seconds = 0;
  };
  ConnectInfo connect_info() const;

 private:
  absl::StatusOr<v1::JobResult> RunOnDevices(const ParsedProgram& program);

  const v1::WorkerProgram program_;
  KvStore* const kv_;
  const TaskOptions options_;
  Cancellation cancellation_;
  Executor executor_;
  mutable absl::Mutex mu_;
  Communicator* comm_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::unique_ptr<DeviceJob> device_job_ ABSL_GUARDED_BY(mu_);
  ConnectInfo connect_info_ ABSL_GUARDED_BY(mu_);
  // Totals of the parsed program (0 before Run has parsed it).
  std::atomic<int> steps_total_{0};
  std::atomic<int64_t> bytes_total_{0};
  // The task's own phase (set-up, connecting); the executor's, once it
  // reports one, takes over in progress().
  std::atomic<JobPhase> phase_{JobPhase::kUnknown};
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_TASK_H_
