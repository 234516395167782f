// WorkerClient: how the job manager talks to workers (Worker.RunTask and
// Worker.AbortTask), behind an interface so that the job logic is tested
// without RPC. GrpcWorkerClient (grpc_worker_client.h) is the real one.
//
// A RunTask call blocks until the worker answers, the deadline passes, or the
// call's CallCanceller is cancelled (the job was cancelled or one of its
// workers was lost), whichever comes first.
//
//   CallCanceller canceller;
//   std::thread t([&] { result = client->RunTask(endpoint, program,
//                                                deadline, &canceller); });
//   canceller.Cancel();  // from another thread: RunTask returns soon
//
// Thread safety: implementations must allow concurrent calls. CallCanceller
// is thread-safe.
#ifndef MESHCAST_CONTROLLER_WORKER_CLIENT_H_
#define MESHCAST_CONTROLLER_WORKER_CLIENT_H_

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "meshcast/v1/worker.pb.h"

namespace meshcast {

// Cancels in-flight calls: each call registers a hook (e.g. the gRPC
// context's TryCancel) for the duration of the call.
class CallCanceller {
 public:
  // Runs every registered hook once; hooks registered later run at once.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_);

  // Registers `hook`; returns an id for Remove. If already cancelled, runs
  // the hook immediately (and still returns an id). Hooks must be quick and
  // must not call the canceller (they run under its lock). After Remove
  // returns, the hook is not running and never will.
  int Add(std::function<void()> hook) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(int id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<int, std::function<void()>> hooks_ ABSL_GUARDED_BY(mu_);
};

// Where a worker is reached.
struct WorkerEndpoint {
  std::string name;
  std::string address;  // host:port of its Worker service
};

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;

  // Runs `program` on the worker. An error status means the call itself
  // failed (unreachable, deadline, cancelled); a worker-side failure comes
  // back as a response with ok = false.
  virtual absl::StatusOr<v1::RunTaskResponse> RunTask(
      const WorkerEndpoint& worker, const v1::WorkerProgram& program,
      absl::Time deadline, CallCanceller* canceller) = 0;

  // Asks the worker to stop the job's task; best effort, short deadline.
  virtual absl::Status AbortTask(const WorkerEndpoint& worker,
                                 const std::string& job_id,
                                 const std::string& reason,
                                 absl::Time deadline) = 0;

  // The worker's running jobs and how far each is (steps done).
  virtual absl::StatusOr<v1::GetStatusResponse> GetStatus(
      const WorkerEndpoint& worker, absl::Time deadline) = 0;
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_WORKER_CLIENT_H_
