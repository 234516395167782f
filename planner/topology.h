// Topology: the hosts of a cluster, the devices of each host, and the links
// between them, as the planner and the cost model see them.
//
// Devices are numbered host-major: device d sits on host d / devices_per_host
// (docs/conventions.md, "Devices and meshes"). Every host has one NIC with the same egress and
// ingress bandwidth; every device has one port into the host's fabric
// (NVLink, or memory copies for CPU devices) with the same bandwidth each way.
// Bandwidths are in bytes per second, latencies in seconds.
//
// Two optional CPU-side costs, both off by default (GPU hosts with NVLink and
// copy engines do not need them): host_copy_bandwidth, one memory-copy
// capacity per host that every device of the host shares (CPU devices share
// the host's cores and memory bandwidth, so K devices do not get K ports at
// memcpy speed), and transfer_setup_seconds, a fixed start-up cost of every
// transfer (thread start, tag matching, a round trip). How the simulator uses
// them is spelled out in planner/cost_model.h.
//
// Compute: every device runs compute steps at device_flops (FLOP/s) and reads
// and writes its memory at device_memory_bandwidth (bytes/s), the same for
// every device of the topology. The defaults describe one CPU core; named
// presets for other kinds come from DeviceRatesFor:
//
//   ASSIGN_OR_RETURN(const DeviceRates rates, DeviceRatesFor("h100"));
//   topology.SetDeviceRates(rates);
//
// Calibration: the time of a collective on one class of links, fitted on
// the live cluster by a `calibrate` job (planner/kinds/calibrate/), next to
// the simulator's own fit of the same steps. The simulator corrects its
// prediction of every matching collective by their difference
// (planner/sim/plan_simulator.h, "Calibration"); the controller attaches
// the latest fit to the topology it plans on.
//
// Thread safety: a plain value type; const methods are safe to call
// concurrently.
#ifndef MESHCAST_PLANNER_TOPOLOGY_H_
#define MESHCAST_PLANNER_TOPOLOGY_H_

#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshcast {

// Device ids of one unit task or transfer (its senders, receivers, a relay
// chain): usually one or two, so they live inside the object instead of
// in a heap block of their own; at millions of unit tasks that is a third
// of the planner's memory (docs/benchmarks.md, planning scaling).
using DeviceList = absl::InlinedVector<int, 2>;

// What one device computes per second: its peak FLOP rate and its memory
// bandwidth. The defaults are the "cpu" preset.
struct DeviceRates {
  double flops = 50e9;             // FLOP/s
  double memory_bandwidth = 10e9;  // bytes/s
};

// Published peak figures of a device kind: "cpu", "v100", "h100" or "h200"
// (case insensitive). InvalidArgument for any other name, listing the
// allowed ones.
//  - v100: NVIDIA Tesla V100 SXM2 datasheet: 125 TFLOP/s FP16 tensor core
//    (the peak at the 1530 MHz boost clock; V100 has no sparsity mode and
//    no BF16), 900 GB/s HBM2. As with the other GPU presets the tensor-core
//    peak times every dtype: FP32 GEMMs on a V100 peak at 15.7 TFLOP/s, so
//    float32 plans on this preset are 8x optimistic in compute. (The
//    cross-mesh resharding paper's testbed: AWS p3 hosts of 4 V100s.)
//  - h100: NVIDIA H100 SXM5 datasheet: 989 TFLOP/s dense BF16 tensor core
//    (1979 with sparsity), 3.35 TB/s HBM3.
//  - h200: NVIDIA H200 SXM datasheet: the same 989 TFLOP/s dense BF16,
//    4.8 TB/s HBM3e.
//  - cpu: one core, deliberately conservative: a core with two AVX-512 FMA
//    units at ~3 GHz peaks near 100 GFLOP/s in fp32 (2 x 16 x 2 x 3e9), and
//    a sustained GEMM reaches about half of that; a single core streams
//    about 10 GB/s from DRAM (STREAM copy on a current server core).
absl::StatusOr<DeviceRates> DeviceRatesFor(absl::string_view kind);

// Links of a collective's group: all its devices on one host, or not.
inline constexpr char kIntraHost[] = "intra_host";
inline constexpr char kInterHost[] = "inter_host";

// One collective on one link class: t = alpha + beta x bytes (bytes as
// Step.bytes counts them) measured on `ranks` devices, and the simulator's
// fit of the very same steps on the uncalibrated topology.
struct CollectiveCalibration {
  std::string op;          // "all_to_all", "all_gather", "reduce_scatter",
                           // "all_reduce"
  std::string link_class;  // kIntraHost or kInterHost
  int ranks = 0;
  double alpha_seconds = 0;
  double beta_seconds_per_byte = 0;
  double model_alpha_seconds = 0;
  double model_beta_seconds_per_byte = 0;
  std::string job_id;  // the calibrate job it came from
};

struct Topology {
  int num_hosts = 1;
  int devices_per_host = 1;
  // Per-host NIC bandwidth, each direction (bytes/s).
  double inter_host_bandwidth = 1.25e9;
  // Per-device port bandwidth inside a host, each direction (bytes/s).
  double intra_host_bandwidth = 150e9;
  // Per-message latency between hosts and inside a host (s).
  double inter_host_latency = 10e-6;
  double intra_host_latency = 2e-6;
  // Transfers are pipelined in chunks of this size along a relay chain; each
  // extra hop adds one chunk's time at the hop's rate (pipeline fill).
  double pipeline_chunk_bytes = 1 << 20;
  // Per-host memory-copy capacity (bytes/s) shared by all devices of the
  // host: intra-host hops (memcpy) and the pack / unpack of slices that leave
  // or enter the host draw on it. 0 means unlimited (no such resource).
  double host_copy_bandwidth = 0;
  // Fixed start-up time of every transfer (s), before its first byte moves.
  double transfer_setup_seconds = 0;
  // Per-device compute peak (FLOP/s) and memory bandwidth (bytes/s); the
  // defaults are DeviceRates{} (one CPU core).
  double device_flops = DeviceRates{}.flops;
  double device_memory_bandwidth = DeviceRates{}.memory_bandwidth;
  // Cores per device on the most crowded machine, where CPU devices share a
  // machine's cores: workers report their machine and cores at
  // registration, and several emulated hosts (network namespaces) or
  // workers can run on one machine. 0 = not known, or not CPU devices. Below
  // 1 the devices' compute steps cannot all run at once, and anything run
  // beside them (a communicator's threads) takes a core from some device:
  // the tp_overlap cost model then keeps overlap modes out of `auto`.
  double cpu_cores_per_device = 0;
  // Measured corrections (see the top of the file); empty: the figures
  // above alone.
  std::vector<CollectiveCalibration> calibration;

  // The calibration of `op` on `link_class`, or nullptr.
  const CollectiveCalibration* CalibrationFor(absl::string_view op,
                                              absl::string_view link_class)
      const;

  int num_devices() const { return num_hosts * devices_per_host; }
  int HostOf(int device) const { return device / devices_per_host; }
  bool SameHost(int a, int b) const { return HostOf(a) == HostOf(b); }

  DeviceRates device_rates() const {
    return DeviceRates{device_flops, device_memory_bandwidth};
  }
  void SetDeviceRates(const DeviceRates& rates) {
    device_flops = rates.flops;
    device_memory_bandwidth = rates.memory_bandwidth;
  }

  // Checks counts and rates (device_flops and device_memory_bandwidth
  // included) are positive and finite, latencies, the setup time and
  // host_copy_bandwidth >= 0 and finite.
  absl::Status Validate() const;
  std::string ToString() const;

  // A topology of `hosts` x `devices` with bandwidths given in Gbit/s
  // (human units, converted to bytes/s here).
  static Topology FromGbps(int hosts, int devices_per_host, double inter_gbps,
                           double intra_gbps);
};

// Parses "HxG" (e.g. "5x4") into host and device counts.
absl::StatusOr<std::pair<int, int>> ParseClusterShape(absl::string_view text);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_TOPOLOGY_H_
