// JobStore: persistence of jobs and their events in an embedded SQLite
// database (the controller's --db file), so that the job history survives a
// controller restart.
//
// Tables: `jobs` (id, name, state, message, timestamps, progress, and the
// spec, plan, result and placed meshes as serialized protos), `events`
// (every state change and progress note of every job, in order), `hosts`
// (the host index of every worker name, so that device ids survive worker
// and controller restarts; worker_registry.h) and `job_workers` (the
// workers each started job ran on, so that a restarted controller can tell
// them to abort). The plan is written only when asked (PlanWrite::kWrite):
// a job's plan is set once, and rewriting it with every state change made
// a long queue slow. A database
// of an older controller is upgraded in place when opened (schema version
// in PRAGMA user_version).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<JobStore> store, JobStore::Open(path));
//   ASSIGN_OR_RETURN(std::vector<std::string> failed,
//                    store->FailUnfinishedJobs("controller restarted", now));
//   std::string id = store->AllocateJobId();        // "job-000042"
//   RETURN_IF_ERROR(store->SaveJob(job));            // insert or update
//   RETURN_IF_ERROR(store->AppendEvent(event));
//
// Restart policy (RecoverAfterRestart): a job that was PLANNING or RUNNING
// when the controller stopped is marked FAILED with "controller restarted",
// not re-run, and the caller tells its workers (job_workers) to abort. The
// workers' data-plane state for it (buffers, communicators, a transfer half
// done) belongs to a dead controller's session, and a job may have side
// effects outside meshcast (a framework waiting on the tensor), so
// re-running it silently could do the work twice or hand stale data to
// someone; the user resubmits instead. A QUEUED job never touched a worker:
// it is returned to be queued again. FailUnfinishedJobs fails all three.
//
// Thread safety: thread-safe (one connection behind a mutex).
#ifndef MESHCAST_CONTROLLER_JOB_STORE_H_
#define MESHCAST_CONTROLLER_JOB_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "meshcast/v1/job.pb.h"

struct sqlite3;

namespace meshcast {

// A worker name's host index (worker_registry.h), as persisted.
struct StoredHost {
  std::string name;
  int host_index = -1;
  int num_devices = 0;
};

class JobStore {
 public:
  enum class PlanWrite { kKeep, kWrite };
  struct JobWorker {
    std::string name;
    std::string address;
  };
  // What a controller finds at start-up (RecoverAfterRestart).
  struct Recovery {
    struct FailedJob {
      std::string id;
      std::vector<JobWorker> workers;  // to be told to abort it
    };
    std::vector<FailedJob> failed;  // were PLANNING or RUNNING
    std::vector<v1::Job> queued;    // oldest first, without plans
  };
  // Writes since Open, for tests and metrics.
  struct WriteCounts {
    int64_t job_writes = 0;
    int64_t plan_writes = 0;
    int64_t event_writes = 0;
  };

  // Opens or creates the database at `path` (":memory:" for a private
  // in-memory one). Errors name the path.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(
      const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // A fresh id ("job-" and a zero-padded counter), never one the database
  // has already seen.
  std::string AllocateJobId() ABSL_LOCKS_EXCLUDED(mu_);

  // Inserts or replaces the job with `job.id()`, which must come from
  // AllocateJobId. With kKeep the stored plan stays as it is (an inserted
  // row gets none) and `job.plan()` is ignored.
  absl::Status SaveJob(const v1::Job& job,
                       PlanWrite plan_write = PlanWrite::kWrite)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AppendEvent(const v1::JobEvent& event) ABSL_LOCKS_EXCLUDED(mu_);

  // NOT_FOUND naming the id when it does not exist.
  absl::StatusOr<v1::Job> GetJob(absl::string_view id) ABSL_LOCKS_EXCLUDED(mu_);
  // Newest first; limit <= 0 means all. With `include_plans` false the plan
  // and per-step results are left out (lists stay small).
  absl::StatusOr<std::vector<v1::Job>> ListJobs(int limit, bool include_plans)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Oldest first.
  absl::StatusOr<std::vector<v1::JobEvent>> ListEvents(absl::string_view id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Number of jobs in each state (states without jobs are absent); for the
  // controller's metrics.
  absl::StatusOr<std::map<v1::JobState, int64_t>> CountJobsByState()
      ABSL_LOCKS_EXCLUDED(mu_);

  // Marks every QUEUED/PLANNING/RUNNING job FAILED with `message` (and an
  // event); returns their ids. See the restart policy above.
  absl::StatusOr<std::vector<std::string>> FailUnfinishedJobs(
      absl::string_view message, double now_unix) ABSL_LOCKS_EXCLUDED(mu_);
  // Fails PLANNING and RUNNING jobs with `message` (an event each) and
  // returns them with their workers, and the QUEUED jobs to queue again.
  absl::StatusOr<Recovery> RecoverAfterRestart(absl::string_view message,
                                               double now_unix)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The workers a started job runs on (added to what is stored).
  absl::Status SaveJobWorkers(absl::string_view job_id,
                              const std::vector<JobWorker>& workers)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::vector<JobWorker>> ListJobWorkers(
      absl::string_view job_id) ABSL_LOCKS_EXCLUDED(mu_);

  // Host indices of worker names (worker_registry.h). SaveHost replaces
  // the name's row and any other row with the same index.
  absl::Status SaveHost(const StoredHost& host) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status DeleteHost(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);
  // By host index.
  absl::StatusOr<std::vector<StoredHost>> LoadHosts() ABSL_LOCKS_EXCLUDED(mu_);

  // The cluster's latest link calibration (a calibrate job's fit, kept in
  // Topology.calibration of the message; its other fields unused): one
  // row, replaced by each save. LoadCalibration gives an empty message
  // when none was saved; DATA_LOSS when the row does not parse.
  absl::Status SaveCalibration(const v1::Topology& calibration)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<v1::Topology> LoadCalibration() ABSL_LOCKS_EXCLUDED(mu_);

  WriteCounts write_counts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  JobStore(sqlite3* db, int64_t next_number)
      : db_(db), next_number_(next_number) {}
  absl::Status AppendEventLocked(const v1::JobEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<std::string>> FailJobsLocked(
      const std::vector<v1::JobState>& states, absl::string_view message,
      double now_unix) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<JobWorker>> ListJobWorkersLocked(
      absl::string_view job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  sqlite3* const db_;  // guarded by mu_ (the handle itself never changes)
  int64_t next_number_ ABSL_GUARDED_BY(mu_);
  WriteCounts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_JOB_STORE_H_
