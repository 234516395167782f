// Executor: runs one job's WorkerProgram on this worker's CPU devices.
//
// This is the engine's scheduler: Run() builds and fills the tiles
// (BufferSet), waits until every worker of the job has done so (a barrier,
// so that step timings measure data movement rather than a peer's set-up),
// runs the step DAG — each step as soon as its deps in the program have
// finished, lowest (stage, id) first — with the kernel that the op-kernel
// registry (engine/kernel_registry.h) has for (op, "cpu"), verifies the
// destinations (ParsedProgram::verify), and returns this worker's JobResult:
// per-step bytes, seconds and start/end relative to the start barrier (the
// timeline), elements verified, mismatches, largest error of computed
// values. An op without a CPU kernel fails the job UNIMPLEMENTED before any
// step starts. The first failing step aborts the others and the
// communicator, so peers fail fast too.
//
//   Executor executor(options);
//   absl::StatusOr<v1::JobResult> result = executor.Run(program, comm);
//   // from another thread: executor.Abort("job cancelled");
//
// Before allocating anything, Run checks that the program's tiles and relay
// staging fit in the host's available memory (host_memory.h) and fails with
// RESOURCE_EXHAUSTED if not; an allocation that fails anyway is
// RESOURCE_EXHAUSTED too. Abort is prompt in every phase: fill, pre-copy,
// local copies and verification check it every `slicing.bytes` of work,
// waits on peers return when the communicator is aborted, and the tiles
// are freed as Run returns.
//
// Steps run on a pool of threads that grows on demand and is reused: a
// dispatched step takes an idle thread, or a new one when every thread is
// busy, so the pool holds as many threads as steps ever ran at once on this
// worker — never more than the program's DAG width (steps running together
// are ready together, so none depends on another: an antichain of the DAG)
// nor than max_concurrent_steps — and a chain of 10,000 steps runs on one
// thread. Why a ready step never waits for a thread: a step blocked on a
// peer must never keep another step that the peer waits for from starting,
// or two workers could wait on each other; a fixed pool smaller than the
// width could be filled with such blocked steps. Bounded by the width, the
// pool never is, so no cycle of waits can form through it (only through the
// cap, as before: max_concurrent_steps must exceed the steps that can be
// ready at once on any worker).
// progress() tells status polls what Run is doing (JobPhase): kSetup while
// it checks memory, allocates and fills the tiles, kConnect while it waits
// in the start barrier, kData while steps run, kVerify while it checks the
// destinations, with the elements checked so far out of those to check
// (updated per verified slice; a sampled tile counts its sample).
// Thread safety: Run once; Abort from any thread, any time.
#ifndef MESHCAST_WORKER_EXECUTOR_H_
#define MESHCAST_WORKER_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "meshcast/v1/job.pb.h"
#include "worker/buffer_set.h"
#include "worker/cancellation.h"
#include "worker/communicator.h"
#include "worker/host_memory.h"
#include "worker/program.h"
#include "worker/relay_step.h"
#include "worker/user_buffers.h"
#include "worker/worker_metrics.h"

namespace meshcast::worker {

struct ExecutorOptions {
  RelayOptions relay;
  // Steps running at once; must exceed the number of steps that can be
  // simultaneously ready on any worker (see above).
  int max_concurrent_steps = 1024;
  // Threads that fill and verify tiles.
  int fill_threads = 4;
  // How often fill, copies and verification check for an abort.
  WorkSlicing slicing;
  // What the host can give the job's tiles; null: MemAvailable of
  // /proc/meminfo. Tests inject a small figure.
  AvailableMemoryFn available_memory;
  // Optional: steps, hops and tile memory are reported here as they happen.
  WorkerMetrics* metrics = nullptr;
  // Buffers local processes registered (user_buffers.h), for programs that
  // name them; and this worker's device count, which maps a global device
  // id to the local index they are registered under.
  std::shared_ptr<const UserBuffers> user_buffers;
  int devices_per_worker = 0;
  // Where steps stage data (relay slots, collective buffers, packed compute
  // operands); it outlives the executor so that its cached pages serve the
  // worker's later jobs too. Null: StagingPool::Default(), the worker-wide
  // pool. Tests inject their own to watch it.
  StagingPool* staging = nullptr;
};

// What Run measured besides the JobResult (for logs).
struct ExecutorTimings {
  double setup_seconds = 0;    // allocate, fill, pre-copy
  double barrier_seconds = 0;  // waiting for the other workers' set-up
  double steps_seconds = 0;    // the DAG
  double verify_seconds = 0;   // destination checks
  int64_t tile_bytes = 0;      // memory held by the tiles
  std::string first_mismatch;
};

// What a job is doing now (TaskProgress.phase). The order a job goes
// through them: kSetup, kConnect, kData, kVerify; a Task that connects
// before the executor runs reports kSetup, kConnect, then the executor's
// own kSetup (tiles) and kConnect (start barrier) again.
enum class JobPhase {
  kUnknown,  // not said (before Run; a device job that does not track it)
  kSetup,    // parse, memory check, allocate and fill tiles
  kConnect,  // communicator rendezvous or agreement, start barrier
  kData,     // steps run
  kVerify,   // destinations checked
};

// "setup", "connect", "data", "verify"; "" for kUnknown.
absl::string_view JobPhaseName(JobPhase phase);

// How far a program is: steps finished so far and their bytes, the phase,
// and verification's counters (destination elements checked so far and to
// check; 0 until verification starts, and with verification off).
struct StepProgress {
  int steps_done = 0;
  int64_t bytes_done = 0;
  JobPhase phase = JobPhase::kUnknown;
  int64_t verify_done = 0;
  int64_t verify_total = 0;
};

class Executor {
 public:
  explicit Executor(ExecutorOptions options) : options_(options) {}

  // Blocks until the program finished, failed or was aborted. `comm` may be
  // null when no step crosses workers; it must outlive Run. Mismatches are
  // reported in the result, not as an error.
  absl::StatusOr<v1::JobResult> Run(const ParsedProgram& program,
                                    Communicator* comm);

  // Makes Run return CANCELLED(reason) promptly, aborting the communicator.
  void Abort(absl::string_view reason);

  // RESOURCE_EXHAUSTED if the program's tiles and staging do not fit in the
  // host's available memory (CheckHostMemory), even after the staging pool
  // gave back what it had cached; Run checks it first thing.
  // Callers that connect to peers before Run (Task) call it before
  // connecting too, so a job that cannot fit fails before its peers wait.
  absl::Status CheckMemory(const ParsedProgram& program) const;

  ExecutorTimings timings() const;
  // Threads the step pool held at its peak (after Run; for tests).
  int peak_threads() const { return peak_threads_; }
  // Steps that succeeded so far, the phase (kUnknown before Run; it stays
  // at the last one reached once Run returned) and the verify counters;
  // any thread, any time (for status polls).
  StepProgress progress() const;

 private:
  // Exchanges a token with every other rank.
  absl::Status Barrier(Communicator& comm);
  absl::Status RunSteps(const ParsedProgram& program,
                        const RelayEnvironment& env, absl::Time steps_start,
                        v1::JobResult& result);
  void Fail(const absl::Status& status);
  AvailableMemoryFn AvailableMemory() const;
  HostMemoryNeed NeedOf(const ParsedProgram& program) const;
  StagingPool& staging_pool() const {
    return options_.staging != nullptr ? *options_.staging
                                       : StagingPool::Default();
  }

  const ExecutorOptions options_;
  Cancellation cancellation_;
  mutable absl::Mutex mu_;
  Communicator* comm_ ABSL_GUARDED_BY(mu_) = nullptr;
  ExecutorTimings timings_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> steps_done_{0};
  std::atomic<int64_t> bytes_done_{0};
  std::atomic<JobPhase> phase_{JobPhase::kUnknown};
  VerificationProgress verify_;
  int peak_threads_ = 0;
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_EXECUTOR_H_
