#include "worker/progress_pusher.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "util/log.h"
#include "worker/worker_service.h"

namespace meshcast::worker {

// One ReportProgress call: what gRPC needs alive until the call completes.
//
// gRPC destroys the completion callback, and with it the last reference to
// the Call, only after the callback has returned and gRPC has dropped its own
// reference to the call. The Releaser is declared first so that it is
// destroyed last, after the context: once it has told the pusher, gRPC no
// longer touches anything of this call, and Stop may return.
struct ProgressPusher::Call {
  struct Releaser {
    ProgressPusher* pusher = nullptr;  // set once the call is issued
    ~Releaser() {
      if (pusher != nullptr) pusher->CallReleased();
    }
  } releaser;
  grpc::ClientContext context;
  v1::ReportProgressRequest request;
  v1::ReportProgressResponse response;
};

std::vector<v1::TaskProgress> RunningTaskProgress(WorkerService& service) {
  // GetStatus reads no context; the in-process call copies the running
  // tasks' counters under the service's lock, which no job holds for long.
  v1::GetStatusRequest request;
  v1::GetStatusResponse response;
  service.GetStatus(nullptr, &request, &response);
  return {response.tasks().begin(), response.tasks().end()};
}

std::string PhaseOf(const v1::TaskProgress& task) {
  if (!task.phase().empty()) return task.phase();
  if (task.steps_total() <= 0) return "setup";
  if (task.steps_done() >= task.steps_total()) return "verify";
  return "data";
}

ProgressPusher::ProgressPusher(std::shared_ptr<grpc::Channel> controller,
                               ProgressSource source,
                               ProgressPusherOptions options)
    : stub_(v1::Controller::NewStub(std::move(controller))),
      source_(std::move(source)),
      options_(std::move(options)) {}

ProgressPusher::~ProgressPusher() { Stop(); }

void ProgressPusher::Start() {
  absl::MutexLock lock(&mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Loop(); });
}

void ProgressPusher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    // A call not started yet is cancelled as it starts (gRPC keeps the
    // request), so none outlives Stop by more than its cancellation.
    if (in_flight_ != nullptr) in_flight_->context.TryCancel();
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  // The call's completion touches this object, and its teardown must not
  // race the caller's teardown of the channel or server: wait until gRPC
  // has released all of it.
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return live_calls_ == 0;
  };
  mu_.Await(absl::Condition(&idle));
}

void ProgressPusher::CallReleased() {
  absl::MutexLock lock(&mu_);
  --live_calls_;
}

int ProgressPusher::reports_sent() const {
  absl::MutexLock lock(&mu_);
  return sent_;
}

int ProgressPusher::reports_dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

int ProgressPusher::reports_failed() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

bool ProgressPusher::disabled() const {
  absl::MutexLock lock(&mu_);
  return disabled_;
}

void ProgressPusher::Loop() {
  // The phase of every task as last reported, by job id.
  absl::flat_hash_map<std::string, std::string> reported;
  absl::Time last_sent = absl::InfinitePast();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                           options_.sample_interval);
      if (stopping_ || disabled_) return;
    }
    std::vector<v1::TaskProgress> tasks = source_();
    if (tasks.empty()) {
      reported.clear();  // idle: nothing to say
      continue;
    }
    bool changed = tasks.size() != reported.size();
    for (v1::TaskProgress& task : tasks) {
      task.set_phase(PhaseOf(task));
      auto it = reported.find(task.job_id());
      if (it == reported.end() || it->second != task.phase()) changed = true;
    }
    const absl::Time now = absl::Now();
    if (!changed && now - last_sent < options_.push_interval) continue;
    absl::flat_hash_map<std::string, std::string> phases;
    for (const v1::TaskProgress& task : tasks) {
      phases[task.job_id()] = task.phase();
    }
    if (!Send(std::move(tasks))) continue;  // the change stays due
    reported = std::move(phases);
    last_sent = now;
  }
}

bool ProgressPusher::Send(std::vector<v1::TaskProgress> tasks) {
  auto call = std::make_shared<Call>();
  call->request.set_worker(options_.name);
  for (v1::TaskProgress& task : tasks) {
    *call->request.add_tasks() = std::move(task);
  }
  call->context.set_deadline(
      absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    if (in_flight_ != nullptr) {
      ++dropped_;
      return false;
    }
    in_flight_ = call;
    call->releaser.pusher = this;
    ++live_calls_;
    ++sent_;
  }
  stub_->async()->ReportProgress(
      &call->context, &call->request, &call->response,
      // `call` stays alive until the callback is destroyed.
      [this, call](grpc::Status status) { OnDone(status); });
  return true;
}

void ProgressPusher::OnDone(const grpc::Status& status) {
  // Released after the lock: the callback still holds the call, but a Call
  // must never be destroyed under mu_ (its Releaser takes it).
  std::shared_ptr<Call> done;
  absl::MutexLock lock(&mu_);
  done = std::move(in_flight_);
  if (status.ok()) {
    if (failing_) LogInfo("progress reports reach the controller again");
    failing_ = false;
    return;
  }
  ++failed_;
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    disabled_ = true;
    LogInfo("the controller does not take progress reports (ReportProgress "
            "unimplemented); it polls this worker instead");
    return;
  }
  if (!failing_ && !stopping_) {
    LogWarning("progress report failed (", status.error_message(),
               "); dropping reports until the controller answers");
  }
  failing_ = true;
}

}  // namespace meshcast::worker
