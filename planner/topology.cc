#include "planner/topology.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace meshcast {
namespace {

bool PositiveFinite(double value) { return std::isfinite(value) && value > 0; }

}  // namespace

absl::StatusOr<DeviceRates> DeviceRatesFor(absl::string_view kind) {
  // Figures and their sources: see topology.h.
  const std::string name = absl::AsciiStrToLower(kind);
  if (name == "cpu") return DeviceRates{};
  if (name == "v100") return DeviceRates{125e12, 900e9};
  if (name == "h100") return DeviceRates{989e12, 3.35e12};
  if (name == "h200") return DeviceRates{989e12, 4.8e12};
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown device kind \"", kind, "\"; allowed: cpu, v100, h100, h200"));
}

const CollectiveCalibration* Topology::CalibrationFor(
    absl::string_view op, absl::string_view link_class) const {
  for (const CollectiveCalibration& c : calibration) {
    if (c.op == op && c.link_class == link_class) return &c;
  }
  return nullptr;
}

absl::Status Topology::Validate() const {
  if (num_hosts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology: num_hosts must be >= 1, got ", num_hosts));
  }
  if (devices_per_host < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "topology: devices_per_host must be >= 1, got ", devices_per_host));
  }
  if (static_cast<int64_t>(num_hosts) * devices_per_host > (1 << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology: ", num_hosts, " x ", devices_per_host,
                     " devices is more than the planner supports (2^30)"));
  }
  const std::pair<const char*, double> rates[] = {
      {"inter_host_bandwidth", inter_host_bandwidth},
      {"intra_host_bandwidth", intra_host_bandwidth},
      {"pipeline_chunk_bytes", pipeline_chunk_bytes},
      {"device_flops", device_flops},
      {"device_memory_bandwidth", device_memory_bandwidth},
  };
  for (const auto& [name, value] : rates) {
    if (!PositiveFinite(value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "topology: ", name, " must be positive and finite, got ", value));
    }
  }
  // Latencies and the setup time may be zero (an idealised model) but not
  // negative; a copy bandwidth of 0 means unlimited.
  const std::pair<const char*, double> non_negative[] = {
      {"inter_host_latency", inter_host_latency},
      {"intra_host_latency", intra_host_latency},
      {"transfer_setup_seconds", transfer_setup_seconds},
  };
  for (const auto& [name, value] : non_negative) {
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "topology: ", name, " must be >= 0 and finite, got ", value));
    }
  }
  if (!std::isfinite(cpu_cores_per_device) || cpu_cores_per_device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology: cpu_cores_per_device must be >= 0 and finite "
                     "(0 = not known), got ",
                     cpu_cores_per_device));
  }
  if (!std::isfinite(host_copy_bandwidth) || host_copy_bandwidth < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology: host_copy_bandwidth must be >= 0 and finite "
                     "(0 = unlimited), got ",
                     host_copy_bandwidth));
  }
  return absl::OkStatus();
}

std::string Topology::ToString() const {
  std::string text = absl::StrFormat(
      "%d hosts x %d devices, inter-host %g Gbps (latency %g us), intra-host "
      "%g Gbps (latency %g us)",
      num_hosts, devices_per_host, inter_host_bandwidth * 8 / 1e9,
      inter_host_latency * 1e6, intra_host_bandwidth * 8 / 1e9,
      intra_host_latency * 1e6);
  // The CPU-side costs appear only when set, so GPU topologies read as
  // before.
  if (host_copy_bandwidth > 0) {
    absl::StrAppendFormat(&text, ", host copy %g Gbps",
                          host_copy_bandwidth * 8 / 1e9);
  }
  if (transfer_setup_seconds > 0) {
    absl::StrAppendFormat(&text, ", transfer setup %g us",
                          transfer_setup_seconds * 1e6);
  }
  // Compute rates appear only when they differ from the CPU default, so
  // existing descriptions read as before.
  const DeviceRates cpu;
  if (device_flops != cpu.flops ||
      device_memory_bandwidth != cpu.memory_bandwidth) {
    absl::StrAppendFormat(&text, ", device %g TFLOP/s, memory %g GB/s",
                          device_flops / 1e12, device_memory_bandwidth / 1e9);
  }
  if (cpu_cores_per_device > 0) {
    absl::StrAppendFormat(&text, ", %g cores per CPU device",
                          cpu_cores_per_device);
  }
  return text;
}

Topology Topology::FromGbps(int hosts, int devices_per_host, double inter_gbps,
                            double intra_gbps) {
  Topology topology;
  topology.num_hosts = hosts;
  topology.devices_per_host = devices_per_host;
  topology.inter_host_bandwidth = inter_gbps * 1e9 / 8;
  topology.intra_host_bandwidth = intra_gbps * 1e9 / 8;
  return topology;
}

absl::StatusOr<std::pair<int, int>> ParseClusterShape(absl::string_view text) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot parse cluster shape \"", text, "\": ", why,
        "; expected HxG (H hosts x G devices per host, both >= 1), e.g. 5x4"));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(text, 'x');
  if (parts.size() != 2) return bad("need exactly two numbers");
  int hosts = 0;
  int devices = 0;
  if (!absl::SimpleAtoi(parts[0], &hosts) || hosts < 1) {
    return bad(absl::StrCat("bad host count '", parts[0], "'"));
  }
  if (!absl::SimpleAtoi(parts[1], &devices) || devices < 1) {
    return bad(absl::StrCat("bad device count '", parts[1], "'"));
  }
  return std::make_pair(hosts, devices);
}

}  // namespace meshcast
