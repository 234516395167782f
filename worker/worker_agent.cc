#include "worker/worker_agent.h"

#include <cstdint>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/client_context.h"
#include "util/bytes_text.h"
#include "util/log.h"

namespace meshcast::worker {
namespace {

// 64 random bits as hex: tells this run of the process from the next.
WorkerAgentOptions WithIncarnation(WorkerAgentOptions options) {
  if (options.incarnation.empty()) {
    std::random_device device;
    const uint64_t bits = (static_cast<uint64_t>(device()) << 32) ^ device();
    options.incarnation = absl::StrFormat("%016x", bits);
  }
  return options;
}

}  // namespace

WorkerAgent::WorkerAgent(std::shared_ptr<grpc::Channel> controller,
                         WorkerAgentOptions options)
    : stub_(v1::Controller::NewStub(std::move(controller))),
      options_(WithIncarnation(std::move(options))) {
  if (options_.heartbeat_interval > absl::ZeroDuration()) {
    interval_ = options_.heartbeat_interval;
  }
}

WorkerAgent::~WorkerAgent() { Stop(); }

void WorkerAgent::Start() {
  absl::MutexLock lock(&mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Loop(); });
}

void WorkerAgent::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool WorkerAgent::registered() const {
  absl::MutexLock lock(&mu_);
  return registered_;
}

int WorkerAgent::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

bool WorkerAgent::WaitUntilRegistered(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&registered_), timeout);
  return registered_;
}

void WorkerAgent::Loop() {
  while (true) {
    bool is_registered;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      is_registered = registered_;
    }
    const bool ok = is_registered ? Heartbeat() : Register();
    absl::MutexLock lock(&mu_);
    if (!ok) registered_ = false;
    // A lost registration is retried at once if the controller answered
    // (known=false); otherwise after one interval.
    const bool retry_now = !ok && !unreachable_logged_ && is_registered;
    if (!retry_now) {
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_);
    }
  }
}

bool WorkerAgent::Register() {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  v1::RegisterWorkerRequest request;
  v1::WorkerInfo* info = request.mutable_worker();
  info->set_name(options_.name);
  info->set_address(options_.address);
  info->set_num_devices(options_.num_devices);
  info->set_device_kind(options_.device_kind);
  info->set_memory_bytes(options_.memory_bytes);
  info->set_incarnation(options_.incarnation);
  info->set_probed_host_copy_bytes_per_second(
      options_.probed_host_copy_bytes_per_second);
  info->set_probed_device_flops(options_.probed_device_flops);
  info->set_machine_id(options_.machine_id);
  info->set_cpu_cores(options_.cpu_cores);
  info->set_data_address(options_.data_address);
  v1::RegisterWorkerResponse response;
  grpc::Status status = stub_->RegisterWorker(&context, request, &response);
  if (!status.ok()) {
    if (!unreachable_logged_) {
      LogWarning("cannot register with the controller (",
                 status.error_message(), "); retrying");
      unreachable_logged_ = true;
    }
    return false;
  }
  unreachable_logged_ = false;
  absl::MutexLock lock(&mu_);
  if (options_.heartbeat_interval <= absl::ZeroDuration()) {
    interval_ = response.heartbeat_seconds() > 0
                    ? absl::Seconds(response.heartbeat_seconds())
                    : absl::Seconds(1);
  }
  registered_ = true;
  ++registrations_;
  LogInfo(absl::StrFormat(
      "registered as %s (host index %d, %d %s devices, %s of memory, "
      "service %s, data %s, heartbeat every %s)",
      options_.name, response.host_index(), options_.num_devices,
      options_.device_kind,
      options_.memory_bytes > 0 ? FormatBytes(options_.memory_bytes)
                                : "unknown amount",
      options_.address, options_.data_address,
      absl::FormatDuration(interval_)));
  return true;
}

bool WorkerAgent::Heartbeat() {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  v1::HeartbeatRequest request;
  request.set_name(options_.name);
  v1::HeartbeatResponse response;
  grpc::Status status = stub_->Heartbeat(&context, request, &response);
  if (!status.ok()) {
    if (!unreachable_logged_) {
      LogWarning("controller unreachable (", status.error_message(),
                 "); will register again when it answers");
      unreachable_logged_ = true;
    }
    return false;
  }
  if (!response.known()) {
    LogWarning(
        "controller does not know this worker (restarted or lease expired); "
        "registering again");
    return false;
  }
  return true;
}

}  // namespace meshcast::worker
