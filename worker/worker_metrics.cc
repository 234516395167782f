#include "worker/worker_metrics.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#ifndef MESHCAST_VERSION
#define MESHCAST_VERSION "unknown"
#endif

namespace meshcast::worker {
namespace {

constexpr char kLocalBackend[] = "local";
constexpr char kIntra[] = "intra";
constexpr char kInter[] = "inter";

// A hop is a chunked pipeline or a memory copy: from 10 us to ~40 s.
const prometheus::Histogram::BucketBoundaries& DurationBuckets() {
  static const auto* const buckets =
      new prometheus::Histogram::BucketBoundaries(
          ExponentialBuckets(1e-5, 4, 12));
  return *buckets;
}

prometheus::Labels LinkLabels(const std::string& link,
                              const std::string& backend) {
  return {{"link", link}, {"backend", backend}};
}

}  // namespace

WorkerMetrics::WorkerMetrics(int num_devices, std::string remote_backend)
    : num_devices_(num_devices),
      remote_backend_(std::move(remote_backend)),
      metrics_(std::make_shared<MetricsCollection>()),
      bytes_sent_(metrics_->AddCounter("meshcast_worker_bytes_sent_total", "Bytes this worker sent, by link (intra: between "
"its own devices; inter: to another worker) and "
"backend.")),
      bytes_received_(metrics_->AddCounter("meshcast_worker_bytes_received_total", "Bytes this worker received, by link and "
"backend.")),
      transfer_seconds_(
          metrics_->AddHistogram("meshcast_worker_transfer_duration_seconds", "One hop of a step, timed by the receiving worker: from "
"the step's start there until the hop's last byte "
"landed.")),
      step_seconds_(metrics_->AddHistogram("meshcast_worker_step_duration_seconds", "One step of a plan on this worker, start to "
"end.")),
      bandwidth_(metrics_->AddGauge("meshcast_worker_achieved_bandwidth_bytes_per_" "second", "Slice bytes over seconds of the last step of "
"each op that finished here.")),
      verified_elements_(metrics_->AddCounter("meshcast_worker_verified_elements_total", "Destination elements checked against "
"the expected pattern.")
                             .Add({})),
      verification_failures_(
          metrics_->AddCounter("meshcast_worker_verification_failures_total", "Destination elements that did not match the expected "
"pattern.")
              .Add({})),
      device_memory_(metrics_->AddGauge("meshcast_worker_device_memory_bytes", "Bytes of job buffers (tiles) held per local "
"device index.")),
      running_steps_(metrics_->AddGauge("meshcast_worker_running_steps", "Plan steps in flight on this worker.")
                         .Add({})),
      tasks_(metrics_->AddCounter("meshcast_worker_tasks_total", "Programs (one job's part on this worker) by result: "
"ok, failed, aborted.")) {
  metrics_->AddGauge("meshcast_build_info", "Build identity of this process (always 1).")
      .Add({{"component", "worker"}, {"version", MESHCAST_VERSION}})
      .Set(1);
  // Every series exists from the start, so that increase() sees the first
  // increment and dashboards show 0 rather than nothing.
  for (int d = 0; d < num_devices_; ++d) {
    device_memory_.Add({{"device", absl::StrCat(d)}});
  }
  for (const char* result : {"ok", "failed", "aborted"}) {
    tasks_.Add({{"result", result}});
  }
}

std::string WorkerMetrics::OpLabel(v1::Step::Op op) {
  std::string name =
      v1::Step::Op_IsValid(op) ? v1::Step::Op_Name(op) : "OP_UNSPECIFIED";
  constexpr absl::string_view kPrefix = "OP_";
  if (absl::StartsWith(name, kPrefix)) name = name.substr(kPrefix.size());
  return absl::AsciiStrToLower(name);
}

std::string WorkerMetrics::DeviceLabel(int device) const {
  return absl::StrCat(num_devices_ > 0 ? device % num_devices_ : device);
}

void WorkerMetrics::StepStarted() { running_steps_.Increment(); }

void WorkerMetrics::StepEnded() { running_steps_.Decrement(); }

void WorkerMetrics::StepFinished(const ParsedProgram& program,
                                 const StepDesc& step, double seconds) {
  const std::string op = OpLabel(step.op);
  step_seconds_.Add({{"op", op}}, DurationBuckets()).Observe(seconds);
  if (seconds > 0 && step.bytes > 0) {
    bandwidth_.Add({{"op", op}}).Set(step.bytes / seconds);
  }
  const double bytes = static_cast<double>(step.bytes);
  // Per-link bytes are known for relays only (a hop per position, from its
  // parent); collectives and
  // compute report their step figures above.
  const bool relay =
      step.op == v1::Step::OP_BROADCAST || step.op == v1::Step::OP_SEND_RECV;
  for (size_t p = 1; relay && p < step.chain.size(); ++p) {
    const bool from_here =
        program.IsLocal(step.chain[RelayParentOf(step, static_cast<int>(p))]);
    const bool to_here = program.IsLocal(step.chain[p]);
    if (from_here && to_here) {
      bytes_sent_.Add(LinkLabels(kIntra, kLocalBackend)).Increment(bytes);
      bytes_received_.Add(LinkLabels(kIntra, kLocalBackend)).Increment(bytes);
    } else if (from_here) {
      bytes_sent_.Add(LinkLabels(kInter, remote_backend_)).Increment(bytes);
    } else if (to_here) {
      bytes_received_.Add(LinkLabels(kInter, remote_backend_))
          .Increment(bytes);
    }
  }
}

void WorkerMetrics::HopFinished(const ParsedProgram& program,
                                const StepDesc& step, int position,
                                double seconds) {
  if (position < 1 || position >= static_cast<int>(step.chain.size())) return;
  const bool intra = program.IsLocal(step.chain[RelayParentOf(step, position)]);
  transfer_seconds_
      .Add({{"op", OpLabel(step.op)}, {"link", intra ? kIntra : kInter}},
           DurationBuckets())
      .Observe(seconds);
}

void WorkerMetrics::AddBufferMemory(const ParsedProgram& program, int sign) {
  for (const BufferDesc& buffer : program.buffers) {
    if (buffer.tensor < 0 ||
        buffer.tensor >= static_cast<int>(program.tensors.size())) {
      continue;
    }
    const double bytes =
        static_cast<double>(NumElements(buffer.box) *
                            DTypeSize(program.tensors[buffer.tensor].dtype));
    device_memory_.Add({{"device", DeviceLabel(buffer.device)}})
        .Increment(sign * bytes);
  }
}

void WorkerMetrics::TaskFinished(TaskResult result, int64_t elements_verified,
                                 int64_t mismatches) {
  const char* label = result == TaskResult::kOk       ? "ok"
                      : result == TaskResult::kFailed ? "failed"
                                                      : "aborted";
  tasks_.Add({{"result", label}}).Increment();
  if (elements_verified > 0) verified_elements_.Increment(elements_verified);
  if (mismatches > 0) verification_failures_.Increment(mismatches);
}

}  // namespace meshcast::worker
