#include "controller/worker_registry.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "planner/ir/spec_convert.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

constexpr int kMaxDevicesPerWorker = 4096;
constexpr size_t kMaxNameLength = 256;
// Host indices a registry hands out at most: a bound on the topology even
// under a flood of names within one lost_worker_ttl.
constexpr int kMaxHosts = 65536;

}  // namespace

WorkerRegistry::WorkerRegistry(Options options, Clock* clock)
    : options_(options), clock_(clock) {}

WorkerRegistry::~WorkerRegistry() { StopSweeper(); }

void WorkerRegistry::AddListener(Listener listener) {
  absl::MutexLock lock(&mu_);
  listeners_.push_back(std::move(listener));
}

absl::Status WorkerRegistry::AttachStore(JobStore* store) {
  ASSIGN_OR_RETURN(std::vector<StoredHost> hosts, store->LoadHosts());
  ASSIGN_OR_RETURN(const v1::Topology stored, store->LoadCalibration());
  absl::MutexLock lock(&mu_);
  store_ = store;
  if (calibration_.empty()) {
    for (const v1::CollectiveCalibration& c : stored.calibration()) {
      calibration_.push_back(CalibrationFromProto(c));
    }
  }
  // Names that registered before the store was attached.
  for (const WorkerRecord& w : workers_) {
    if (!w.name.empty()) SaveHostLocked(w);
  }
  const absl::Time now = clock_->Now();
  for (const StoredHost& host : hosts) {
    if (host.name.empty() || host.host_index < 0 || host.num_devices < 1 ||
        host.host_index >= kMaxHosts || host_of_name_.contains(host.name)) {
      continue;
    }
    if (host.host_index >= static_cast<int>(workers_.size())) {
      workers_.resize(host.host_index + 1);
      for (size_t i = 0; i < workers_.size(); ++i) {
        if (workers_[i].name.empty()) {
          workers_[i].host_index = static_cast<int>(i);
          workers_[i].lost = true;
        }
      }
    }
    WorkerRecord& record = workers_[host.host_index];
    if (!record.name.empty()) continue;  // taken by a live registration
    record.name = host.name;
    record.num_devices = host.num_devices;
    record.lost = true;
    record.lost_since = now;  // the TTL counts from the controller's start
    host_of_name_[host.name] = host.host_index;
    devices_per_host_ = host.num_devices;
  }
  return absl::OkStatus();
}

int WorkerRegistry::FreeIndexLocked() const {
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i].name.empty()) return static_cast<int>(i);
  }
  return static_cast<int>(workers_.size());
}

void WorkerRegistry::SaveHostLocked(const WorkerRecord& record) {
  if (store_ == nullptr) return;
  absl::Status status =
      store_->SaveHost({record.name, record.host_index, record.num_devices});
  if (!status.ok()) {
    LogError("cannot persist the host index of worker ", record.name, ": ",
             status.ToString());
  }
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
  for (const auto& [field, value] :
       {std::pair<const char*, double>{"probed_host_copy_bytes_per_second",
                                       info.probed_host_copy_bytes_per_second},
        {"probed_device_flops", info.probed_device_flops}}) {
    if (!(value >= 0) || !std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker.", field, " of worker ", info.name, " is ",
                       value, "; must be finite and >= 0 (0 = not measured)"));
    }
  }
  if (info.cpu_cores < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker.cpu_cores of worker ", info.name, " is ",
                     info.cpu_cores, "; must be >= 0 (0 = not known)"));
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
      record.host_index = FreeIndexLocked();
      if (record.host_index >= kMaxHosts) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "worker ", info.name, " cannot register: ", kMaxHosts,
            " worker names are known already (LOST ones are forgotten "
            "after --lost_worker_ttl)"));
      }
      record.lost = false;
      record.last_heartbeat = now;
      host_of_name_[info.name] = record.host_index;
      if (record.host_index == static_cast<int>(workers_.size())) {
        workers_.push_back(record);
      } else {
        workers_[record.host_index] = record;
      }
      stored = record;
      SaveHostLocked(record);
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
      const bool devices_changed = record.num_devices != info.num_devices;
      record = info;
      record.host_index = host;
      record.lost = false;
      record.last_heartbeat = now;
      stored = record;
      if (devices_changed) SaveHostLocked(record);
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
      if (w.name.empty()) continue;  // a free index
      if (w.lost) {
        if (now - w.lost_since < options_.lost_worker_ttl) continue;
        // Forgotten: its index is free for another name.
        events.push_back(
            {WorkerEvent::Kind::kRemoved, w.name, w.host_index,
             absl::StrFormat("worker %s removed (LOST for %.0f s)", w.name,
                             absl::ToDoubleSeconds(now - w.lost_since))});
        if (store_ != nullptr) {
          absl::Status status = store_->DeleteHost(w.name);
          if (!status.ok()) {
            LogError("cannot forget the host index of worker ", w.name, ": ",
                     status.ToString());
          }
        }
        host_of_name_.erase(w.name);
        const int host = w.host_index;
        w = WorkerRecord();
        w.host_index = host;
        w.lost = true;
        continue;
      }
      if (now - w.last_heartbeat <= options_.lease) continue;
      w.lost = true;
      w.lost_since = now;
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

namespace {

// Cores per device on the most crowded machine of the CPU workers that say
// which machine they run on and how many cores they may use; 0 when none
// does. Workers of one machine may use different cores (affinity), so the
// machine has the most any of them reports.
double CpuCoresPerDevice(const std::vector<WorkerRecord>& workers) {
  std::map<std::string, std::pair<int, int>> machines;  // cores, devices
  for (const WorkerRecord& w : workers) {
    if (w.name.empty() || w.lost || w.device_kind != "cpu" ||
        w.machine_id.empty() || w.cpu_cores <= 0) {
      continue;
    }
    auto& [cores, devices] = machines[w.machine_id];
    cores = std::max(cores, w.cpu_cores);
    devices += w.num_devices;
  }
  double fewest = 0;
  for (const auto& [id, machine] : machines) {
    const double per_device =
        static_cast<double>(machine.first) / machine.second;
    if (fewest == 0 || per_device < fewest) fewest = per_device;
  }
  return fewest;
}

}  // namespace

void WorkerRegistry::ApplyProbedRates(Topology& topology) const {
  double copy = 0, flops = 0;
  bool cuda = false;
  for (const WorkerRecord& w : workers_) {
    if (w.name.empty() || w.lost) continue;
    cuda = cuda || w.device_kind == "cuda";
    auto slowest = [](double& low, double probed) {
      if (probed > 0 && (low == 0 || probed < low)) low = probed;
    };
    slowest(copy, w.probed_host_copy_bytes_per_second);
    slowest(flops, w.probed_device_flops);
  }
  if (options_.host_copy_bandwidth == 0 && copy > 0) {
    topology.host_copy_bandwidth = copy;
  }
  if (options_.device_rates == "auto" && !cuda && flops > 0) {
    topology.device_flops = flops;
  }
}

Topology WorkerRegistry::topology() const {
  absl::MutexLock lock(&mu_);
  Topology topology;
  int hosts = static_cast<int>(workers_.size());
  while (hosts > 0 && workers_[hosts - 1].name.empty()) --hosts;
  topology.num_hosts = hosts;
  topology.devices_per_host = devices_per_host_;
  topology.inter_host_bandwidth = options_.inter_host_bandwidth;
  topology.intra_host_bandwidth = options_.intra_host_bandwidth;
  topology.inter_host_latency = options_.inter_host_latency;
  topology.intra_host_latency = options_.intra_host_latency;
  topology.host_copy_bandwidth = options_.host_copy_bandwidth;
  topology.transfer_setup_seconds = options_.transfer_setup_seconds;
  topology.calibration = calibration_;
  std::string rates = options_.device_rates;
  if (rates == "auto") {
    rates = "cpu";
    for (const WorkerRecord& w : workers_) {
      if (!w.name.empty() && w.device_kind == "cuda") rates = "h100";
    }
  }
  // Checked at start-up (controller_flags.cc): cannot fail here.
  if (absl::StatusOr<DeviceRates> preset = DeviceRatesFor(rates); preset.ok()) {
    topology.SetDeviceRates(*preset);
  }
  if (options_.use_probed_rates) ApplyProbedRates(topology);
  // A fact of placement, not a measurement: applied either way.
  topology.cpu_cores_per_device = CpuCoresPerDevice(workers_);
  return topology;
}

absl::Status WorkerRegistry::SetCalibration(
    std::vector<CollectiveCalibration> calibration) {
  v1::Topology stored;
  for (const CollectiveCalibration& c : calibration) {
    *stored.add_calibration() = CalibrationToProto(c);
  }
  JobStore* store = nullptr;
  {
    absl::MutexLock lock(&mu_);
    calibration_ = std::move(calibration);
    store = store_;
  }
  return store != nullptr ? store->SaveCalibration(stored) : absl::OkStatus();
}

std::vector<WorkerRecord> WorkerRegistry::Workers() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerRecord> workers;
  for (const WorkerRecord& w : workers_) {
    if (!w.name.empty()) workers.push_back(w);
  }
  return workers;
}

absl::flat_hash_set<int> WorkerRegistry::UnavailableHosts() const {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_set<int> hosts;
  int in_use = static_cast<int>(workers_.size());
  while (in_use > 0 && workers_[in_use - 1].name.empty()) --in_use;
  for (const WorkerRecord& w : workers_) {
    if (w.host_index >= in_use) break;  // beyond the topology
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
  if (host < 0 || host >= static_cast<int>(workers_.size()) ||
      workers_[host].name.empty()) {
    return absl::NotFoundError(absl::StrCat("no worker on host ", host));
  }
  return workers_[host];
}

}  // namespace meshcast
