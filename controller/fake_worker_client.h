// FakeWorkerClient: a WorkerClient for tests that executes nothing. Per
// worker it can report success (with verification counts matching the
// program), fail, report mismatches, be unreachable, or block until the call
// is cancelled or the job aborted.
//
// Thread safety: thread-safe.
#ifndef MESHCAST_CONTROLLER_FAKE_WORKER_CLIENT_H_
#define MESHCAST_CONTROLLER_FAKE_WORKER_CLIENT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "controller/worker_client.h"

namespace meshcast {

class FakeWorkerClient : public WorkerClient {
 public:
  // kUnverified: succeeds but reports no verified elements. kForgeStep:
  // succeeds and also reports step kForgedStep, which is in no program.
  enum class Mode {
    kSucceed,
    kFail,
    kMismatch,
    kUnverified,
    kUnreachable,
    kBlock,
    kForgeStep
  };
  static constexpr int kForgedStep = 999999;

  // Mode for one worker; others use the default.
  void SetMode(const std::string& worker, Mode mode) ABSL_LOCKS_EXCLUDED(mu_);
  void SetDefaultMode(Mode mode) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<v1::RunTaskResponse> RunTask(const WorkerEndpoint& worker,
                                              const v1::WorkerProgram& program,
                                              absl::Time deadline,
                                              CallCanceller* canceller) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AbortTask(const WorkerEndpoint& worker,
                         const std::string& job_id, const std::string& reason,
                         absl::Time deadline) override ABSL_LOCKS_EXCLUDED(mu_);
  // What SetStatus gave for the worker (else just its name); counts calls.
  absl::StatusOr<v1::GetStatusResponse> GetStatus(
      const WorkerEndpoint& worker, absl::Time deadline) override
      ABSL_LOCKS_EXCLUDED(mu_);

  void SetStatus(const std::string& worker, v1::GetStatusResponse status)
      ABSL_LOCKS_EXCLUDED(mu_);
  int status_calls() const ABSL_LOCKS_EXCLUDED(mu_);
  // GetStatus calls to one worker.
  int status_calls(const std::string& worker) const ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<v1::WorkerProgram> programs() const ABSL_LOCKS_EXCLUDED(mu_);
  // (worker, job id) of every AbortTask.
  std::vector<std::pair<std::string, std::string>> aborts() const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until `n` calls are blocked (kBlock) at once; false on timeout.
  bool WaitForBlocked(int n, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  Mode default_mode_ ABSL_GUARDED_BY(mu_) = Mode::kSucceed;
  absl::flat_hash_map<std::string, Mode> modes_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::WorkerProgram> programs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> aborts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> aborted_jobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, v1::GetStatusResponse> statuses_
      ABSL_GUARDED_BY(mu_);
  int status_calls_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int> worker_status_calls_
      ABSL_GUARDED_BY(mu_);
  int blocked_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_FAKE_WORKER_CLIENT_H_
