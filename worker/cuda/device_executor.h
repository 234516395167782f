// DeviceExecutor: runs one job's WorkerProgram on this worker's GPUs, the
// GPU counterpart of worker/executor.h; CudaBackend hands them to Task
// (worker/device_backend.h) for a worker started with --devices=cuda...
//
// Run():
//  1. maps the program's local devices, in ascending id order, onto the
//     logical devices of the DeviceSpec (cuda:0x4: all four on GPU 0) and
//     enables peer access between the GPUs involved;
//  2. builds and fills the tiles in GPU memory (DeviceBufferSet);
//  3. when the job spans workers, creates the job's NCCL communicators
//     through the rendezvous store (keys job/<job_id>/nccl/...), which also
//     serves as the start barrier;
//  4. enqueues the steps: lanes of streams (one stream per GPU per lane,
//     and one NCCL communicator per GPU per lane); step s goes to lane
//     s.id % lanes, each lane's thread enqueues its steps in (stage, id)
//     order with the kernel of its op from the GPU backend's table
//     (device_kernels.h: relay chains, every collective, local copies,
//     cuBLAS GEMM and elementwise compute), and a step waits on the GPU
//     (cudaStreamWaitEvent) for the steps it depends on. Independent steps
//     on different lanes overlap; every worker enqueues the steps of a lane
//     in the same order, which keeps NCCL's order-based matching
//     consistent and, since deps point to earlier (stage, id), cannot
//     deadlock (docs/gpu.md);
//  5. waits for every step's done event, polling NCCL's async errors, the
//     cancellation and a no-progress bound (op_timeout); on any failure it
//     aborts the NCCL communicators (ncclCommAbort), so kernels blocked on
//     a dead peer return, and drains the streams;
//  6. times each step with its CUDA events, verifies the destinations
//     (moved pattern data on the GPU, computed data on the host against the
//     CPU path's reference: DeviceBufferSet), finalizes the communicators.
//
// With CudaBackendOptions::metrics set, the job reports to WorkerMetrics as
// the CPU executor does: tile bytes while the tiles exist (the device-memory
// gauge), running steps (from enqueue until the step's done event has
// completed), and as soon as a step completes its duration (start to done
// events) and, for every hop into a device of this worker, when the hop's
// last byte landed (hop events, device_relay.h). WorkerService then does not
// count the steps again from the JobResult (DeviceBackend::ReportsMetrics).
//
//   DeviceExecutor executor(spec, options);
//   absl::StatusOr<v1::JobResult> result = executor.Run(program, &kv);
//
// Thread safety: Run once; Abort and timings from any thread.
#ifndef MESHCAST_WORKER_CUDA_DEVICE_EXECUTOR_H_
#define MESHCAST_WORKER_CUDA_DEVICE_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "meshcast/v1/job.pb.h"
#include "worker/cancellation.h"
#include "worker/device_backend.h"
#include "worker/device_spec.h"
#include "worker/kv_store.h"
#include "worker/nccl_communicator.h"
#include "worker/program.h"
#include "worker/worker_metrics.h"

namespace meshcast::worker::cuda {

struct CudaBackendOptions {
  // Relay chunk; every worker of a job must use the same.
  int64_t chunk_bytes = int64_t{4} << 20;
  // Stream lanes (and NCCL communicators per GPU when the job spans
  // workers). Keep lanes x GPUs streams under CUDA_DEVICE_MAX_CONNECTIONS
  // (8 by default) so lanes never share a hardware queue.
  int lanes = 4;
  // Bound on the NCCL bootstrap and communicator creation.
  absl::Duration rendezvous_timeout = absl::Seconds(60);
  // Bound on any wait without progress (no step finished, NCCL still
  // accepting a group, finalize).
  absl::Duration op_timeout = absl::Seconds(120);
  // Optional (null: no metrics); must outlive every job.
  WorkerMetrics* metrics = nullptr;
};

// Reports one step that finished on this worker's GPUs: StepFinished with
// `step_seconds`, then HopFinished for every chain position p with
// hop_seconds[p] >= 0 (a negative entry was not timed, e.g. a position on
// another worker). Host-only: no CUDA call.
void ReportDeviceStep(WorkerMetrics& metrics, const ParsedProgram& program,
                      const StepDesc& step, double step_seconds,
                      absl::Span<const double> hop_seconds);

class DeviceExecutor : public DeviceJob {
 public:
  // `spec` must be resolved (ResolveGpuDevices) and of kind "cuda".
  DeviceExecutor(DeviceSpec spec, CudaBackendOptions options);
  ~DeviceExecutor() override;

  absl::StatusOr<v1::JobResult> Run(const ParsedProgram& program,
                                    KvStore* kv) override;
  void Abort(absl::string_view reason) override;
  ExecutorTimings timings() const override;
  // Steps whose done event completed so far.
  StepProgress progress() const override;

 private:
  void Fail(const absl::Status& status);

  const DeviceSpec spec_;
  const CudaBackendOptions options_;
  Cancellation cancellation_;
  // Set by Abort (not by Fail): Run then answers CANCELLED rather than the
  // error the abort caused.
  std::atomic<bool> aborted_{false};
  mutable absl::Mutex mu_;
  NcclCommunicator* nccl_ ABSL_GUARDED_BY(mu_) = nullptr;
  ExecutorTimings timings_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> steps_done_{0};
  std::atomic<int64_t> bytes_done_{0};
};

// The DeviceBackend of a GPU worker: one DeviceExecutor per job.
class CudaBackend : public DeviceBackend {
 public:
  CudaBackend(DeviceSpec spec, CudaBackendOptions options)
      : spec_(std::move(spec)), options_(options) {}
  std::unique_ptr<DeviceJob> NewJob() override {
    return std::make_unique<DeviceExecutor>(spec_, options_);
  }
  bool ReportsMetrics() const override { return options_.metrics != nullptr; }
  // The total memory of each distinct GPU behind the logical devices.
  int64_t MemoryBytes() const override;

 private:
  const DeviceSpec spec_;
  const CudaBackendOptions options_;
};

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_DEVICE_EXECUTOR_H_
