#include "worker/task.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "util/status_macros.h"
#include "worker/program.h"

namespace meshcast::worker {

Task::Task(v1::WorkerProgram program, KvStore* kv, TaskOptions options)
    : program_(std::move(program)),
      kv_(kv),
      options_(std::move(options)),
      executor_(options_.executor) {}

void Task::Abort(absl::string_view reason) {
  cancellation_.Cancel(reason);
  executor_.Abort(reason);
  absl::MutexLock lock(&mu_);
  if (comm_ != nullptr) comm_->Abort(reason);
  if (device_job_ != nullptr) device_job_->Abort(reason);
}

ExecutorTimings Task::timings() const {
  absl::MutexLock lock(&mu_);
  if (device_job_ != nullptr) return device_job_->timings();
  return executor_.timings();
}

absl::StatusOr<v1::JobResult> Task::RunOnDevices(
    const ParsedProgram& program) {
  DeviceJob* job = nullptr;
  {
    absl::MutexLock lock(&mu_);
    device_job_ = options_.device_backend->NewJob();
    job = device_job_.get();
  }
  // An Abort before device_job_ was set has set cancellation_ already.
  RETURN_IF_ERROR(cancellation_.status());
  return job->Run(program, kv_);
}

Task::ConnectInfo Task::connect_info() const {
  absl::MutexLock lock(&mu_);
  return connect_info_;
}

v1::TaskProgress Task::progress() const {
  // The task's own phase first: once the executor (or device job) says one,
  // that is newer, since the task hands over to it after connecting.
  const JobPhase own = phase_.load(std::memory_order_relaxed);
  StepProgress done;
  {
    absl::MutexLock lock(&mu_);
    done = device_job_ != nullptr ? device_job_->progress()
                                  : executor_.progress();
  }
  const JobPhase phase = done.phase != JobPhase::kUnknown ? done.phase : own;
  v1::TaskProgress progress;
  progress.set_job_id(program_.job_id());
  progress.set_steps_done(done.steps_done);
  progress.set_steps_total(steps_total_.load(std::memory_order_relaxed));
  progress.set_bytes_done(done.bytes_done);
  progress.set_bytes_total(bytes_total_.load(std::memory_order_relaxed));
  progress.set_phase(std::string(JobPhaseName(phase)));
  progress.set_verify_done(done.verify_done);
  progress.set_verify_total(done.verify_total);
  return progress;
}

absl::StatusOr<v1::JobResult> Task::Run() {
  phase_.store(JobPhase::kSetup, std::memory_order_relaxed);
  ASSIGN_OR_RETURN(const ParsedProgram program, ParseProgram(program_));
  int64_t bytes = 0;
  for (const StepDesc& step : program.steps) bytes += step.bytes;
  bytes_total_.store(bytes, std::memory_order_relaxed);
  steps_total_.store(static_cast<int>(program.steps.size()),
                     std::memory_order_relaxed);
  RETURN_IF_ERROR(cancellation_.status());
  if (options_.device_backend != nullptr) {
    // The device job connects inside Run, out of the task's sight: from
    // here the phase is whatever the job says, and none (the reader infers
    // one from the step counts) if it does not track it.
    phase_.store(JobPhase::kUnknown, std::memory_order_relaxed);
    return RunOnDevices(program);
  }
  // Before connecting: a worker that cannot hold the job fails at once, and
  // its peers are cancelled while they wait for it, before they allocate.
  RETURN_IF_ERROR(executor_.CheckMemory(program));
  std::unique_ptr<GlooCommunicator> comm;  // this job's own
  std::unique_ptr<CommunicatorLease> lease;  // or one from the cache
  Communicator* used = nullptr;
  if (program.world_size > 1) {
    if (kv_ == nullptr) {
      return absl::FailedPreconditionError(
          "the job spans workers but this worker has no rendezvous store");
    }
    auto cancelled = [this] { return cancellation_.cancelled(); };
    const absl::Time connect_start = absl::Now();
    // Until the executor starts and reports its own set-up.
    phase_.store(JobPhase::kConnect, std::memory_order_relaxed);
    if (options_.communicators != nullptr && !program.rank_workers.empty()) {
      CommunicatorRequest request;
      request.job_id = program.job_id;
      request.rank_workers = program.rank_workers;
      request.rank = program.rank;
      request.size = program.world_size;
      request.gloo = options_.gloo;
      absl::StatusOr<std::unique_ptr<CommunicatorLease>> acquired =
          options_.communicators->Acquire(*kv_, request, cancelled);
      if (acquired.ok()) lease = *std::move(acquired);
      if (cancellation_.cancelled() || !acquired.ok()) {
        // A lease granted just before a cancellation is dropped: the peers
        // drop theirs too when this job fails.
        options_.communicators->Release(std::move(lease), /*healthy=*/false);
        RETURN_IF_ERROR(cancellation_.status());
        return acquired.status();
      }
      used = &lease->comm();
    } else {
      GlooOptions gloo = options_.gloo;
      gloo.peer_names = program.rank_workers;
      absl::StatusOr<std::unique_ptr<GlooCommunicator>> created =
          GlooCommunicator::Create(
              *kv_, absl::StrCat("job/", program.job_id, "/gloo/"),
              program.rank, program.world_size, gloo, cancelled);
      // A cancelled rendezvous reports the reason it was cancelled for.
      RETURN_IF_ERROR(cancellation_.status());
      if (!created.ok()) return created.status();
      comm = *std::move(created);
      used = comm.get();
    }
    absl::MutexLock lock(&mu_);
    comm_ = used;
    connect_info_.how = lease != nullptr && lease->reused() ? "reused" : "new";
    connect_info_.seconds = absl::ToDoubleSeconds(absl::Now() - connect_start);
  }
  // An Abort before comm_ was set has cancelled the executor already.
  absl::StatusOr<v1::JobResult> result = executor_.Run(program, used);
  {
    absl::MutexLock lock(&mu_);
    comm_ = nullptr;
  }
  if (lease != nullptr) {
    // After comm_ was cleared an Abort no longer reaches the communicator,
    // so an abort that did shows in the cancellation (or aborted()).
    options_.communicators->Release(
        std::move(lease), result.ok() && !cancellation_.cancelled());
  }
  if (options_.closer != nullptr) options_.closer->Close(std::move(comm));
  return result;
}

}  // namespace meshcast::worker
