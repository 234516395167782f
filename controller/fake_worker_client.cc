#include "controller/fake_worker_client.h"

#include <algorithm>
#include <vector>

#include "absl/time/clock.h"

namespace meshcast {
namespace {

int64_t BoxElements(const v1::Buffer& buffer) {
  int64_t n = 1;
  for (const v1::Interval& i : buffer.box()) n *= i.end() - i.begin();
  return n;
}

}  // namespace

void FakeWorkerClient::SetMode(const std::string& worker, Mode mode) {
  absl::MutexLock lock(&mu_);
  modes_[worker] = mode;
}

void FakeWorkerClient::SetDefaultMode(Mode mode) {
  absl::MutexLock lock(&mu_);
  default_mode_ = mode;
}

absl::StatusOr<v1::RunTaskResponse> FakeWorkerClient::RunTask(
    const WorkerEndpoint& worker, const v1::WorkerProgram& program,
    absl::Time deadline, CallCanceller* canceller) {
  Mode mode;
  {
    absl::MutexLock lock(&mu_);
    programs_.push_back(program);
    auto it = modes_.find(worker.name);
    mode = it != modes_.end() ? it->second : default_mode_;
  }
  v1::RunTaskResponse response;
  switch (mode) {
    case Mode::kUnreachable:
      return absl::UnavailableError("connection refused");
    case Mode::kFail:
      response.set_ok(false);
      response.set_error("injected failure");
      return response;
    case Mode::kBlock: {
      // Blocks until our canceller fires or the job is aborted; bounded so
      // that a broken test cannot hang.
      bool cancelled = false;
      const int hook = canceller->Add([this, &cancelled] {
        absl::MutexLock lock(&mu_);
        cancelled = true;
      });
      {
        absl::MutexLock lock(&mu_);
        ++blocked_;
        const std::string job = program.job_id();
        auto done = [&]() {
          mu_.AssertHeld();
          return cancelled || aborted_jobs_.contains(job);
        };
        mu_.AwaitWithDeadline(
            absl::Condition(&done),
            std::min(deadline, absl::Now() + absl::Seconds(30)));
        --blocked_;
      }
      canceller->Remove(hook);
      return absl::CancelledError("call cancelled");
    }
    case Mode::kSucceed:
    case Mode::kMismatch:
    case Mode::kUnverified:
    case Mode::kForgeStep:
      break;
  }
  response.set_ok(true);
  v1::JobResult* result = response.mutable_result();
  result->set_seconds(0.001 * (program.rank() + 1));
  int64_t verified = 0;
  // A program also describes other workers' buffers (the reference closure,
  // program_builder.h); a worker verifies only those on its own devices.
  const std::vector<int> local(program.local_devices().begin(),
                               program.local_devices().end());
  for (const v1::Buffer& buffer : program.plan().buffers()) {
    const bool mine =
        std::find(local.begin(), local.end(), buffer.device()) != local.end();
    if (mine && buffer.role() == v1::Buffer::ROLE_DESTINATION) {
      verified += BoxElements(buffer);
    }
  }
  // As a worker does: nothing verified with verification off.
  if (program.verify() == v1::VERIFY_MODE_OFF) verified = 0;
  result->set_elements_verified(mode == Mode::kUnverified ? 0 : verified);
  // Mismatches only where something was verified (result_check.h).
  result->set_mismatches(mode == Mode::kMismatch && verified > 0 ? 3 : 0);
  for (const v1::Step& step : program.plan().steps()) {
    v1::StepResult* s = result->add_steps();
    s->set_step(step.id());
    s->set_bytes(step.bytes());
    // At 1 GB/s: plausible for any topology (result_check.h).
    s->set_seconds(std::max(0.0005, step.bytes() / 1e9));
  }
  if (mode == Mode::kForgeStep) {
    // A step that is in no program.
    v1::StepResult* s = result->add_steps();
    s->set_step(kForgedStep);
    s->set_seconds(0.001);
  }
  return response;
}

absl::Status FakeWorkerClient::AbortTask(const WorkerEndpoint& worker,
                                         const std::string& job_id,
                                         const std::string& reason,
                                         absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  aborts_.emplace_back(worker.name, job_id);
  aborted_jobs_.insert(job_id);
  return absl::OkStatus();
}

absl::StatusOr<v1::GetStatusResponse> FakeWorkerClient::GetStatus(
    const WorkerEndpoint& worker, absl::Time) {
  absl::MutexLock lock(&mu_);
  ++status_calls_;
  ++worker_status_calls_[worker.name];
  auto it = statuses_.find(worker.name);
  if (it != statuses_.end()) return it->second;
  v1::GetStatusResponse response;
  response.set_name(worker.name);
  return response;
}

void FakeWorkerClient::SetStatus(const std::string& worker,
                                 v1::GetStatusResponse status) {
  absl::MutexLock lock(&mu_);
  statuses_[worker] = std::move(status);
}

int FakeWorkerClient::status_calls() const {
  absl::MutexLock lock(&mu_);
  return status_calls_;
}

int FakeWorkerClient::status_calls(const std::string& worker) const {
  absl::MutexLock lock(&mu_);
  auto it = worker_status_calls_.find(worker);
  return it == worker_status_calls_.end() ? 0 : it->second;
}

std::vector<v1::WorkerProgram> FakeWorkerClient::programs() const {
  absl::MutexLock lock(&mu_);
  return programs_;
}

std::vector<std::pair<std::string, std::string>> FakeWorkerClient::aborts()
    const {
  absl::MutexLock lock(&mu_);
  return aborts_;
}

bool FakeWorkerClient::WaitForBlocked(int n, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto enough = [&]() {
    mu_.AssertHeld();
    return blocked_ >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

}  // namespace meshcast
