// JobManager: the job queue and state machine of the controller. It knows
// no job kind: each job's kind (planner/kinds/job_kind.h, found from the
// spec's oneof) validates it, names its meshes, plans it and summarizes its
// result.
//
//   QUEUED --(devices free, worker hosts live)--> PLANNING --> RUNNING
//     --> SUCCEEDED | FAILED | CANCELLED
//
// A job that leaves the queue records where its meshes went
// (Job.placed_meshes in the kind's order; a reshard job also fills
// placed_src_mesh / placed_dst_mesh; persisted with it).
//
// Submit validates a spec completely before accepting it: the kind's
// Validate, its meshes against the whole cluster (DeviceAllocator), a plan
// on the idle cluster's placement and the plan's buffers against the
// workers' memory (memory_check.h). Any failure is INVALID_ARGUMENT (an
// empty cluster FAILED_PRECONDITION) and nothing is queued. A scheduler
// thread starts queued jobs in submission order whenever the allocator can
// place them; later jobs on other devices may start before an earlier one
// that still waits, until that one has waited Options::reserve_after for
// busy devices: then it holds every later job back until it starts. Each
// started job gets a thread that plans it (reusing the plan made at Submit
// when the job landed on the same devices of the same topology), projects
// the Plan into per-worker programs (program_builder.h, JobSpec.verify
// copied into each), pushes them to all its workers at once through
// WorkerClient, and merges their results:
//   JobResult.seconds = max over workers; bytes_moved = sum of the plan's
//   step bytes; bytes_delivered = DeliveredBytes(plan); elements_verified /
//   mismatches = sums; max_abs_error = max; steps = all workers' (start,
//   end and device as the workers report them); metrics from the kind's
//   Summarize.
//   Each worker's report is first cross-checked against its program
//   (result_check.h: steps it does not own, byte counts or rates the plan
//   rules out, verification counts unlike its tiles'); a contradiction
//   fails the job with a message naming the worker.
//   SUCCEEDED only if every worker answered ok, mismatches == 0 and, with
//   verify FULL, the workers verified every element of every destination
//   buffer (DestinationElements(plan)).
// A worker that fails, a cancelled job, or a lost worker ("worker <name>
// lost") ends the job; the other workers of the job get AbortTask. When a
// job ends its devices are released and its rendezvous keys ("job/<id>/")
// deleted. Every change is persisted (JobStore, by a writer thread off the
// manager's lock; the plan once) and published to watchers (EventHub); a
// QUEUED job records each kind of waiting reason once (NoteQueuedLocked),
// so a job writes O(1) events per state change however long the queue.
// After a controller restart (Start): PLANNING and RUNNING jobs of the
// previous run are FAILED "controller restarted" and AbortTask goes to
// their recorded workers (at once, and again when each registers); QUEUED
// jobs are queued again in their order.
// While a job runs, how far each of its workers is (steps and bytes done,
// phase: setup, connect, data, verify) arrives pushed by the worker
// (ReportProgress) or, from a worker that never pushes, by polling it
// (Worker.GetStatus); either becomes RUNNING events (Options).
//
//   JobManager manager(options, &store, &registry, &kv, &client,
//                      Clock::Real());
//   RETURN_IF_ERROR(manager.Start());   // fails jobs left by a previous run
//   ASSIGN_OR_RETURN(v1::Job job, manager.Submit(spec));
//   ...
//   manager.Shutdown("controller shut down");
//
// Thread safety: every public method is thread-safe. Lock order: mu_ before
// the registry's, store's and hub's own locks; no network call is made while
// holding mu_.
#ifndef MESHCAST_CONTROLLER_JOB_MANAGER_H_
#define MESHCAST_CONTROLLER_JOB_MANAGER_H_

#include <deque>
#include <map>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "controller/clock.h"
#include "controller/controller_metrics.h"
#include "controller/event_hub.h"
#include "controller/job_store.h"
#include "controller/kv_store.h"
#include "controller/worker_client.h"
#include "controller/worker_registry.h"
#include "meshcast/v1/job.pb.h"
#include "meshcast/v1/plan.pb.h"
#include "meshcast/v1/worker.pb.h"
#include "planner/kinds/job_kind.h"
#include "planner/placement.h"

namespace meshcast {

// A dry-run plan on the live topology (the Plan RPC).
struct DryRunResult {
  std::string kind;  // the job kind's name ("reshard", "collective")
  v1::Plan plan;
  // Every alternative the kind compared (PlanOptions::compare_all).
  std::vector<PlanAlternative> alternatives;
  Topology topology;
  // Where the meshes would go on the idle cluster, in the kind's order.
  std::vector<DeviceMesh> placed_meshes;
};

class JobManager {
 public:
  struct Options {
    // Deadline of one Worker.RunTask call (the whole data-plane run).
    absl::Duration task_timeout = absl::Minutes(10);
    // Deadline of Worker.AbortTask (best effort).
    absl::Duration abort_timeout = absl::Seconds(2);
    // How often the scheduler re-checks the queue without being woken.
    absl::Duration schedule_interval = absl::Milliseconds(250);
    // Submit refuses new jobs beyond this many unfinished ones.
    int max_unfinished_jobs = 10000;
    // A queued job that has waited this long for busy devices reserves its
    // turn: no later job starts until it has, so a stream of small jobs
    // cannot starve a large one. Zero: jobs start strictly in submission
    // order; absl::InfiniteDuration(): later jobs may always overtake.
    // Jobs that wait for a lost worker's host never hold others back.
    absl::Duration reserve_after = absl::Seconds(10);
    // How far a running job is comes from its workers: pushed
    // (ReportProgress, about every 250 ms) or, from a worker that has never
    // pushed (an older worker), polled with Worker.GetStatus this often.
    // Zero: never polled. A worker that pushed is not polled again (until
    // it registers anew).
    absl::Duration progress_interval = absl::Seconds(1);
    // A report that moves the job forward or changes its phase becomes a
    // RUNNING event ("running: 40% of the data moved (12/40 worker steps
    // done), phase data"), weighted by the steps' bytes; at most one such
    // event per this interval (counted from the RUNNING transition), so
    // that a short job publishes none and a long one a few per second.
    absl::Duration progress_event_interval = absl::Milliseconds(250);
    // A worker's report is cross-checked against its program
    // (result_check.h); a step faster than this many times the topology's
    // fastest link is impossible and fails the job. 0: no rate check.
    double max_rate_factor = 10;
    // The kind of a spec. Empty: FindJobKind (every registered kind). Tests
    // substitute kinds that fail on demand.
    std::function<absl::StatusOr<const JobKind*>(const v1::JobSpec&)> find_kind;
  };

  // Every pointer must outlive the manager; `metrics` may be null.
  JobManager(Options options, JobStore* store, WorkerRegistry* registry,
             KvStore* kv, WorkerClient* client, Clock* clock,
             ControllerMetrics* metrics = nullptr);
  ~JobManager();
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Fails the started jobs a previous controller left unfinished
  // ("controller restarted", see job_store.h) and aborts them on their
  // workers, queues its QUEUED jobs again, subscribes to worker events and
  // starts the scheduler.
  absl::Status Start() ABSL_LOCKS_EXCLUDED(mu_);

  // Stops scheduling, fails queued and running jobs with `reason` (running
  // ones are aborted on their workers) and waits for job threads.
  void Shutdown(absl::string_view reason) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<v1::Job> Get(absl::string_view id) ABSL_LOCKS_EXCLUDED(mu_);
  // Newest first, without plans and per-step results.
  absl::StatusOr<std::vector<v1::Job>> List(int limit) ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels a queued job at once; a planning or running job is aborted on
  // its workers and Cancel waits briefly for it to end. FAILED_PRECONDITION
  // for a job that already finished.
  absl::StatusOr<v1::Job> Cancel(absl::string_view id) ABSL_LOCKS_EXCLUDED(mu_);

  // Subscribes to the job's events and returns its current state; events
  // published after the snapshot arrive on the subscription.
  struct Watch {
    v1::Job job;
    std::unique_ptr<EventHub::Subscription> events;
  };
  absl::StatusOr<Watch> WatchJob(absl::string_view id) ABSL_LOCKS_EXCLUDED(mu_);

  // Plans the spec (any kind) on the live topology as if the cluster were
  // idle, with every alternative compared; refuses what Submit would refuse,
  // with the same errors. Queues nothing.
  absl::StatusOr<DryRunResult> DryRun(const v1::JobSpec& spec)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Hosts with a device held by a planning or running job.
  std::vector<int> BusyHosts() const ABSL_LOCKS_EXCLUDED(mu_);
  // For metrics: QUEUED jobs waiting for devices, and how many of `devices`
  // started jobs hold.
  int QueueDepth() const ABSL_LOCKS_EXCLUDED(mu_);
  // Jobs per state as stored, once every change made so far is written
  // (JobStore::CountJobsByState).
  absl::StatusOr<std::map<v1::JobState, int64_t>> CountJobsByState()
      ABSL_LOCKS_EXCLUDED(mu_);
  int CountBusy(const std::vector<int>& devices) const ABSL_LOCKS_EXCLUDED(mu_);

  // For the key-value store's access rule (kv_service.h): the state of a
  // job that is queued, planning or running (or just ended), and the names
  // of the workers it was placed on (empty while queued). NOT_FOUND for any
  // other id (unknown, or finished and forgotten).
  struct JobMembers {
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
    std::vector<std::string> workers;
  };
  absl::StatusOr<JobMembers> Members(absl::string_view id) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Registry listener: a lost or restarted worker fails the jobs using it.
  void OnWorkerEvent(const WorkerEvent& event) ABSL_LOCKS_EXCLUDED(mu_);

  // Progress pushed by `worker` (Controller.ReportProgress): its running
  // tasks. A task counts only for a job that is RUNNING with a program on
  // that worker; the rest are ignored (a job that just ended, a stale or
  // misdirected report). Returns how many tasks counted. INVALID_ARGUMENT
  // if `worker` is empty.
  absl::StatusOr<int> ReportProgress(absl::string_view worker,
                                     const std::vector<v1::TaskProgress>& tasks)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct ActiveJob;
  struct RunProgress;
  // What Submit and DryRun check and compute before a job is accepted.
  struct Admission {
    const JobKind* kind = nullptr;
    PlacementRequest request;
    Placement placement;  // on the idle cluster
    Topology topology;
    PlannedJob planned;
  };
  absl::StatusOr<Admission> Admit(const v1::JobSpec& spec,
                                  const PlanOptions& options)
      ABSL_LOCKS_EXCLUDED(mu_);
  // What a succeeded job measured of the links (JobKind::Calibration)
  // becomes the registry's calibration, which later plans use.
  void LearnCalibration(const JobKind& kind, const v1::JobSpec& spec,
                        const v1::JobResult& result, const std::string& job_id)
      ABSL_LOCKS_EXCLUDED(mu_);

  void SchedulerLoop();
  // Starts every queued job that can be placed now, in submission order,
  // stopping at the first one that reserves its turn.
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether queued `job`, which cannot be placed now, holds later jobs back:
  // it has waited reserve_after and only busy devices are in its way.
  bool ReservesItsTurnLocked(const ActiveJob& job, const Topology& topology,
                             const absl::flat_hash_set<int>& unavailable,
                             absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunJob(ActiveJob* job) ABSL_LOCKS_EXCLUDED(mu_);
  // Until `done`, polls every progress_interval those workers of `job`
  // that do not push (job->run) and publishes its progress.
  void PollProgress(ActiveJob* job,
                    const std::vector<WorkerEndpoint>& endpoints,
                    absl::Notification& done) ABSL_LOCKS_EXCLUDED(mu_);
  // Publishes job->run's progress as a RUNNING event if it moved the job
  // forward or changed its phase (progress_event_interval permitting).
  void PublishProgressLocked(ActiveJob* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs the programs on their workers; returns each worker's answer.
  // programs[i] goes to endpoints[i].
  std::vector<absl::StatusOr<v1::RunTaskResponse>> RunPrograms(
      ActiveJob* job, const std::vector<WorkerEndpoint>& endpoints,
      const std::vector<v1::WorkerProgram>& programs) ABSL_LOCKS_EXCLUDED(mu_);
  // The first worker report that contradicts its program (result_check.h),
  // if any; responses are all ok here.
  absl::Status CheckResults(
      const std::vector<v1::WorkerProgram>& programs,
      const std::vector<absl::StatusOr<v1::RunTaskResponse>>& responses,
      const Topology& topology) const;
  void AbortWorkers(ActiveJob* job,
                    const std::vector<WorkerEndpoint>& endpoints,
                    const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  // Final transition of a started job; releases its devices and keys.
  void FinishLocked(ActiveJob* job, v1::JobState state,
                    const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets state/message/progress, persists, publishes, logs.
  // With `record` false the event is only published (not stored, logged).
  void TransitionLocked(ActiveJob* job, v1::JobState state,
                        const std::string& message, double progress,
                        bool record = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the message of a QUEUED job (why it waits). A reason is recorded
  // (stored event, log line) only the first time the job waits for that
  // kind of reason (QueueNote); later changes of wording are only
  // published to watchers, so a long queue does not write an event per
  // waiting job every time the queue moves.
  enum QueueNote { kWaitingNote = 1, kReservedNote = 2, kBehindNote = 4 };
  void NoteQueuedLocked(ActiveJob* job, const std::string& message,
                        QueueNote note) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the job's current state (its plan only the first time it is
  // set), `event` and `workers` for the writer thread.
  void PersistLocked(ActiveJob* job, const v1::JobEvent* event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The store is written by one thread, in order, off mu_: a write never
  // holds up the queue. Readers of the store flush first.
  struct PendingWrite {
    v1::Job job;  // without its plan unless write_plan
    bool write_plan = false;
    bool has_event = false;
    v1::JobEvent event;
    std::vector<JobStore::JobWorker> workers;  // job_workers rows to add
  };
  void WriterLoop() ABSL_LOCKS_EXCLUDED(write_mu_);
  // Waits until every write queued so far is in the store.
  void FlushWrites() ABSL_LOCKS_EXCLUDED(write_mu_);
  void StopWriter() ABSL_LOCKS_EXCLUDED(write_mu_);
  // Re-queues the QUEUED jobs of a previous run (RecoverAfterRestart).
  void ResumeQueuedLocked(std::vector<v1::Job> jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AbortTask for `job_ids` on `worker` (a controller restart left them
  // behind), on a helper thread; successful ones leave pending_aborts_.
  void AbortLeftoversLocked(const WorkerEndpoint& worker,
                            std::vector<std::string> job_ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  JobStore* const store_;
  WorkerRegistry* const registry_;
  KvStore* const kv_;
  WorkerClient* const client_;
  Clock* const clock_;
  ControllerMetrics* const metrics_;  // may be null
  EventHub hub_;

  mutable absl::Mutex mu_;
  absl::CondVar job_ended_;  // signalled when a job reaches a final state
  DeviceAllocator allocator_ ABSL_GUARDED_BY(mu_);
  // Unfinished jobs (and finished ones whose thread was not joined yet).
  absl::flat_hash_map<std::string, std::unique_ptr<ActiveJob>> active_
      ABSL_GUARDED_BY(mu_);
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);  // QUEUED ids, FIFO
  // Workers that have pushed progress since they registered: not polled.
  absl::flat_hash_set<std::string> pushing_workers_ ABSL_GUARDED_BY(mu_);
  // Worker name -> jobs a previous controller ran there that it must
  // abort: tried at Start and whenever the name registers.
  absl::flat_hash_map<std::string, std::vector<std::string>> pending_aborts_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> helpers_ ABSL_GUARDED_BY(mu_);  // abort threads
  bool kick_ ABSL_GUARDED_BY(mu_) = false;  // wake the scheduler now
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::thread scheduler_;

  // Lock order: mu_ before write_mu_; the writer takes only write_mu_.
  absl::Mutex write_mu_;
  std::deque<PendingWrite> writes_ ABSL_GUARDED_BY(write_mu_);
  bool writing_ ABSL_GUARDED_BY(write_mu_) = false;
  bool stop_writer_ ABSL_GUARDED_BY(write_mu_) = false;
  std::thread writer_;
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_JOB_MANAGER_H_
