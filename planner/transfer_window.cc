#include "planner/transfer_window.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace meshcast {
namespace {

// The hosts of `transfer`'s devices (valid ids), sorted, each once.
void HostsOf(const Transfer& transfer, const Topology& topology,
             std::vector<int>& hosts) {
  hosts.assign(1, topology.HostOf(transfer.src_device));
  for (int device : transfer.dst_devices) {
    hosts.push_back(topology.HostOf(device));
  }
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
}

}  // namespace

absl::Status LimitTransfersPerHost(ReshardPlan& plan, const Topology& topology,
                                   int per_host) {
  if (per_host <= 0) return absl::OkStatus();
  const int devices = topology.num_devices();
  // Per host, the transfers that touched it so far, in plan order.
  std::vector<std::vector<int>> on_host(topology.num_hosts);
  std::vector<int> hosts;
  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    Transfer& transfer = plan.transfers[i];
    std::vector<int> all(transfer.dst_devices.begin(),
                         transfer.dst_devices.end());
    all.push_back(transfer.src_device);
    for (int device : all) {
      if (device < 0 || device >= devices) {
        return absl::InvalidArgumentError(
            absl::StrCat("transfer ", i, ": device ", device,
                         " is outside the topology (", devices, " devices)"));
      }
    }
    HostsOf(transfer, topology, hosts);
    for (int host : hosts) {
      std::vector<int>& chain = on_host[host];
      if (chain.size() >= static_cast<size_t>(per_host)) {
        const int before = chain[chain.size() - per_host];
        if (std::find(transfer.deps.begin(), transfer.deps.end(), before) ==
            transfer.deps.end()) {
          transfer.deps.push_back(before);
        }
      }
      chain.push_back(static_cast<int>(i));
    }
    // A transfer's stage is its dependency depth (VerifyPlan).
    int stage = 0;
    for (int dep : transfer.deps) {
      if (dep < 0 || dep >= static_cast<int>(i)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "transfer ", i, ": dep ", dep, " is not an earlier transfer"));
      }
      stage = std::max(stage, plan.transfers[dep].stage + 1);
    }
    transfer.stage = stage;
  }
  return absl::OkStatus();
}

int MostTransfersAtOnceOnAHost(const ReshardPlan& plan,
                               const Topology& topology,
                               const SimulationResult& sim) {
  // Per host: (time, +1 at a start, -1 at a finish); finishes sort first.
  std::vector<std::vector<std::pair<double, int>>> events(topology.num_hosts);
  std::vector<int> hosts;
  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    HostsOf(plan.transfers[i], topology, hosts);
    for (int host : hosts) {
      events[host].push_back({sim.transfer_start[i], 1});
      events[host].push_back({sim.transfer_finish[i], -1});
    }
  }
  int most = 0;
  for (std::vector<std::pair<double, int>>& host_events : events) {
    std::sort(host_events.begin(), host_events.end());
    int running = 0;
    for (const auto& [time, change] : host_events) {
      running += change;
      most = std::max(most, running);
    }
  }
  return most;
}

}  // namespace meshcast
