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
std::vector<double> DurationBuckets() {
  return ExponentialBuckets(1e-5, 4, 12);
}

}  // namespace

WorkerMetrics::WorkerMetrics(int num_devices, std::string remote_backend)
    : num_devices_(num_devices),
      remote_backend_(std::move(remote_backend)),
      bytes_sent_(registry_.AddCounter(
          "meshcast_worker_bytes_sent_total",
          "Bytes this worker sent, by link (intra: between its own devices; "
          "inter: to another worker) and backend.",
          {"link", "backend"})),
      bytes_received_(registry_.AddCounter(
          "meshcast_worker_bytes_received_total",
          "Bytes this worker received, by link and backend.",
          {"link", "backend"})),
      transfer_seconds_(registry_.AddHistogram(
          "meshcast_worker_transfer_duration_seconds",
          "One hop of a step, timed by the receiving worker: from the step's "
          "start there until the hop's last byte landed.",
          {"op", "link"}, DurationBuckets())),
      step_seconds_(registry_.AddHistogram(
          "meshcast_worker_step_duration_seconds",
          "One step of a plan on this worker, start to end.", {"op"},
          DurationBuckets())),
      bandwidth_(registry_.AddGauge(
          "meshcast_worker_achieved_bandwidth_bytes_per_second",
          "Slice bytes over seconds of the last step of each op that "
          "finished here.",
          {"op"})),
      verified_elements_(registry_
                             .AddCounter("meshcast_worker_verified_elements_"
                                         "total",
                                         "Destination elements checked "
                                         "against the expected pattern.")
                             .WithLabels({})),
      verification_failures_(
          registry_
              .AddCounter("meshcast_worker_verification_failures_total",
                          "Destination elements that did not match the "
                          "expected pattern.")
              .WithLabels({})),
      device_memory_(registry_.AddGauge(
          "meshcast_worker_device_memory_bytes",
          "Bytes of job buffers (tiles) held per local device index.",
          {"device"})),
      running_steps_(registry_
                         .AddGauge("meshcast_worker_running_steps",
                                   "Plan steps in flight on this worker.")
                         .WithLabels({})),
      tasks_(registry_.AddCounter(
          "meshcast_worker_tasks_total",
          "Programs (one job's part on this worker) by result: ok, failed, "
          "aborted.",
          {"result"})) {
  registry_
      .AddGauge("meshcast_build_info",
                "Build identity of this process (always 1).",
                {"component", "version"})
      .WithLabels({"worker", MESHCAST_VERSION})
      .Set(1);
  // Every series exists from the start, so that increase() sees the first
  // increment and dashboards show 0 rather than nothing.
  for (int d = 0; d < num_devices_; ++d) {
    device_memory_.WithLabels({absl::StrCat(d)});
  }
  for (const char* result : {"ok", "failed", "aborted"}) {
    tasks_.WithLabels({result});
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

void WorkerMetrics::StepStarted() { running_steps_.Add(1); }

void WorkerMetrics::StepEnded() { running_steps_.Add(-1); }

void WorkerMetrics::StepFinished(const ParsedProgram& program,
                                 const StepDesc& step, double seconds) {
  const std::string op = OpLabel(step.op);
  step_seconds_.WithLabels({op}).Observe(seconds);
  if (seconds > 0 && step.bytes > 0) {
    bandwidth_.WithLabels({op}).Set(step.bytes / seconds);
  }
  const double bytes = static_cast<double>(step.bytes);
  // Per-link bytes are known for relay chains only; collectives and
  // compute report their step figures above.
  const bool relay =
      step.op == v1::Step::OP_BROADCAST || step.op == v1::Step::OP_SEND_RECV;
  for (size_t p = 1; relay && p < step.chain.size(); ++p) {
    const bool from_here = program.IsLocal(step.chain[p - 1]);
    const bool to_here = program.IsLocal(step.chain[p]);
    if (from_here && to_here) {
      bytes_sent_.WithLabels({kIntra, kLocalBackend}).Increment(bytes);
      bytes_received_.WithLabels({kIntra, kLocalBackend}).Increment(bytes);
    } else if (from_here) {
      bytes_sent_.WithLabels({kInter, remote_backend_}).Increment(bytes);
    } else if (to_here) {
      bytes_received_.WithLabels({kInter, remote_backend_}).Increment(bytes);
    }
  }
}

void WorkerMetrics::HopFinished(const ParsedProgram& program,
                                const StepDesc& step, int position,
                                double seconds) {
  if (position < 1 || position >= static_cast<int>(step.chain.size())) return;
  const bool intra = program.IsLocal(step.chain[position - 1]);
  transfer_seconds_.WithLabels({OpLabel(step.op), intra ? kIntra : kInter})
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
    device_memory_.WithLabels({DeviceLabel(buffer.device)}).Add(sign * bytes);
  }
}

void WorkerMetrics::TaskFinished(TaskResult result, int64_t elements_verified,
                                 int64_t mismatches) {
  const char* label = result == TaskResult::kOk       ? "ok"
                      : result == TaskResult::kFailed ? "failed"
                                                      : "aborted";
  tasks_.WithLabels({label}).Increment();
  if (elements_verified > 0) verified_elements_.Increment(elements_verified);
  if (mismatches > 0) verification_failures_.Increment(mismatches);
}

}  // namespace meshcast::worker
