#include "controller/worker_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "controller/log.h"

namespace meshcast {
namespace {

constexpr int kMaxDevicesPerWorker = 4096;
constexpr size_t kMaxNameLength = 256;

}  // namespace

WorkerRegistry::WorkerRegistry(Options options, Clock* clock)
    : options_(options), clock_(clock) {}

WorkerRegistry::~WorkerRegistry() { StopSweeper(); }

void WorkerRegistry::AddListener(Listener listener) {
  absl::MutexLock lock(&mu_);
  listeners_.push_back(std::move(listener));
}

absl::StatusOr<WorkerRecord> WorkerRegistry::Register(
    const WorkerRecord& info) {
  if (info.name.empty() || info.name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker.name must be 1..", kMaxNameLength, " characters"));
  }
  if (info.address.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker.address is empty for worker ", info.name,
                     "; give the host:port of its Worker service"));
  }
  if (info.memory_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker.memory_bytes of worker ", info.name, " is ",
                     info.memory_bytes, "; must be >= 0 (0 = not reported)"));
  }
  if (info.num_devices < 1 || info.num_devices > kMaxDevicesPerWorker) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker.num_devices of worker ", info.name, " is ",
                     info.num_devices, "; must be 1..", kMaxDevicesPerWorker));
  }
  std::vector<WorkerEvent> events;
  WorkerRecord stored;
  {
    absl::MutexLock lock(&mu_);
    auto it = host_of_name_.find(info.name);
    // The device count is fixed by the live workers (other than this one):
    // device ids are host * devices_per_host + local.
    bool other_live = false;
    for (const WorkerRecord& w : workers_) {
      if (!w.lost && w.name != info.name) other_live = true;
    }
    if (other_live && info.num_devices != devices_per_host_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker ", info.name, " has ", info.num_devices,
          " devices but the cluster's workers have ", devices_per_host_,
          " each; all workers must have the same device count"));
    }
    devices_per_host_ = info.num_devices;
    const absl::Time now = clock_->Now();
    if (it == host_of_name_.end()) {
      WorkerRecord record = info;
      record.host_index = static_cast<int>(workers_.size());
      record.lost = false;
      record.last_heartbeat = now;
      host_of_name_[info.name] = record.host_index;
      workers_.push_back(record);
      stored = record;
    } else {
      WorkerRecord& record = workers_[it->second];
      const bool same_process = !info.incarnation.empty() &&
                                info.incarnation == record.incarnation;
      if (!record.lost && !same_process) {
        // Registering again while live means the process restarted (or
        // lost contact long enough to think so): its jobs are gone. The
        // same incarnation only lost the answer to its last registration.
        events.push_back({WorkerEvent::Kind::kRestarted, record.name,
                          record.host_index,
                          absl::StrCat("worker ", record.name,
                                       " restarted (registered again)")});
      }
      const int host = record.host_index;
      record = info;
      record.host_index = host;
      record.lost = false;
      record.last_heartbeat = now;
      stored = record;
    }
    events.push_back({WorkerEvent::Kind::kRegistered, stored.name,
                      stored.host_index,
                      absl::StrCat("worker ", stored.name, " registered")});
  }
  LogInfo("worker ", stored.name, " registered as host ", stored.host_index,
          " (", stored.num_devices, " ",
          stored.device_kind.empty() ? "" : stored.device_kind + " ",
          "devices, ", stored.address, ")");
  Notify(events);
  return stored;
}

bool WorkerRegistry::Heartbeat(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  auto it = host_of_name_.find(name);
  if (it == host_of_name_.end()) return false;
  WorkerRecord& record = workers_[it->second];
  if (record.lost) return false;
  record.last_heartbeat = clock_->Now();
  return true;
}

std::vector<WorkerEvent> WorkerRegistry::Sweep() {
  std::vector<WorkerEvent> events;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (WorkerRecord& w : workers_) {
      if (w.lost || now - w.last_heartbeat <= options_.lease) continue;
      w.lost = true;
      events.push_back(
          {WorkerEvent::Kind::kLost, w.name, w.host_index,
           absl::StrFormat("worker %s lost (no heartbeat for %.1f s)", w.name,
                           absl::ToDoubleSeconds(now - w.last_heartbeat))});
    }
  }
  for (const WorkerEvent& e : events) LogWarning(e.reason);
  Notify(events);
  return events;
}

void WorkerRegistry::Notify(const std::vector<WorkerEvent>& events) {
  if (events.empty()) return;
  std::vector<Listener> listeners;
  {
    absl::MutexLock lock(&mu_);
    listeners = listeners_;
  }
  for (const WorkerEvent& e : events) {
    for (const Listener& listener : listeners) listener(e);
  }
}

void WorkerRegistry::StartSweeper(absl::Duration period) {
  StopSweeper();
  {
    absl::MutexLock lock(&mu_);
    stop_sweeper_ = false;
  }
  sweeper_ = std::thread([this, period] { SweeperLoop(period); });
}

void WorkerRegistry::StopSweeper() {
  {
    absl::MutexLock lock(&mu_);
    stop_sweeper_ = true;
  }
  if (sweeper_.joinable()) sweeper_.join();
}

void WorkerRegistry::SweeperLoop(absl::Duration period) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Wakes early when StopSweeper sets the flag.
      mu_.AwaitWithTimeout(absl::Condition(&stop_sweeper_), period);
      if (stop_sweeper_) return;
    }
    Sweep();
  }
}

Topology WorkerRegistry::topology() const {
  absl::MutexLock lock(&mu_);
  Topology topology;
  topology.num_hosts = static_cast<int>(workers_.size());
  topology.devices_per_host = devices_per_host_;
  topology.inter_host_bandwidth = options_.inter_host_bandwidth;
  topology.intra_host_bandwidth = options_.intra_host_bandwidth;
  topology.inter_host_latency = options_.inter_host_latency;
  topology.intra_host_latency = options_.intra_host_latency;
  topology.host_copy_bandwidth = options_.host_copy_bandwidth;
  topology.transfer_setup_seconds = options_.transfer_setup_seconds;
  return topology;
}

std::vector<WorkerRecord> WorkerRegistry::Workers() const {
  absl::MutexLock lock(&mu_);
  return workers_;
}

absl::flat_hash_set<int> WorkerRegistry::UnavailableHosts() const {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_set<int> hosts;
  for (const WorkerRecord& w : workers_) {
    // A worker with another device count than the cluster's (possible only
    // after every worker was lost and one came back different) cannot serve
    // its host's device ids.
    if (w.lost || w.num_devices != devices_per_host_) {
      hosts.insert(w.host_index);
    }
  }
  return hosts;
}

absl::StatusOr<WorkerRecord> WorkerRegistry::WorkerOnHost(int host) const {
  absl::MutexLock lock(&mu_);
  if (host < 0 || host >= static_cast<int>(workers_.size())) {
    return absl::NotFoundError(absl::StrCat("no worker on host ", host));
  }
  return workers_[host];
}

}  // namespace meshcast
