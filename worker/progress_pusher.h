// ProgressPusher: pushes how far this worker's running tasks are to the
// controller (Controller.ReportProgress), so that the controller need not
// poll every worker of every running job with Worker.GetStatus.
//
// One thread per worker, whatever the number of jobs. Every
// sample_interval (50 ms) it reads the running tasks from its source (for
// the daemon, RunningTaskProgress(service): what GetStatus lists) and sends
// all of them in one report when at least one task runs and either
// push_interval (250 ms) has passed since the last report or a task's phase
// differs from the one last reported (a task not reported yet counts as a
// change). Nothing is sent while the worker is idle.
//
// Each task's phase is its TaskProgress.phase, passed through as the task
// set it (Task sets it exactly: task.h); only when it is empty (a device
// job that does not track its phase) PhaseOf infers one from the step
// counts ("setup" until the program is parsed, "data" while steps remain,
// "verify" once every step is done). verify_done / verify_total go
// through unchanged.
//
//   ProgressPusherOptions options;
//   options.name = "node-a";  // the name the worker registered with
//   ProgressPusher pusher(channel, [&] { return RunningTaskProgress(service);
//   },
//                         options);
//   pusher.Start();
//   ...
//   pusher.Stop();  // also in the destructor
//
// Contract: the pusher never blocks a job. The source is only read (it
// must be cheap and must not block: GetStatus copies a few counters); the
// RPC is asynchronous, and a report that falls due while the previous one
// is still in flight is dropped (the next one carries newer figures; a
// phase change stays due until a report carries it). Failed reports are
// logged once per outage. A controller that answers UNIMPLEMENTED (one
// older than ReportProgress) disables the pusher for good, logged once:
// that controller keeps polling. Stop cancels the report in flight and
// returns promptly (well within rpc_timeout).
//
// Thread safety: thread-safe. The source is called from the pusher's
// thread only.
#ifndef MESHCAST_WORKER_PROGRESS_PUSHER_H_
#define MESHCAST_WORKER_PROGRESS_PUSHER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "meshcast/v1/controller.grpc.pb.h"
#include "meshcast/v1/worker.pb.h"

namespace meshcast::worker {

class WorkerService;

// The running tasks' progress, one entry per task.
using ProgressSource = std::function<std::vector<v1::TaskProgress>()>;

// What the service's GetStatus lists (its `tasks`), read in process.
std::vector<v1::TaskProgress> RunningTaskProgress(WorkerService& service);

// `task.phase()` if set, else inferred from the step counts: "setup" before
// the program is parsed (steps_total 0), "verify" once every step is done,
// "data" otherwise.
std::string PhaseOf(const v1::TaskProgress& task);

struct ProgressPusherOptions {
  std::string name;  // ReportProgressRequest.worker
  // How often a report goes out while tasks run (phase changes go at once).
  absl::Duration push_interval = absl::Milliseconds(250);
  // How often the source is read, which bounds how late a phase change is
  // reported.
  absl::Duration sample_interval = absl::Milliseconds(50);
  // Deadline of each ReportProgress call.
  absl::Duration rpc_timeout = absl::Seconds(2);
};

class ProgressPusher {
 public:
  ProgressPusher(std::shared_ptr<grpc::Channel> controller,
                 ProgressSource source, ProgressPusherOptions options);
  ~ProgressPusher();
  ProgressPusher(const ProgressPusher&) = delete;
  ProgressPusher& operator=(const ProgressPusher&) = delete;

  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops the thread and cancels the report in flight; no report starts
  // afterwards.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // For tests and logs.
  int reports_sent() const ABSL_LOCKS_EXCLUDED(mu_);     // calls started
  int reports_dropped() const ABSL_LOCKS_EXCLUDED(mu_);  // due while busy
  int reports_failed() const ABSL_LOCKS_EXCLUDED(mu_);   // answered not OK
  // True once the controller answered UNIMPLEMENTED.
  bool disabled() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Call;

  void Loop();
  // Starts a report of `tasks` unless one is in flight (false then).
  bool Send(std::vector<v1::TaskProgress> tasks) ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Called as the last part of an issued Call is destroyed.
  void CallReleased() ABSL_LOCKS_EXCLUDED(mu_);

  const std::unique_ptr<v1::Controller::Stub> stub_;
  const ProgressSource source_;
  const ProgressPusherOptions options_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool disabled_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<Call> in_flight_ ABSL_GUARDED_BY(mu_);
  // Issued calls that gRPC has not released yet (at most one, plus one
  // completing): Stop waits for 0.
  int live_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int sent_ ABSL_GUARDED_BY(mu_) = 0;
  int dropped_ ABSL_GUARDED_BY(mu_) = 0;
  int failed_ ABSL_GUARDED_BY(mu_) = 0;
  // Whether the last report failed, so that an outage is logged once.
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_PROGRESS_PUSHER_H_
