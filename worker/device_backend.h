// DeviceBackend: how a worker runs jobs on devices other than its virtual CPU
// devices, i.e. on GPUs (issue 6, docs/gpu.md).
//
// The CPU path (Executor over TileBuffers, Gloo between workers) needs no
// backend. A worker started with --devices=cuda... gets one from
// worker/cuda/cuda_backend.h; the CPU library cannot link the CUDA code,
// hence this interface, which Task calls when TaskOptions carries a backend:
//
//   std::unique_ptr<DeviceJob> job = backend.NewJob();
//   absl::StatusOr<v1::JobResult> result = job->Run(program, kv);  // blocks
//   job->Abort("cancelled");  // from any thread
//
// A job does what Executor does for CPU devices (docs/dataplane.md): builds
// and fills its tiles, bootstraps its communicator through `kv` when the job
// spans workers, runs the step DAG, verifies every destination element and
// returns this worker's JobResult.
// Thread safety: a backend is shared by concurrent tasks (NewJob is
// thread-safe); a job is Run once, Abort and timings from any thread.
#ifndef MESHCAST_WORKER_DEVICE_BACKEND_H_
#define MESHCAST_WORKER_DEVICE_BACKEND_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshcast/v1/job.pb.h"
#include "worker/executor.h"
#include "worker/kv_store.h"
#include "worker/program.h"

namespace meshcast::worker {

class DeviceJob {
 public:
  virtual ~DeviceJob() = default;

  // Blocks until the program finished, failed or was aborted. `kv` may be
  // null when the program stays on this worker (world_size 1). Mismatches
  // are reported in the result, not as an error.
  virtual absl::StatusOr<v1::JobResult> Run(const ParsedProgram& program,
                                            KvStore* kv) = 0;

  // Makes Run return CANCELLED(reason) promptly; idempotent.
  virtual void Abort(absl::string_view reason) = 0;

  // Valid after Run returned a result.
  virtual ExecutorTimings timings() const = 0;

  // Steps that succeeded so far; any thread, any time. A backend that does
  // not track them reports none (the controller then shows progress per
  // worker only).
  virtual StepProgress progress() const { return {}; }
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::unique_ptr<DeviceJob> NewJob() = 0;

  // True if its jobs report steps, hops and tile memory to WorkerMetrics
  // themselves while they run (the CUDA backend given a metrics pointer).
  // WorkerService records the finished steps of a backend that does not,
  // from each JobResult, and must not count them twice for one that does.
  virtual bool ReportsMetrics() const { return false; }

  // Memory a job's tiles may use on this backend's devices (the sum of its
  // GPUs' memory), reported to the controller for its admission check
  // (WorkerInfo.memory_bytes); 0 when unknown.
  virtual int64_t MemoryBytes() const { return 0; }
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_DEVICE_BACKEND_H_
