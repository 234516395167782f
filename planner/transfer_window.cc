#include "planner/transfer_window.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace meshcast {

absl::Status LimitTransfersPerHost(ReshardPlan& plan, const Topology& topology,
                                   int per_host) {
  if (per_host <= 0) return absl::OkStatus();
  const int devices = topology.num_devices();
  // Per host, the transfers that touched it so far, in plan order.
  std::vector<std::vector<int>> on_host(topology.num_hosts);
  std::vector<int> hosts;
  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    Transfer& transfer = plan.transfers[i];
    hosts.clear();
    const auto touch = [&](int device) -> absl::Status {
      if (device < 0 || device >= devices) {
        return absl::InvalidArgumentError(
            absl::StrCat("transfer ", i, ": device ", device,
                         " is outside the topology (", devices, " devices)"));
      }
      hosts.push_back(topology.HostOf(device));
      return absl::OkStatus();
    };
    if (absl::Status s = touch(transfer.src_device); !s.ok()) return s;
    for (int device : transfer.dst_devices) {
      if (absl::Status s = touch(device); !s.ok()) return s;
    }
    std::sort(hosts.begin(), hosts.end());
    hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
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

}  // namespace meshcast
