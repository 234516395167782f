#include "controller/job_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "util/log.h"
#include "controller/memory_check.h"
#include "controller/program_builder.h"
#include "controller/result_check.h"
#include "planner/ir/spec_convert.h"
#include "planner/kinds/job_kind.h"
#include "util/status_macros.h"
#include "util/text_safety.h"

namespace meshcast {
namespace {

constexpr size_t kMaxJobNameLength = 256;
// Progress milestones: planning is quick, the data-plane run is the rest.
constexpr double kProgressPlanning = 0.05;
constexpr double kProgressRunning = 0.1;

std::string StateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  constexpr absl::string_view kPrefix = "JOB_STATE_";
  if (absl::StartsWith(name, kPrefix)) name = name.substr(kPrefix.size());
  return name;
}

bool IsFinal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

std::string KvPrefix(absl::string_view job_id) {
  return absl::StrCat("job/", job_id, "/");
}

// "2x4 on devices 8..15" style summary of a placed mesh.
std::string DescribeMesh(const DeviceMesh& mesh) {
  return absl::StrCat(absl::StrJoin(mesh.shape, "x"), " on devices [",
                      absl::StrJoin(mesh.devices, ","), "]");
}

// "src_mesh 2x4, dst_mesh 2x4@1": the meshes as requested.
std::string DescribeRequest(const PlacementRequest& request) {
  std::vector<std::string> parts;
  for (int i = 0; i < static_cast<int>(request.meshes.size()); ++i) {
    parts.push_back(
        absl::StrCat(request.NameOf(i), " ", request.meshes[i].ToString()));
  }
  return absl::StrJoin(parts, ", ");
}

// Whether a plan made for `a` is valid for `b`: same devices in the same
// mesh shapes, same topology (every field the planner reads is in the
// proto form).
bool SamePlacement(const Placement& a, const Placement& b) {
  if (a.meshes.size() != b.meshes.size()) return false;
  for (size_t i = 0; i < a.meshes.size(); ++i) {
    if (a.meshes[i].shape != b.meshes[i].shape ||
        a.meshes[i].devices != b.meshes[i].devices) {
      return false;
    }
  }
  return true;
}
bool SameTopology(const Topology& a, const Topology& b) {
  return TopologyToProto(a).SerializeAsString() ==
         TopologyToProto(b).SerializeAsString();
}

// A plan that fails on the idle cluster's placement is a bad spec (mesh
// rank against a sharding spec, say) when the kind says so; anything else
// keeps its code, with the phase named.
absl::Status PlanningError(const absl::Status& status) {
  if (absl::IsInvalidArgument(status)) return status;
  return absl::Status(
      status.code(),
      absl::StrCat("planning on the idle cluster failed: ", status.message()));
}

// What a task is doing: its own word, else inferred from its step counts
// (workers that do not say): parsed programs report their steps, and once
// every step is done only verification is left.
std::string PhaseOf(const v1::TaskProgress& task) {
  if (!task.phase().empty()) return task.phase();
  if (task.steps_total() <= 0) return "setup";
  if (task.steps_done() >= task.steps_total()) return "verify";
  return "data";
}

// Phases in the order a task goes through them; a job is in the earliest
// phase of its unfinished workers. A phase this controller does not know
// sorts with "data".
int PhaseRank(absl::string_view phase) {
  if (phase == "setup") return 0;
  if (phase == "connect") return 1;
  if (phase == "verify") return 3;
  return 2;
}

// With verify CHECKSUM, whether every moved tensor arrived intact
// (CheckTensorChecksums over all workers' results); OK for other modes.
absl::Status ChecksumsAgree(
    v1::VerifyMode verify, const v1::Plan& plan,
    const std::vector<absl::StatusOr<v1::RunTaskResponse>>& responses) {
  if (verify != v1::VERIFY_MODE_CHECKSUM) return absl::OkStatus();
  std::vector<const v1::JobResult*> results;
  for (const auto& response : responses) results.push_back(&response->result());
  return CheckTensorChecksums(plan, results);
}

}  // namespace

// How far the workers of a running job are; guarded by the manager's mu_.
// Exists while RunPrograms runs.
struct JobManager::RunProgress {
  struct Worker {
    std::string name;
    int64_t steps_total = 0;  // from its program
    int64_t bytes_total = 0;
    v1::TaskProgress last;  // latest report, pushed or polled
    bool reported = false;
    bool finished = false;  // answered RunTask
  };
  std::vector<Worker> workers;  // parallel to the programs
  int64_t all_steps = 0;
  int64_t all_bytes = 0;
  std::string phase;  // as last published
  absl::Time last_event;
};

struct JobManager::ActiveJob {
  v1::Job job;  // the latest state; guarded by the manager's mu_
  // Set at Submit, read-only afterwards: the kind, its meshes, and the plan
  // made for the idle cluster's placement (reused when the job lands there).
  v1::JobSpec spec;
  const JobKind* kind = nullptr;
  PlacementRequest request;
  Placement trial_placement;
  Topology trial_topology;
  v1::Plan trial_plan;
  // Set by the scheduler before the job thread starts, read-only afterwards.
  Placement placement;
  Topology topology;
  std::vector<WorkerSlot> slots;          // one per host of the job
  std::vector<WorkerEndpoint> endpoints;  // parallel to slots
  // Cancels the job's in-flight RunTask calls; thread-safe on its own.
  CallCanceller canceller;
  // The rest is guarded by the manager's mu_.
  absl::Time queued_at;   // when Submit accepted it
  bool started = false;   // left the queue, holds devices, has a thread
  bool finished = false;  // reached a final state
  bool thread_done = false;
  bool cancel_requested = false;
  std::string failure;  // first reason the job must fail, if any
  int workers_done = 0;
  int queue_notes = 0;      // QueueNote bits recorded while QUEUED
  bool plan_dirty = false;  // the plan was set and not yet persisted
  std::unique_ptr<RunProgress> run;
  std::thread thread;
};

JobManager::JobManager(Options options, JobStore* store,
                       WorkerRegistry* registry, KvStore* kv,
                       WorkerClient* client, Clock* clock,
                       ControllerMetrics* metrics)
    : options_(options),
      store_(store),
      registry_(registry),
      kv_(kv),
      client_(client),
      clock_(clock),
      metrics_(metrics) {
  writer_ = std::thread([this] { WriterLoop(); });
}

JobManager::~JobManager() {
  Shutdown("controller shut down");
  StopWriter();
}

absl::Status JobManager::Start() {
  {
    absl::MutexLock lock(&mu_);
    if (started_) return absl::FailedPreconditionError("already started");
  }
  ASSIGN_OR_RETURN(
      JobStore::Recovery recovery,
      store_->RecoverAfterRestart(
          "controller restarted while the job ran; its workers were told to "
          "abort it (resubmit it)",
          UnixSecondsOf(clock_->Now())));
  // Host indices of the previous run: a device id keeps its worker.
  RETURN_IF_ERROR(registry_->AttachStore(store_));
  registry_->AddListener([this](const WorkerEvent& e) { OnWorkerEvent(e); });
  absl::MutexLock lock(&mu_);
  started_ = true;
  // Where each worker is now, if it registered already, else where the
  // job recorded it.
  absl::flat_hash_map<std::string, std::string> live_address;
  for (const WorkerRecord& w : registry_->Workers()) {
    if (!w.lost) live_address[w.name] = w.address;
  }
  absl::flat_hash_map<std::string, std::string> recorded_address;
  for (const JobStore::Recovery::FailedJob& failed : recovery.failed) {
    JobLogWarning(failed.id,
                  "FAILED: controller restarted while it ran (resubmit it)");
    for (const JobStore::JobWorker& worker : failed.workers) {
      pending_aborts_[worker.name].push_back(failed.id);
      recorded_address[worker.name] = worker.address;
    }
  }
  for (auto& [name, ids] : pending_aborts_) {
    auto live = live_address.find(name);
    AbortLeftoversLocked(
        {name, live != live_address.end() ? live->second
                                          : recorded_address[name]},
        ids);
  }
  ResumeQueuedLocked(std::move(recovery.queued));
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  return absl::OkStatus();
}

void JobManager::ResumeQueuedLocked(std::vector<v1::Job> jobs) {
  for (v1::Job& stored : jobs) {
    auto job = std::make_unique<ActiveJob>();
    job->spec = stored.spec();
    job->job = std::move(stored);
    job->queued_at = clock_->Now();
    const std::string id = job->job.id();
    absl::StatusOr<const JobKind*> kind =
        options_.find_kind ? options_.find_kind(job->spec)
                           : FindJobKind(job->spec);
    absl::Status valid = kind.status();
    if (valid.ok()) valid = (*kind)->Validate(job->spec);
    absl::StatusOr<PlacementRequest> request =
        valid.ok() ? (*kind)->Meshes(job->spec)
                   : absl::StatusOr<PlacementRequest>(valid);
    ActiveJob* raw = job.get();
    active_[id] = std::move(job);
    if (!request.ok()) {
      // Unknown to this controller (an older or newer kind): it cannot run.
      raw->kind = nullptr;
      raw->finished = true;
      raw->thread_done = true;
      raw->job.set_finished_unix(UnixSecondsOf(clock_->Now()));
      TransitionLocked(raw, v1::JOB_STATE_FAILED,
                       absl::StrCat("cannot resume after a controller "
                                    "restart: ",
                                    request.status().message()),
                       raw->job.progress());
      continue;
    }
    raw->kind = *kind;
    raw->request = *std::move(request);
    queue_.push_back(id);
    TransitionLocked(raw, v1::JOB_STATE_QUEUED,
                     "queued again after a controller restart", 0);
  }
  kick_ = true;
}

void JobManager::AbortLeftoversLocked(const WorkerEndpoint& worker,
                                      std::vector<std::string> job_ids) {
  if (worker.address.empty() || job_ids.empty()) return;
  helpers_.emplace_back([this, worker, job_ids = std::move(job_ids)] {
    const absl::Time deadline = absl::Now() + options_.abort_timeout;
    std::vector<std::string> done;
    for (const std::string& id : job_ids) {
      absl::Status status = client_->AbortTask(
          worker, id, "controller restarted while the job ran", deadline);
      if (status.ok()) {
        JobLogInfo(id, "told worker ", worker.name,
                " to abort it (controller restarted)");
        done.push_back(id);
      }
    }
    absl::MutexLock lock(&mu_);
    auto it = pending_aborts_.find(worker.name);
    if (it == pending_aborts_.end()) return;
    std::vector<std::string>& ids = it->second;
    for (const std::string& id : done) {
      ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
    }
    if (ids.empty()) pending_aborts_.erase(it);
  });
}

void JobManager::Shutdown(absl::string_view reason) {
  std::vector<ActiveJob*> to_cancel;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    for (const std::string& id : queue_) {
      auto it = active_.find(id);
      if (it == active_.end()) continue;
      FinishLocked(it->second.get(), v1::JOB_STATE_FAILED, std::string(reason));
      active_.erase(it);
    }
    queue_.clear();
    for (auto& [id, job] : active_) {
      if (job->finished) continue;
      if (job->failure.empty()) job->failure = std::string(reason);
      to_cancel.push_back(job.get());
    }
  }
  for (ActiveJob* job : to_cancel) job->canceller.Cancel();
  if (scheduler_.joinable()) scheduler_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, job] : active_) {
      if (job->thread.joinable()) threads.push_back(std::move(job->thread));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (std::thread& t : helpers_) threads.push_back(std::move(t));
    helpers_.clear();
  }
  for (std::thread& t : threads) t.join();
  {
    absl::MutexLock lock(&mu_);
    active_.clear();
  }
  FlushWrites();
  hub_.Shutdown();
}

void JobManager::WriterLoop() {
  while (true) {
    std::deque<PendingWrite> batch;
    {
      absl::MutexLock lock(&write_mu_);
      auto ready = [this]() {
        write_mu_.AssertHeld();
        return !writes_.empty() || stop_writer_;
      };
      write_mu_.Await(absl::Condition(&ready));
      if (writes_.empty()) return;  // stopping, everything written
      batch.swap(writes_);
      writing_ = true;
    }
    for (const PendingWrite& w : batch) {
      absl::Status status = store_->SaveJob(
          w.job, w.write_plan ? JobStore::PlanWrite::kWrite
                              : JobStore::PlanWrite::kKeep);
      if (status.ok() && !w.workers.empty()) {
        status = store_->SaveJobWorkers(w.job.id(), w.workers);
      }
      if (!status.ok()) {
        JobLogError(w.job.id(), "cannot persist: ", status.ToString());
      }
      if (w.has_event) {
        status = store_->AppendEvent(w.event);
        if (!status.ok()) {
          JobLogError(w.job.id(), "cannot store event: ",
                      status.ToString());
        }
      }
    }
    absl::MutexLock lock(&write_mu_);
    writing_ = false;
  }
}

void JobManager::FlushWrites() {
  absl::MutexLock lock(&write_mu_);
  auto idle = [this]() {
    write_mu_.AssertHeld();
    return writes_.empty() && !writing_;
  };
  write_mu_.Await(absl::Condition(&idle));
}

void JobManager::StopWriter() {
  {
    absl::MutexLock lock(&write_mu_);
    stop_writer_ = true;
  }
  if (writer_.joinable()) writer_.join();
}

absl::StatusOr<JobManager::Admission> JobManager::Admit(
    const v1::JobSpec& spec, const PlanOptions& options) {
  Admission admission;
  ASSIGN_OR_RETURN(admission.kind, options_.find_kind ? options_.find_kind(spec)
                                                      : FindJobKind(spec));
  RETURN_IF_ERROR(admission.kind->Validate(spec));
  ASSIGN_OR_RETURN(admission.request, admission.kind->Meshes(spec));
  // Validate against the whole cluster now, so that a job that can never
  // run is refused instead of waiting forever.
  admission.topology = registry_->topology();
  ASSIGN_OR_RETURN(admission.placement,
                   DeviceAllocator::PlaceOnIdleCluster(admission.request,
                                                       admission.topology));
  absl::StatusOr<PlannedJob> planned = admission.kind->Plan(
      spec, admission.placement.meshes, admission.topology, options);
  if (!planned.ok()) return PlanningError(planned.status());
  admission.planned = *std::move(planned);
  RETURN_IF_ERROR(CheckBuffersFitWorkers(
      admission.planned.plan, admission.topology, registry_->Workers()));
  return admission;
}

absl::StatusOr<v1::Job> JobManager::Submit(const v1::JobSpec& spec) {
  if (spec.name().size() > kMaxJobNameLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.name is longer than ", kMaxJobNameLength, " characters"));
  }
  ASSIGN_OR_RETURN(Admission admission, Admit(spec, PlanOptions{}));

  absl::MutexLock lock(&mu_);
  if (shutdown_ || !started_) {
    return absl::UnavailableError("controller is not accepting jobs now");
  }
  if (static_cast<int>(active_.size()) >= options_.max_unfinished_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat(active_.size(), " jobs are unfinished already; at most ",
                     options_.max_unfinished_jobs));
  }
  auto job = std::make_unique<ActiveJob>();
  job->spec = spec;
  job->kind = admission.kind;
  job->request = std::move(admission.request);
  job->trial_placement = std::move(admission.placement);
  job->trial_topology = admission.topology;
  job->trial_plan = std::move(admission.planned.plan);
  job->job.set_id(store_->AllocateJobId());
  *job->job.mutable_spec() = spec;
  job->queued_at = clock_->Now();
  job->job.set_created_unix(UnixSecondsOf(job->queued_at));
  const std::string id = job->job.id();
  ActiveJob* raw = job.get();
  active_[id] = std::move(job);
  queue_.push_back(id);
  TransitionLocked(raw, v1::JOB_STATE_QUEUED,
                   absl::StrCat("queued: ", raw->kind->name(), " job, ",
                                DescribeRequest(raw->request)),
                   0);
  kick_ = true;
  return raw->job;
}

absl::StatusOr<v1::Job> JobManager::Get(absl::string_view id) {
  if (id.empty()) return absl::InvalidArgumentError("job id is required");
  {
    absl::MutexLock lock(&mu_);
    auto it = active_.find(id);
    if (it != active_.end()) return it->second->job;
  }
  FlushWrites();
  return store_->GetJob(id);
}

absl::StatusOr<std::vector<v1::Job>> JobManager::List(int limit) {
  // Every change is queued for the store as it happens: once the queue is
  // written, the store is current.
  FlushWrites();
  return store_->ListJobs(limit, /*include_plans=*/false);
}

absl::StatusOr<v1::Job> JobManager::Cancel(absl::string_view id) {
  if (id.empty()) return absl::InvalidArgumentError("job id is required");
  ActiveJob* to_cancel = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = active_.find(id);
    if (it != active_.end() && !it->second->finished) {
      ActiveJob* job = it->second.get();
      if (!job->started) {
        queue_.erase(std::find(queue_.begin(), queue_.end(), job->job.id()));
        FinishLocked(job, v1::JOB_STATE_CANCELLED, "cancelled by user");
        v1::Job snapshot = job->job;
        active_.erase(it);
        return snapshot;
      }
      if (!job->cancel_requested) {
        job->cancel_requested = true;
        JobLogInfo(id, "cancel requested");
      }
      to_cancel = job;
    }
  }
  if (to_cancel != nullptr) {
    // The job thread sees cancel_requested, aborts the workers and ends the
    // job; wait a little so the caller usually gets the final state.
    to_cancel->canceller.Cancel();
    absl::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (true) {
      auto it = active_.find(id);
      if (it == active_.end() || it->second->finished) break;
      if (job_ended_.WaitWithDeadline(&mu_, deadline)) break;
    }
    auto it = active_.find(id);
    if (it != active_.end()) return it->second->job;
  }
  FlushWrites();
  if (to_cancel != nullptr) return store_->GetJob(id);
  ASSIGN_OR_RETURN(v1::Job job, store_->GetJob(id));
  if (job.state() == v1::JOB_STATE_CANCELLED) return job;  // idempotent
  return absl::FailedPreconditionError(absl::StrCat(
      "job ", id, " already finished (", StateName(job.state()), ")"));
}

absl::StatusOr<JobManager::Watch> JobManager::WatchJob(absl::string_view id) {
  if (id.empty()) return absl::InvalidArgumentError("job id is required");
  Watch watch;
  {
    // Events are published under mu_, so subscribing and copying the state
    // under it misses nothing in between.
    absl::MutexLock lock(&mu_);
    auto it = active_.find(id);
    if (it != active_.end()) {
      watch.events = hub_.Subscribe(std::string(id));
      watch.job = it->second->job;
      return watch;
    }
  }
  FlushWrites();
  ASSIGN_OR_RETURN(watch.job, store_->GetJob(id));
  watch.events = hub_.Subscribe(std::string(id));
  return watch;
}

absl::StatusOr<DryRunResult> JobManager::DryRun(const v1::JobSpec& spec) {
  PlanOptions options;
  options.compare_all = true;
  ASSIGN_OR_RETURN(Admission admission, Admit(spec, options));
  DryRunResult result;
  result.kind = admission.kind->name();
  result.plan = std::move(admission.planned.plan);
  result.alternatives = std::move(admission.planned.alternatives);
  result.topology = admission.topology;
  result.placed_meshes = std::move(admission.placement.meshes);
  return result;
}

absl::StatusOr<std::map<v1::JobState, int64_t>> JobManager::CountJobsByState() {
  FlushWrites();
  return store_->CountJobsByState();
}

int JobManager::QueueDepth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

int JobManager::CountBusy(const std::vector<int>& devices) const {
  absl::MutexLock lock(&mu_);
  int busy = 0;
  for (int device : devices) busy += allocator_.IsBusy(device) ? 1 : 0;
  return busy;
}

std::vector<int> JobManager::BusyHosts() const {
  absl::MutexLock lock(&mu_);
  std::vector<int> hosts;
  for (const auto& [id, job] : active_) {
    if (!job->started || job->finished) continue;
    hosts.insert(hosts.end(), job->placement.hosts.begin(),
                 job->placement.hosts.end());
  }
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  return hosts;
}

void JobManager::OnWorkerEvent(const WorkerEvent& event) {
  std::vector<ActiveJob*> to_cancel;
  {
    absl::MutexLock lock(&mu_);
    kick_ = true;  // a registration may let queued jobs start
    // Whatever registers under this name may be a worker that never pushes
    // (an older binary): poll it until it pushes.
    pushing_workers_.erase(event.name);
    // A removed worker was LOST before: its jobs have failed already.
    if (event.kind == WorkerEvent::Kind::kRemoved) return;
    if (event.kind == WorkerEvent::Kind::kRegistered) {
      // A worker that ran a job of the previous controller: abort it there
      // now that we know where the worker is.
      auto pending = pending_aborts_.find(event.name);
      if (pending != pending_aborts_.end() && !shutdown_) {
        absl::StatusOr<WorkerRecord> worker =
            registry_->WorkerOnHost(event.host_index);
        if (worker.ok() && worker->name == event.name) {
          AbortLeftoversLocked({worker->name, worker->address},
                               pending->second);
        }
      }
      return;
    }
    for (auto& [id, job] : active_) {
      if (!job->started || job->finished) continue;
      const std::vector<int>& hosts = job->placement.hosts;
      if (std::find(hosts.begin(), hosts.end(), event.host_index) ==
          hosts.end()) {
        continue;
      }
      if (job->failure.empty()) {
        job->failure = event.reason;
        JobLogWarning(id, event.reason, "; failing the job");
      }
      to_cancel.push_back(job.get());
    }
  }
  for (ActiveJob* job : to_cancel) job->canceller.Cancel();
}

void JobManager::SchedulerLoop() {
  while (true) {
    std::vector<std::thread> to_join;
    {
      absl::MutexLock lock(&mu_);
      auto woken = [this]() {
        mu_.AssertHeld();
        return kick_ || shutdown_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&woken), options_.schedule_interval);
      if (shutdown_) return;
      kick_ = false;
      // Reap threads of finished jobs.
      for (auto it = active_.begin(); it != active_.end();) {
        auto next = std::next(it);
        if (it->second->thread_done) {
          to_join.push_back(std::move(it->second->thread));
          active_.erase(it);
        }
        it = next;
      }
      ScheduleLocked();
    }
    for (std::thread& t : to_join) {
      if (t.joinable()) t.join();
    }
  }
}

bool JobManager::ReservesItsTurnLocked(
    const ActiveJob& job, const Topology& topology,
    const absl::flat_hash_set<int>& unavailable, absl::Time now) const {
  if (now - job.queued_at < options_.reserve_after) return false;
  // Only a job that busy devices alone keep waiting: one that needs a lost
  // worker's host could hold the queue back for as long as it stays lost.
  return DeviceAllocator().Place(job.request, topology, unavailable).ok();
}

void JobManager::ScheduleLocked() {
  if (queue_.empty()) return;
  const Topology topology = registry_->topology();
  // No host known yet (a controller restarted on an empty database, jobs
  // resumed): nothing can be placed, and nothing is known not to fit.
  if (topology.num_hosts == 0 || topology.devices_per_host == 0) return;
  const absl::flat_hash_set<int> unavailable = registry_->UnavailableHosts();
  const absl::Time now = clock_->Now();
  // The first job that has reserved its turn, if any: later ones wait.
  const ActiveJob* holder = nullptr;
  for (auto qit = queue_.begin(); qit != queue_.end();) {
    ActiveJob* job = active_.at(*qit).get();
    if (holder != nullptr) {
      const std::string message = absl::StrCat(
          "queued behind job ", holder->job.id(), ", which has waited ",
          absl::FormatDuration(
              absl::Trunc(now - holder->queued_at, absl::Seconds(1))),
          " for devices and starts first");
      NoteQueuedLocked(job, message, kBehindNote);
      ++qit;
      continue;
    }
    absl::StatusOr<Placement> placement =
        allocator_.Acquire(job->request, topology, unavailable);
    if (absl::IsUnavailable(placement.status())) {
      std::string message(placement.status().message());
      QueueNote note = kWaitingNote;
      if (ReservesItsTurnLocked(*job, topology, unavailable, now)) {
        holder = job;
        absl::StrAppend(&message, "; later jobs wait until it starts");
        note = kReservedNote;
      }
      NoteQueuedLocked(job, message, note);
      ++qit;
      continue;
    }
    qit = queue_.erase(qit);
    if (!placement.ok()) {
      // The cluster changed so that the job can never fit.
      FinishLocked(job, v1::JOB_STATE_FAILED,
                   std::string(placement.status().message()));
      job->thread_done = true;
      continue;
    }
    job->started = true;
    job->placement = *std::move(placement);
    job->topology = topology;
    // Published with the PLANNING transition below (and kept in the store),
    // so clients see where an auto-placed mesh went.
    for (const DeviceMesh& mesh : job->placement.meshes) {
      *job->job.add_placed_meshes() = MeshToProto(mesh);
    }
    // The fields older clients read for a reshard job (source, destination).
    if (job->kind->name() == "reshard" && job->placement.meshes.size() == 2) {
      *job->job.mutable_placed_src_mesh() =
          MeshToProto(job->placement.meshes[0]);
      *job->job.mutable_placed_dst_mesh() =
          MeshToProto(job->placement.meshes[1]);
    }
    std::string missing;
    for (int host : job->placement.hosts) {
      absl::StatusOr<WorkerRecord> worker = registry_->WorkerOnHost(host);
      if (!worker.ok()) {
        missing = std::string(worker.status().message());
        break;
      }
      WorkerSlot slot;
      slot.name = worker->name;
      slot.host_index = host;
      for (int local = 0; local < topology.devices_per_host; ++local) {
        slot.devices.push_back(host * topology.devices_per_host + local);
      }
      job->slots.push_back(std::move(slot));
      job->endpoints.push_back({worker->name, worker->address});
    }
    if (!missing.empty()) {
      FinishLocked(job, v1::JOB_STATE_FAILED, missing);
      job->thread_done = true;
      continue;
    }
    std::vector<std::string> names;
    for (const WorkerSlot& slot : job->slots) names.push_back(slot.name);
    std::vector<std::string> meshes;
    for (int i = 0; i < static_cast<int>(job->placement.meshes.size()); ++i) {
      meshes.push_back(absl::StrCat(job->request.NameOf(i), " ",
                                    DescribeMesh(job->placement.meshes[i])));
    }
    TransitionLocked(job, v1::JOB_STATE_PLANNING,
                     absl::StrCat("planning: ", absl::StrJoin(meshes, ", "),
                                  ", workers ", absl::StrJoin(names, ",")),
                     kProgressPlanning);
    job->thread = std::thread([this, job] { RunJob(job); });
  }
}

void JobManager::RunJob(ActiveJob* job) {
  const std::string id = job->job.id();  // immutable after Submit
  // Plan and project without the lock: the inputs are read-only now.
  const absl::Time planning_start = absl::Now();
  const v1::JobSpec& spec = job->spec;
  absl::StatusOr<v1::Plan> plan = [&]() -> absl::StatusOr<v1::Plan> {
    if (SamePlacement(job->trial_placement, job->placement) &&
        SameTopology(job->trial_topology, job->topology)) {
      // Landed where Submit planned it: that plan holds (kinds are pure).
      return std::move(job->trial_plan);
    }
    ASSIGN_OR_RETURN(PlannedJob planned,
                     job->kind->Plan(spec, job->placement.meshes, job->topology,
                                     PlanOptions{}));
    return std::move(planned.plan);
  }();
  job->trial_plan.Clear();
  absl::StatusOr<std::vector<v1::WorkerProgram>> programs =
      plan.ok() ? ProjectPlan(*plan, id, job->slots)
                : absl::StatusOr<std::vector<v1::WorkerProgram>>(plan.status());
  if (programs.ok()) {
    for (v1::WorkerProgram& program : *programs) {
      program.set_verify(spec.verify());
    }
  }
  if (metrics_ != nullptr) {
    metrics_->JobPlanned(job->kind->name(),
                         absl::ToDoubleSeconds(absl::Now() - planning_start));
  }
  // Endpoints in program order (programs follow host order, a subset of the
  // job's hosts: a host whose devices the plan never touches gets none).
  // Only these workers run something, so only these get AbortTask.
  std::vector<WorkerEndpoint> endpoints;
  if (programs.ok()) {
    for (const v1::WorkerProgram& program : *programs) {
      for (const WorkerEndpoint& e : job->endpoints) {
        if (e.name == program.worker()) endpoints.push_back(e);
      }
    }
  }
  {
    absl::MutexLock lock(&mu_);
    if (!programs.ok()) {
      FinishLocked(
          job, v1::JOB_STATE_FAILED,
          absl::StrCat("planning failed: ", programs.status().message()));
      job->thread_done = true;
      return;
    }
    if (job->cancel_requested || !job->failure.empty()) {
      const bool cancelled = job->cancel_requested;
      FinishLocked(job,
                   cancelled ? v1::JOB_STATE_CANCELLED : v1::JOB_STATE_FAILED,
                   cancelled ? "cancelled by user" : job->failure);
      job->thread_done = true;
      return;
    }
    *job->job.mutable_plan() = *plan;
    job->plan_dirty = true;  // written once, with the next transition
    job->job.set_started_unix(UnixSecondsOf(clock_->Now()));
    v1::JobResult* result = job->job.mutable_result();
    result->set_predicted_seconds(plan->predicted_seconds());
    result->set_lower_bound_seconds(plan->lower_bound_seconds());
    int64_t plan_bytes = 0;
    for (const v1::Step& step : plan->steps()) plan_bytes += step.bytes();
    TransitionLocked(
        job, v1::JOB_STATE_RUNNING,
        absl::StrFormat(
            "running %s plan: %d steps, %d bytes on %d workers "
            "(predicted %.6f s)",
            plan->strategy().empty() ? job->kind->name() : plan->strategy(),
            plan->steps_size(), plan_bytes, programs->size(),
            plan->predicted_seconds()),
        kProgressRunning);
  }

  std::vector<absl::StatusOr<v1::RunTaskResponse>> responses =
      RunPrograms(job, endpoints, *programs);

  // Decide the outcome.
  v1::JobState state = v1::JOB_STATE_SUCCEEDED;
  std::string message;
  {
    absl::MutexLock lock(&mu_);
    if (job->cancel_requested) {
      state = v1::JOB_STATE_CANCELLED;
      message = "cancelled by user";
    } else if (!job->failure.empty()) {
      state = v1::JOB_STATE_FAILED;
      message = job->failure;
    } else if (absl::Status contradiction =
                   CheckResults(*programs, responses, job->topology);
               !contradiction.ok()) {
      state = v1::JOB_STATE_FAILED;
      message = std::string(contradiction.message());
    } else {
      v1::JobResult* result = job->job.mutable_result();
      double seconds = 0, max_abs_error = 0;
      int64_t verified = 0, mismatches = 0;
      for (size_t i = 0; i < responses.size(); ++i) {
        const v1::JobResult& r = responses[i]->result();
        seconds = std::max(seconds, r.seconds());
        max_abs_error = std::max(max_abs_error, r.max_abs_error());
        verified += r.elements_verified();
        mismatches += r.mismatches();
        for (const v1::StepResult& step : r.steps()) {
          v1::StepResult* s = result->add_steps();
          *s = step;  // start, end and device as the worker measured them
          if (s->worker().empty()) s->set_worker(endpoints[i].name);
        }
      }
      const v1::Plan& plan = job->job.plan();
      int64_t bytes = 0;
      for (const v1::Step& step : plan.steps()) bytes += step.bytes();
      result->set_seconds(seconds);
      result->set_bytes_moved(bytes);
      result->set_bytes_delivered(DeliveredBytes(plan));
      result->set_elements_verified(verified);
      result->set_mismatches(mismatches);
      result->set_max_abs_error(max_abs_error);
      job->kind->Summarize(spec, plan, *result);
      const v1::VerifyMode verify = spec.verify();
      const int64_t expected = DestinationElements(plan);
      if (mismatches > 0) {
        state = v1::JOB_STATE_FAILED;
        message = absl::StrCat(
            "verification failed: ", mismatches, " mismatched elements of ",
            verified, " verified",
            max_abs_error > 0
                ? absl::StrFormat(" (largest error %g)", max_abs_error)
                : std::string());
      } else if (absl::Status intact = ChecksumsAgree(verify, plan, responses);
                 !intact.ok()) {
        state = v1::JOB_STATE_FAILED;
        message = std::string(intact.message());
      } else if (verify == v1::VERIFY_MODE_FULL && verified != expected) {
        state = v1::JOB_STATE_FAILED;
        message =
            absl::StrCat("verification incomplete: workers verified ", verified,
                         " of ", expected, " destination elements");
      } else {
        if (metrics_ != nullptr) {
          metrics_->JobMeasured(job->kind->name(),
                                job->kind->PredictedSpanSeconds(*result),
                                result->predicted_seconds());
        }
        LearnCalibration(*job->kind, spec, *result, job->job.id());
        std::string verification;
        switch (verify) {
          case v1::VERIFY_MODE_OFF:
            verification = "verification off";
            break;
          case v1::VERIFY_MODE_SAMPLE:
            verification = absl::StrCat("verified a sample of ", verified,
                                        " elements, 0 mismatches");
            break;
          case v1::VERIFY_MODE_CHECKSUM:
            verification = "checksums of every moved tensor agree";
            break;
          default:
            verification =
                absl::StrCat("verified ", verified, " elements, 0 mismatches");
            break;
        }
        if (max_abs_error > 0) {
          absl::StrAppendFormat(&verification, " (largest error %g)",
                                max_abs_error);
        }
        message = absl::StrFormat(
            "moved %d bytes in %.6f s (%.3f Gbps, predicted %.6f s); %s", bytes,
            seconds, seconds > 0 ? bytes * 8 / seconds / 1e9 : 0.0,
            result->predicted_seconds(), verification);
      }
    }
  }
  if (state != v1::JOB_STATE_SUCCEEDED) AbortWorkers(job, endpoints, message);
  absl::MutexLock lock(&mu_);
  FinishLocked(job, state, message);
  job->thread_done = true;
  kick_ = true;
}

void JobManager::LearnCalibration(const JobKind& kind, const v1::JobSpec& spec,
                                  const v1::JobResult& result,
                                  const std::string& job_id) {
  std::vector<CollectiveCalibration> learned = kind.Calibration(spec, result);
  if (learned.empty()) return;
  for (CollectiveCalibration& c : learned) c.job_id = job_id;
  const size_t fits = learned.size();
  const absl::Status saved = registry_->SetCalibration(std::move(learned));
  if (!saved.ok()) {
    JobLogError(job_id, "cannot persist its link calibration: ",
             saved.ToString());
  }
  JobLogInfo(job_id, "the planner now uses its calibration (", fits,
          " collective fits)");
}

absl::Status JobManager::CheckResults(
    const std::vector<v1::WorkerProgram>& programs,
    const std::vector<absl::StatusOr<v1::RunTaskResponse>>& responses,
    const Topology& topology) const {
  ResultCheckOptions check;
  check.max_bytes_per_second =
      MaxPlausibleBytesPerSecond(topology, options_.max_rate_factor);
  for (size_t i = 0; i < programs.size() && i < responses.size(); ++i) {
    RETURN_IF_ERROR(
        CheckWorkerResult(programs[i], responses[i]->result(), check));
  }
  return absl::OkStatus();
}

std::vector<absl::StatusOr<v1::RunTaskResponse>> JobManager::RunPrograms(
    ActiveJob* job, const std::vector<WorkerEndpoint>& endpoints,
    const std::vector<v1::WorkerProgram>& programs) {
  const size_t n = programs.size();
  std::vector<absl::StatusOr<v1::RunTaskResponse>> responses(
      n, absl::UnknownError("not run"));
  {
    // What each worker runs, from its program, for reports to count
    // against.
    auto run = std::make_unique<RunProgress>();
    for (size_t i = 0; i < n; ++i) {
      RunProgress::Worker& w = run->workers.emplace_back();
      w.name = endpoints[i].name;
      w.steps_total = programs[i].plan().steps_size();
      for (const v1::Step& step : programs[i].plan().steps()) {
        w.bytes_total += step.bytes();
      }
      run->all_steps += w.steps_total;
      run->all_bytes += w.bytes_total;
    }
    run->last_event = absl::Now();  // the RUNNING transition
    absl::MutexLock lock(&mu_);
    job->run = std::move(run);
  }
  absl::Notification all_answered;
  std::thread poller;
  if (options_.progress_interval > absl::ZeroDuration()) {
    poller = std::thread([&] { PollProgress(job, endpoints, all_answered); });
  }
  // gRPC deadlines are wall-clock, so this one is too.
  const absl::Time deadline = absl::Now() + options_.task_timeout;
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([this, job, &endpoints, &programs, &responses,
                          deadline, n, i] {
      const WorkerEndpoint& worker = endpoints[i];
      absl::StatusOr<v1::RunTaskResponse> response =
          client_->RunTask(worker, programs[i], deadline, &job->canceller);
      std::string failure;
      if (!response.ok()) {
        failure =
            absl::StrCat("worker ", worker.name, " (", worker.address,
                         "): RunTask failed: ", response.status().ToString());
      } else if (!response->ok()) {
        failure = absl::StrCat("worker ", worker.name,
                               " failed: ", response->error());
      }
      bool cancel_others = false;
      {
        absl::MutexLock lock(&mu_);
        responses[i] = std::move(response);
        job->run->workers[i].finished = true;
        ++job->workers_done;
        // A call cut short by our own canceller is a consequence, not the
        // cause: the first reason recorded wins.
        if (!failure.empty()) {
          if (job->failure.empty() && !job->cancel_requested &&
              !job->canceller.cancelled()) {
            job->failure = failure;
            cancel_others = true;
          }
        } else {
          // Never backwards: step progress may be ahead of this count.
          TransitionLocked(
              job, v1::JOB_STATE_RUNNING,
              absl::StrCat("worker ", worker.name, " finished (",
                           job->workers_done, "/", n, ")"),
              std::max(job->job.progress(),
                       kProgressRunning + (1 - kProgressRunning) *
                                              job->workers_done /
                                              static_cast<double>(n)));
        }
      }
      if (cancel_others) job->canceller.Cancel();
    });
  }
  for (std::thread& t : threads) t.join();
  all_answered.Notify();
  if (poller.joinable()) poller.join();
  {
    absl::MutexLock lock(&mu_);
    job->run.reset();  // later reports for the job are ignored
  }
  return responses;
}

void JobManager::PollProgress(ActiveJob* job,
                              const std::vector<WorkerEndpoint>& endpoints,
                              absl::Notification& done) {
  const std::string id = job->job.id();  // set at Submit, never changed
  while (!done.WaitForNotificationWithTimeout(options_.progress_interval)) {
    // Only the unfinished workers that have never pushed: the others
    // report on their own.
    std::vector<size_t> to_poll;
    {
      absl::MutexLock lock(&mu_);
      if (job->run == nullptr || job->run->all_steps == 0) return;
      for (size_t i = 0; i < job->run->workers.size(); ++i) {
        const RunProgress::Worker& w = job->run->workers[i];
        if (!w.finished && !pushing_workers_.contains(w.name)) {
          to_poll.push_back(i);
        }
      }
    }
    if (to_poll.empty()) continue;
    // Bounded so that a stuck worker cannot hold the job past its end.
    const absl::Time deadline =
        absl::Now() + std::min(options_.progress_interval, absl::Seconds(1));
    std::vector<std::pair<size_t, v1::TaskProgress>> polled;
    for (size_t i : to_poll) {
      // The job may end while an unresponsive worker is polled: stop, so
      // that its end waits for at most one call.
      if (done.HasBeenNotified()) return;
      absl::StatusOr<v1::GetStatusResponse> status =
          client_->GetStatus(endpoints[i], deadline);
      if (!status.ok()) continue;
      for (const v1::TaskProgress& task : status->tasks()) {
        if (task.job_id() == id) polled.emplace_back(i, task);
      }
    }
    absl::MutexLock lock(&mu_);
    if (job->run == nullptr) return;
    for (auto& [i, task] : polled) {
      RunProgress::Worker& w = job->run->workers[i];
      // A push that came in meanwhile is at least as fresh.
      if (pushing_workers_.contains(w.name)) continue;
      w.last = std::move(task);
      w.reported = true;
    }
    PublishProgressLocked(job);
  }
}

absl::StatusOr<int> JobManager::ReportProgress(
    absl::string_view worker, const std::vector<v1::TaskProgress>& tasks) {
  if (worker.empty()) {
    return absl::InvalidArgumentError(
        "ReportProgressRequest.worker is empty; it must name the worker as "
        "it registered");
  }
  absl::MutexLock lock(&mu_);
  int counted = 0;
  for (const v1::TaskProgress& task : tasks) {
    auto it = active_.find(task.job_id());
    if (it == active_.end()) continue;
    ActiveJob* job = it->second.get();
    if (job->finished || job->run == nullptr) continue;
    RunProgress::Worker* mine = nullptr;
    for (RunProgress::Worker& w : job->run->workers) {
      if (w.name == worker) mine = &w;
    }
    if (mine == nullptr || mine->finished) continue;
    // Known now to push: the poll leaves it alone. Only a worker of a
    // running job gets here, so the set stays as small as the cluster.
    pushing_workers_.insert(mine->name);
    mine->last = task;
    mine->reported = true;
    ++counted;
    PublishProgressLocked(job);
  }
  return counted;
}

void JobManager::PublishProgressLocked(ActiveJob* job) {
  RunProgress& run = *job->run;
  if (job->finished || job->cancel_requested || !job->failure.empty() ||
      run.all_steps == 0) {
    return;
  }
  int64_t steps_done = 0, bytes_done = 0;
  int64_t verify_done = 0, verify_total = 0;
  std::string phase;
  for (const RunProgress::Worker& w : run.workers) {
    if (w.finished) {
      steps_done += w.steps_total;
      bytes_done += w.bytes_total;
      continue;
    }
    if (!w.reported) continue;
    steps_done += std::clamp<int64_t>(w.last.steps_done(), 0, w.steps_total);
    bytes_done += std::clamp<int64_t>(w.last.bytes_done(), 0, w.bytes_total);
    const std::string p = PhaseOf(w.last);
    if (phase.empty() || PhaseRank(p) < PhaseRank(phase)) phase = p;
    verify_done += std::max<int64_t>(w.last.verify_done(), 0);
    verify_total += std::max<int64_t>(w.last.verify_total(), 0);
  }
  const double fraction =
      run.all_bytes > 0 ? static_cast<double>(bytes_done) / run.all_bytes
                        : static_cast<double>(steps_done) / run.all_steps;
  const double progress = kProgressRunning + (1 - kProgressRunning) * fraction;
  const bool advanced = progress > job->job.progress();
  const bool new_phase = !phase.empty() && phase != run.phase;
  const absl::Time now = absl::Now();
  if (!(advanced || new_phase) ||
      now - run.last_event < options_.progress_event_interval) {
    return;
  }
  // A step that crosses workers counts once on each of them.
  std::string message = absl::StrFormat(
      "running: %.0f%% of the data moved (%d/%d worker steps done)",
      100 * fraction, steps_done, run.all_steps);
  if (!phase.empty()) absl::StrAppend(&message, ", phase ", phase);
  if (phase == "verify" && verify_total > 0) {
    absl::StrAppendFormat(&message, " (%d/%d elements checked)", verify_done,
                          verify_total);
  }
  run.phase = phase;
  run.last_event = now;
  // Never backwards: a finished worker's count may be ahead of this.
  TransitionLocked(job, v1::JOB_STATE_RUNNING, message,
                   std::max(progress, job->job.progress()));
}

void JobManager::AbortWorkers(ActiveJob* job,
                              const std::vector<WorkerEndpoint>& endpoints,
                              const std::string& reason) {
  const std::string id = job->job.id();
  const absl::Time deadline = absl::Now() + options_.abort_timeout;
  std::vector<std::thread> threads;
  for (const WorkerEndpoint& worker : endpoints) {
    threads.emplace_back([this, worker, id, reason, deadline] {
      absl::Status status = client_->AbortTask(worker, id, reason, deadline);
      if (!status.ok()) {
        JobLogWarning(id, "AbortTask on worker ", worker.name,
                   " failed: ", status.ToString());
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

void JobManager::FinishLocked(ActiveJob* job, v1::JobState state,
                              const std::string& message) {
  if (job->started) allocator_.Release(job->placement.devices);
  kv_->DeletePrefix(KvPrefix(job->job.id()));
  job->finished = true;
  job->job.set_finished_unix(UnixSecondsOf(clock_->Now()));
  if (metrics_ != nullptr) {
    metrics_->JobFinished(job->kind->name(), state,
                          job->job.finished_unix() - job->job.created_unix());
  }
  TransitionLocked(
      job, state, message,
      state == v1::JOB_STATE_SUCCEEDED ? 1.0 : job->job.progress());
  job_ended_.SignalAll();
  kick_ = true;
}

void JobManager::TransitionLocked(ActiveJob* job, v1::JobState state,
                                  const std::string& message, double progress,
                                  bool record) {
  const bool changed = job->job.state() != state;
  job->job.set_state(state);
  job->job.set_message(message);
  job->job.set_progress(progress);
  v1::JobEvent event;
  event.set_job_id(job->job.id());
  event.set_state(state);
  event.set_message(message);
  event.set_time_unix(UnixSecondsOf(clock_->Now()));
  event.set_progress(progress);
  hub_.Publish(event);
  if (!record) return;
  PersistLocked(job, &event);
  if (IsFinal(state) && state != v1::JOB_STATE_SUCCEEDED) {
    JobLogWarning(job->job.id(), StateName(state), ": ", message);
  } else {
    JobLogInfo(job->job.id(), changed ? StateName(state) : "",
               changed ? ": " : "", message);
  }
}

void JobManager::NoteQueuedLocked(ActiveJob* job, const std::string& message,
                                  QueueNote note) {
  if (job->job.message() == message) return;
  const bool first = (job->queue_notes & note) == 0;
  job->queue_notes |= note;
  TransitionLocked(job, v1::JOB_STATE_QUEUED, message, 0, /*record=*/first);
}

void JobManager::PersistLocked(ActiveJob* job, const v1::JobEvent* event) {
  PendingWrite write;
  write.write_plan = job->plan_dirty;
  if (job->plan_dirty || !job->job.has_plan()) {
    write.job = job->job;
  } else {
    // Copy everything but the plan, which is stored already.
    std::unique_ptr<v1::Plan> plan(job->job.release_plan());
    write.job = job->job;
    job->job.set_allocated_plan(plan.release());
  }
  job->plan_dirty = false;
  if (event != nullptr) {
    write.has_event = true;
    write.event = *event;
  }
  if (job->job.state() == v1::JOB_STATE_PLANNING) {
    for (const WorkerEndpoint& e : job->endpoints) {
      write.workers.push_back({e.name, e.address});
    }
  }
  absl::MutexLock lock(&write_mu_);
  writes_.push_back(std::move(write));
}

// For the key-value store's access rule (kv_service.h).
absl::StatusOr<JobManager::JobMembers> JobManager::Members(
    absl::string_view id) const {
  absl::MutexLock lock(&mu_);
  auto it = active_.find(id);
  if (it == active_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no queued or running job ", QuotePrefix(id)));
  }
  const ActiveJob& job = *it->second;
  JobMembers members;
  members.state = job.job.state();
  if (job.started) {
    for (const WorkerEndpoint& e : job.endpoints) {
      members.workers.push_back(e.name);
    }
  }
  return members;
}

}  // namespace meshcast
