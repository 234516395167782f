// WorkerMetrics: the worker's Prometheus metrics, exactly the worker table
// of docs/metrics.md, in a MetricsCollection (prometheus-cpp) that MetricsHttpServer
// serves at /metrics.
//
// The data plane reports as it goes (the CPU executor, and the GPU executor
// given CudaBackendOptions::metrics, live): StepStarted / StepEnded around
// every step (running steps), StepFinished for a step that succeeded
// (duration and achieved bandwidth by op, bytes sent and received by link
// and backend, derived from the step's relay chain), HopFinished for every
// hop into a local device (transfer duration by op and link), and
// ScopedBufferMemory while a job's tiles exist. WorkerService reports every
// program's outcome (TaskFinished) and, for device backends that do not
// report live (DeviceBackend::ReportsMetrics false), the finished steps from
// the JobResult.
//
// Which bytes count (per hop chain[p-1] -> chain[p] of a step, `bytes` each):
//   both devices on this worker   sent and received, link="intra",
//                                 backend="local" (a copy);
//   from this worker to another   sent, link="inter", backend = the remote
//                                 backend (gloo, nccl);
//   from another worker to here   received, link="inter", remote backend.
// A hop is timed by the worker that receives it, so summing over workers
// counts each hop once.
//
//   WorkerMetrics metrics(/*num_devices=*/4, "gloo");
//   metrics.StepFinished(program, step, 0.25);
//   std::string text = RenderMetrics(*metrics.collectable());
//
// Labels come from fixed sets (op names of the plan IR, intra/inter,
// local/gloo/nccl, device index < num_devices, ok/failed/aborted), never job
// ids or worker names (Prometheus adds the `worker` target label).
//
// Thread safety: every method is thread-safe.
#ifndef MESHCAST_WORKER_WORKER_METRICS_H_
#define MESHCAST_WORKER_WORKER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshcast/v1/plan.pb.h"
#include "util/metrics.h"
#include "worker/program.h"

namespace meshcast::worker {

class WorkerMetrics {
 public:
  enum class TaskResult { kOk, kFailed, kAborted };

  // `num_devices`: this worker's logical devices (labels "0".."n-1");
  // `remote_backend`: what carries transfers between workers ("gloo" for
  // CPU devices, "nccl" for GPUs).
  WorkerMetrics(int num_devices, std::string remote_backend);
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // What /metrics serves (MetricsHttpServer::Start).
  std::shared_ptr<prometheus::Collectable> collectable() const {
    return metrics_;
  }
  const std::string& remote_backend() const { return remote_backend_; }

  void StepStarted();
  void StepEnded();
  // A step of `program` that succeeded on this worker in `seconds`.
  void StepFinished(const ParsedProgram& program, const StepDesc& step,
                    double seconds);
  // The hop into chain position `position` (a device of this worker) landed
  // its last byte `seconds` after the step started here.
  void HopFinished(const ParsedProgram& program, const StepDesc& step,
                   int position, double seconds);
  // Adds (sign +1) or removes (sign -1) the tile bytes of `program` per
  // local device.
  void AddBufferMemory(const ParsedProgram& program, int sign);
  // One program ended (or was refused: kFailed); `elements_verified` and
  // `mismatches` come from its result (0 when there is none).
  void TaskFinished(TaskResult result, int64_t elements_verified,
                    int64_t mismatches);

  // "broadcast", "send_recv", ... (the plan IR's op without OP_, lower case).
  static std::string OpLabel(v1::Step::Op op);

 private:
  // The device label: global id host * G + local -> local.
  std::string DeviceLabel(int device) const;

  const int num_devices_;
  const std::string remote_backend_;
  const std::shared_ptr<MetricsCollection> metrics_;
  prometheus::Family<prometheus::Counter>& bytes_sent_;
  prometheus::Family<prometheus::Counter>& bytes_received_;
  prometheus::Family<prometheus::Histogram>& transfer_seconds_;
  prometheus::Family<prometheus::Histogram>& step_seconds_;
  prometheus::Family<prometheus::Gauge>& bandwidth_;
  prometheus::Counter& verified_elements_;
  prometheus::Counter& verification_failures_;
  prometheus::Family<prometheus::Gauge>& device_memory_;
  prometheus::Gauge& running_steps_;
  prometheus::Family<prometheus::Counter>& tasks_;
};

// Holds a program's tile bytes in the device-memory gauge for its lifetime.
// `metrics` may be null (then it does nothing).
class ScopedBufferMemory {
 public:
  ScopedBufferMemory(WorkerMetrics* metrics, const ParsedProgram& program)
      : metrics_(metrics), program_(program) {
    if (metrics_ != nullptr) metrics_->AddBufferMemory(program_, +1);
  }
  ~ScopedBufferMemory() {
    if (metrics_ != nullptr) metrics_->AddBufferMemory(program_, -1);
  }
  ScopedBufferMemory(const ScopedBufferMemory&) = delete;
  ScopedBufferMemory& operator=(const ScopedBufferMemory&) = delete;

 private:
  WorkerMetrics* const metrics_;
  const ParsedProgram& program_;
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_WORKER_METRICS_H_
