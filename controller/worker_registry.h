// WorkerRegistry: the workers of the cluster, their leases, and the topology
// they form.
//
// Each worker registers with its name, Worker-service address, device count
// and data-plane address, and gets a host index: the first registration of a
// name takes the lowest free index, and later registrations of the same name
// (a restarted worker) keep it, so device ids stay stable. With a JobStore
// attached (AttachStore) the index of every name is persisted and restored
// when the controller restarts: a restored name is LOST until it registers
// again, and then gets its old index back, so a device id names the same
// worker's device tomorrow. Heartbeats renew the lease; Sweep() (explicit,
// or the background sweeper) marks a worker LOST once its lease has run
// out, and removes a worker that has been LOST for Options::lost_worker_ttl:
// its name is forgotten (in the store too) and its index becomes free for
// another name, so a dead node or a flood of names does not grow the
// topology forever. Listeners hear about registrations, lost, removed and
// restarted workers (a registration of a name that was still live: its
// data-plane state is gone), so the job manager can fail the jobs that used
// it.
//
// Topology: hosts 0..N-1 up to the highest index in use (a lost worker's
// host stays in the topology, unavailable, so that ids do not shift; so
// does a free index below the highest) x the common device count. Every
// live worker must have the same device count; a worker with another count
// is rejected. Its rates are the options' figures, or with
// Options::use_probed_rates what the live workers measured (the slowest
// host's: a plan waits for its slowest part).
//
//   WorkerRegistry registry(options, Clock::Real());
//   registry.AddListener([&](const WorkerEvent& e) { ... });
//   registry.StartSweeper(absl::Milliseconds(500));
//   ASSIGN_OR_RETURN(WorkerRecord w, registry.Register(info));
//
// Thread safety: all methods are thread-safe. Listeners run on the calling
// thread (Register, Sweep or the sweeper) after the registry's lock is
// released, so they may call back into the registry.
#ifndef MESHCAST_CONTROLLER_WORKER_REGISTRY_H_
#define MESHCAST_CONTROLLER_WORKER_REGISTRY_H_

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "controller/clock.h"
#include "controller/job_store.h"
#include "planner/topology.h"

namespace meshcast {

struct WorkerRecord {
  std::string name;
  std::string address;       // host:port of its Worker service
  std::string data_address;  // host for data-plane connections
  std::string device_kind;   // "cpu" or "cuda"
  int num_devices = 0;
  int64_t memory_bytes = 0;  // WorkerInfo.memory_bytes; 0 = not reported
  std::string incarnation;   // WorkerInfo.incarnation; may be empty
  // WorkerInfo.probed_*: the host's measured copy capacity (bytes/s) and one
  // device's GEMM rate (FLOP/s); 0 = not measured.
  double probed_host_copy_bytes_per_second = 0;
  double probed_device_flops = 0;
  // WorkerInfo.machine_id and cpu_cores: workers with one machine_id share
  // that machine's cores; ""/0 = not known.
  std::string machine_id;
  int cpu_cores = 0;
  int host_index = -1;
  bool lost = false;
  absl::Time last_heartbeat = absl::InfinitePast();
  absl::Time lost_since = absl::InfinitePast();  // when it became LOST
};

struct WorkerEvent {
  enum class Kind { kRegistered, kLost, kRestarted, kRemoved };
  Kind kind = Kind::kRegistered;
  std::string name;
  int host_index = -1;
  std::string reason;  // human-readable, names the worker
};

class WorkerRegistry {
 public:
  struct Options {
    absl::Duration lease = absl::Seconds(5);
    absl::Duration heartbeat = absl::Seconds(1);
    // Link rates and latencies of the topology (bytes/s, seconds).
    double inter_host_bandwidth = 10e9 / 8;
    double intra_host_bandwidth = 100e9 / 8;
    double inter_host_latency = 10e-6;
    double intra_host_latency = 2e-6;
    // CPU-side costs of the topology (planner/topology.h): the per-host
    // memory-copy capacity (bytes/s, 0 = unlimited) and the fixed start-up
    // time of every transfer (s).
    double host_copy_bandwidth = 0;
    double transfer_setup_seconds = 0;
    // The devices' compute rates (planner/topology.h DeviceRatesFor): a
    // preset name, or "auto": "h100" once a CUDA worker has registered
    // (WorkerInfo names no GPU model), else "cpu".
    std::string device_rates = "auto";
    // Plan with what the workers measured at start (WorkerInfo.probed_*):
    // where host_copy_bandwidth is 0, the smallest probed copy capacity of
    // the live workers; where device_rates is "auto" and no CUDA worker is
    // live, the smallest probed GEMM rate as device_flops. Workers that
    // probed nothing leave the figures above in place.
    bool use_probed_rates = true;
    // A worker LOST for this long is removed (its index freed);
    // absl::InfiniteDuration(): never.
    absl::Duration lost_worker_ttl = absl::Minutes(10);
  };
  using Listener = std::function<void(const WorkerEvent&)>;

  WorkerRegistry(Options options, Clock* clock);
  ~WorkerRegistry();
  WorkerRegistry(const WorkerRegistry&) = delete;
  WorkerRegistry& operator=(const WorkerRegistry&) = delete;

  // Listeners must be added before workers register.
  void AddListener(Listener listener) ABSL_LOCKS_EXCLUDED(mu_);

  // Persists host indices in `store` from now on and restores the names it
  // holds (as LOST, with their device counts) unless they are known
  // already. Call before workers register; `store` must outlive the
  // registry.
  absl::Status AttachStore(JobStore* store) ABSL_LOCKS_EXCLUDED(mu_);

  // Registers or re-registers `info.name`; returns the stored record (with
  // its host index). INVALID_ARGUMENT for a missing name/address, a device
  // count < 1, or a device count unlike the live workers'.
  absl::StatusOr<WorkerRecord> Register(const WorkerRecord& info)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Renews the lease. False when the name is unknown or already LOST: the
  // worker must register again.
  bool Heartbeat(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);

  // Marks live workers whose lease expired as LOST, removes workers LOST
  // for lost_worker_ttl, notifies listeners and returns the events.
  std::vector<WorkerEvent> Sweep() ABSL_LOCKS_EXCLUDED(mu_);

  // Runs Sweep() every `period` on a background thread until StopSweeper()
  // or destruction.
  void StartSweeper(absl::Duration period) ABSL_LOCKS_EXCLUDED(mu_);
  void StopSweeper() ABSL_LOCKS_EXCLUDED(mu_);

  // Hosts 0..highest index in use; 0 hosts before the first registration.
  // Carries the latest calibration (SetCalibration).
  Topology topology() const ABSL_LOCKS_EXCLUDED(mu_);

  // Replaces the links' calibration (a calibrate job's fit) that topology()
  // carries from now on; saved in the attached store, which AttachStore
  // reads it back from. The error is the store's (the new calibration is
  // in effect anyway).
  absl::Status SetCalibration(std::vector<CollectiveCalibration> calibration)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Every known worker (live or LOST, not removed), by host index.
  std::vector<WorkerRecord> Workers() const ABSL_LOCKS_EXCLUDED(mu_);
  // Hosts whose worker is LOST, and free indices below the highest.
  absl::flat_hash_set<int> UnavailableHosts() const ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND for a host with no worker.
  absl::StatusOr<WorkerRecord> WorkerOnHost(int host) const
      ABSL_LOCKS_EXCLUDED(mu_);

  const Options& options() const { return options_; }

 private:
  void Notify(const std::vector<WorkerEvent>& events) ABSL_LOCKS_EXCLUDED(mu_);
  // The lowest index no name holds.
  int FreeIndexLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Best effort: a controller without its store still serves.
  void SaveHostLocked(const WorkerRecord& record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SweeperLoop(absl::Duration period);
  // Options::use_probed_rates: the slowest live worker's probed figures.
  void ApplyProbedRates(Topology& topology) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  std::vector<Listener> listeners_ ABSL_GUARDED_BY(mu_);
  // Indexed by host index; a free index holds a record with no name (and
  // lost set).
  std::vector<WorkerRecord> workers_ ABSL_GUARDED_BY(mu_);
  JobStore* store_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::flat_hash_map<std::string, int> host_of_name_ ABSL_GUARDED_BY(mu_);
  // Device count every live worker has (0 before the first registration).
  int devices_per_host_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<CollectiveCalibration> calibration_ ABSL_GUARDED_BY(mu_);
  bool stop_sweeper_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sweeper_;  // touched only by Start/StopSweeper
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_WORKER_REGISTRY_H_
