#include "planner/strategy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "planner/cost_model.h"
#include "planner/transfer_window.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

// Fixed seed of broadcast_lb's randomized greedy, so plans are reproducible.
constexpr uint64_t kLoadBalanceSeed = 0x6d65736863617374ULL;  // "meshcast"
// Trials per round of the randomized greedy, as in Alpa.
constexpr int kLoadBalanceTrials = 100;
// Cap on task visits per round (trials x remaining tasks): keeps planning of
// ~16K-task problems well under a second; problems up to 2000 tasks get the
// full 100 trials.
constexpr int64_t kLoadBalanceVisitsPerRound = 200000;

// splitmix64: tiny, fast, and the same sequence on every platform (unlike
// the standard distributions, whose algorithms are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double Uniform() { return (Next() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform in [0, n).
  int Below(int n) { return static_cast<int>(Uniform() * n); }

 private:
  uint64_t state_;
};

// Sorted distinct hosts of `devices`.
std::vector<int> HostsOf(absl::Span<const int> devices,
                         const Topology& topology) {
  std::vector<int> hosts;
  hosts.reserve(devices.size());
  for (int device : devices) hosts.push_back(topology.HostOf(device));
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  return hosts;
}

// The device of `candidates` with the lowest load; ties go to the earliest.
template <typename Load>
int LeastLoaded(absl::Span<const int> candidates, const Load& load) {
  int best = candidates.front();
  for (int device : candidates) {
    if (load[device] < load[best]) best = device;
  }
  return best;
}

// Splits `box` along its longest dimension into consecutive pieces whose
// sizes follow `weights` (rounded to whole elements). Pieces may be empty.
std::vector<Box> SplitBox(const Box& box, const std::vector<double>& weights) {
  int dim = 0;
  for (int d = 1; d < static_cast<int>(box.size()); ++d) {
    if (box[d].size() > box[dim].size()) dim = d;
  }
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  const int64_t extent = box[dim].size();
  std::vector<Box> pieces;
  pieces.reserve(weights.size());
  double cumulative = 0;
  int64_t begin = box[dim].begin;
  for (size_t i = 0; i < weights.size(); ++i) {
    cumulative += weights[i];
    // (Degenerate weights put everything in the first piece.)
    const double fraction = total > 0 ? cumulative / total : 1.0;
    int64_t end =
        i + 1 == weights.size()
            ? box[dim].end
            : box[dim].begin + static_cast<int64_t>(std::llround(
                                   fraction * static_cast<double>(extent)));
    end = std::clamp(end, begin, box[dim].end);
    Box piece = box;
    piece[dim] = Interval{begin, end};
    pieces.push_back(std::move(piece));
    begin = end;
  }
  return pieces;
}

// Accumulates transfers into a plan, computing bytes and stages.
class PlanBuilder {
 public:
  PlanBuilder(const std::vector<ReshardProblem>& problems,
              std::string strategy) {
    plan_.strategy = std::move(strategy);
    plan_.problems = problems;
    for (const ReshardProblem& problem : problems) {
      element_bytes_.push_back(DTypeSize(problem.tensor.dtype));
    }
  }

  // Room for `transfers` without regrowing: at millions of transfers each
  // doubling touches fresh memory, and first touches (page faults) were
  // half the planning time at 4096x8.
  void Reserve(size_t transfers) { plan_.transfers.reserve(transfers); }

  // Returns the index of the new transfer. A chain longer than a relay
  // group may be (kMaxRelayGroupDevices with its sender) goes as several,
  // each sent on by the last receiver of the one before once that has all
  // of it; the index is the last one's, after which every receiver holds
  // the slice.
  int Add(int tensor, Box slice, int src, absl::Span<const int> dsts,
          std::vector<int> deps = {}) {
    constexpr size_t kMostReceivers = kMaxRelayGroupDevices - 1;
    while (dsts.size() > kMostReceivers) {
      const int first = AddOne(
          tensor, slice, src, dsts.subspan(0, kMostReceivers), std::move(deps));
      src = dsts[kMostReceivers - 1];
      dsts.remove_prefix(kMostReceivers);
      deps = {first};
    }
    return AddOne(tensor, std::move(slice), src, dsts, std::move(deps));
  }

  // A relay tree without deps (Transfer::parents) of `chunk_bytes` chunks
  // (0: the topology's); trees are planned within kMaxRelayGroupDevices.
  int AddTree(int tensor, Box slice, int src, absl::Span<const int> dsts,
              absl::Span<const int> parents, int64_t chunk_bytes) {
    const int t = AddOne(tensor, std::move(slice), src, dsts, {});
    plan_.transfers[t].parents.assign(parents.begin(), parents.end());
    plan_.transfers[t].chunk_bytes = chunk_bytes;
    return t;
  }

  int64_t BytesOf(int tensor, const Box& slice) const {
    return NumElements(slice) * element_bytes_[tensor];
  }

  ReshardPlan Take() { return std::move(plan_); }

 private:
  int AddOne(int tensor, Box slice, int src, absl::Span<const int> dsts,
             std::vector<int> deps) {
    Transfer transfer;
    transfer.tensor = tensor;
    transfer.bytes = NumElements(slice) * element_bytes_[tensor];
    transfer.slice = std::move(slice);
    transfer.src_device = src;
    transfer.dst_devices.assign(dsts.begin(), dsts.end());
    for (int dep : deps) {
      transfer.stage = std::max(transfer.stage, plan_.transfers[dep].stage + 1);
    }
    transfer.deps = std::move(deps);
    plan_.transfers.push_back(std::move(transfer));
    return static_cast<int>(plan_.transfers.size()) - 1;
  }

  ReshardPlan plan_;
  std::vector<int64_t> element_bytes_;
};

// The issue order of the broadcast strategies: a host issues its collective
// calls one after another, so a broadcast starts once the previous broadcast
// of every host it involves (sender or receiver) has finished. This is the
// host model of the cross-mesh resharding paper's scheduler ("a host runs one
// task at a time"), under which the order of tasks matters.
class HostIssueOrder {
 public:
  explicit HostIssueOrder(int num_hosts) : last_(num_hosts, -1) {}

  std::vector<int> DepsOf(const std::vector<int>& hosts) const {
    std::vector<int> deps;
    for (int host : hosts) {
      if (last_[host] >= 0) deps.push_back(last_[host]);
    }
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    return deps;
  }
  void Issue(const std::vector<int>& hosts, int transfer) {
    for (int host : hosts) last_[host] = transfer;
  }

 private:
  std::vector<int> last_;
};

// Sender host plus receiver hosts of a broadcast, distinct.
std::vector<int> HostsInvolved(int sender, absl::Span<const int> receivers,
                               const Topology& topology) {
  std::vector<int> devices(receivers.begin(), receivers.end());
  devices.push_back(sender);
  return HostsOf(devices, topology);
}

// ---------------------------------------------------------------------------
// send_recv: one point-to-point copy per (receiver, slice) from the replica
// with the fewest bytes sent so far (device-level greedy over the whole
// request). All copies run concurrently, which is optimistic for this
// baseline: the comparison can only flatter it.

void AddSendRecv(const UnitTask& task, std::vector<int64_t>& sent,
                 PlanBuilder& builder) {
  for (int receiver : task.receivers) {
    const int sender = LeastLoaded(task.senders, sent);
    builder.Add(task.tensor, task.slice, sender, {receiver});
    sent[sender] += task.bytes;
  }
}

ReshardPlan PlanSendRecv(const std::vector<ReshardProblem>& problems,
                         const std::vector<UnitTask>& tasks,
                         const Topology& topology) {
  PlanBuilder builder(problems, StrategyName(Strategy::kSendRecv));
  std::vector<int64_t> sent(topology.num_devices(), 0);
  for (const UnitTask& task : tasks) AddSendRecv(task, sent, builder);
  return builder.Take();
}

// ---------------------------------------------------------------------------
// local_allgather (Alpa before broadcasts): where every destination tile sits
// inside one host (the destination is split across hosts and replicated
// within them) on a mesh of rank <= 2, each receiving host gets one copy of
// a slice over the network, cut into one piece per receiver device (stage
// 0); an all-gather inside the host, modelled as a ring (each piece relayed
// through the other receivers), rebuilds the slice (stage 1). A slice is cut
// the way Alpa rewrites the destination spec: greedily along tensor
// dimensions by gcd(pieces still needed, extent); when that cannot reach one
// piece per receiver, or the problem is not eligible, the task falls back to
// send_recv.

// Cuts `slice` into exactly `pieces` equal boxes, or returns nothing.
std::vector<Box> CutEvenly(const Box& slice, int pieces) {
  std::vector<Box> parts = {slice};
  int left = pieces;
  for (size_t d = 0; d < slice.size() && left > 1; ++d) {
    const int64_t extent = slice[d].size();
    const int64_t g = std::gcd(static_cast<int64_t>(left), extent);
    if (g <= 1) continue;
    std::vector<Box> next;
    next.reserve(parts.size() * g);
    const int64_t step = extent / g;
    for (const Box& part : parts) {
      for (int64_t k = 0; k < g; ++k) {
        Box piece = part;
        piece[d].begin = slice[d].begin + k * step;
        piece[d].end = piece[d].begin + step;
        next.push_back(std::move(piece));
      }
    }
    parts = std::move(next);
    left /= static_cast<int>(g);
  }
  if (left != 1) return {};
  return parts;
}

absl::StatusOr<ReshardPlan> PlanLocalAllGather(
    const std::vector<ReshardProblem>& problems,
    const std::vector<UnitTask>& tasks, const Topology& topology) {
  std::vector<char> eligible(problems.size(), 0);
  for (size_t p = 0; p < problems.size(); ++p) {
    const ReshardProblem& problem = problems[p];
    if (problem.dst_mesh.rank() > 2) continue;
    ASSIGN_OR_RETURN(
        std::vector<Tile> tiles,
        ComputeTiles(problem.tensor, problem.dst_mesh, problem.dst_spec));
    bool within_hosts = true;
    for (const Tile& tile : tiles) {
      within_hosts =
          within_hosts && HostsOf(tile.devices, topology).size() == 1;
    }
    eligible[p] = within_hosts;
  }
  PlanBuilder builder(problems, StrategyName(Strategy::kLocalAllGather));
  std::vector<int64_t> sent(topology.num_devices(), 0);
  for (const UnitTask& task : tasks) {
    const int k = static_cast<int>(task.receivers.size());
    std::vector<Box> pieces;
    if (eligible[task.tensor] && k >= 2) pieces = CutEvenly(task.slice, k);
    if (pieces.empty()) {
      AddSendRecv(task, sent, builder);
      continue;
    }
    std::vector<int> delivered(k);
    for (int i = 0; i < k; ++i) {
      const int sender = LeastLoaded(task.senders, sent);
      delivered[i] =
          builder.Add(task.tensor, pieces[i], sender, {task.receivers[i]});
      sent[sender] += builder.BytesOf(task.tensor, pieces[i]);
    }
    for (int i = 0; i < k; ++i) {
      std::vector<int> ring;
      for (int j = 1; j < k; ++j) ring.push_back(task.receivers[(i + j) % k]);
      builder.Add(task.tensor, pieces[i], task.receivers[i], std::move(ring),
                  {delivered[i]});
    }
  }
  return builder.Take();
}

// ---------------------------------------------------------------------------
// broadcast: one broadcast per unit task from its first replica, in the
// naive (destination tile, source slice) order, under the host issue order.
// The relay chain is the NCCL ring of the group [sender] + receivers, which
// are listed in ascending device id, i.e. host by host.

ReshardPlan PlanBroadcast(const std::vector<ReshardProblem>& problems,
                          const std::vector<UnitTask>& tasks,
                          const Topology& topology) {
  PlanBuilder builder(problems, StrategyName(Strategy::kBroadcast));
  HostIssueOrder order(topology.num_hosts);
  for (const UnitTask& task : tasks) {
    const int sender = task.senders.front();
    const std::vector<int> hosts =
        HostsInvolved(sender, task.receivers, topology);
    const int index = builder.Add(task.tensor, task.slice, sender,
                                  task.receivers, order.DepsOf(hosts));
    order.Issue(hosts, index);
  }
  return builder.Take();
}

// ---------------------------------------------------------------------------
// broadcast_lb: the paper's load balance and ordering. Host-level model: a
// task occupies its sender host and all its receiver hosts. Rounds of
// host-disjoint tasks are built by a randomized greedy (the best of up to
// 100 random trials: most tasks, then the lowest standard deviation of host
// loads), where each task's sender host is drawn among its free candidates
// with weight max(load) - load + 1 (bytes), favouring light hosts. Rounds run
// one after another under the host issue order. Tasks are sized by their
// slice (Alpa sizes them by the whole source tile). Within the chosen host
// the sender is the device with the fewest bytes sent so far.

struct LbTask {
  int task;
  std::vector<int> sender_hosts;
  std::vector<int> receiver_hosts;
  double bytes;
};

std::vector<std::pair<int, int>> LoadBalanceOrder(
    const std::vector<LbTask>& lb_tasks, int num_hosts) {
  std::vector<double> load(num_hosts, 0);
  std::vector<char> involved(num_hosts, 0);
  for (const LbTask& task : lb_tasks) {
    for (int h : task.sender_hosts) involved[h] = 1;
    for (int h : task.receiver_hosts) involved[h] = 1;
  }
  std::vector<int> involved_hosts;
  for (int h = 0; h < num_hosts; ++h) {
    if (involved[h]) involved_hosts.push_back(h);
  }

  Rng rng(kLoadBalanceSeed);
  std::vector<int> remaining(lb_tasks.size());
  std::iota(remaining.begin(), remaining.end(), 0);
  std::vector<std::pair<int, int>> order;  // (lb task, sender host)
  order.reserve(lb_tasks.size());
  std::vector<int> busy_stamp(num_hosts, -1);
  int stamp = 0;
  std::vector<int> permutation;
  std::vector<std::pair<int, int>> round;
  std::vector<std::pair<int, int>> best_round;
  std::vector<int> free_candidates;
  std::vector<double> weights;
  std::vector<double> trial_load(num_hosts, 0);
  std::vector<char> scheduled(lb_tasks.size(), 0);
  while (!remaining.empty()) {
    const int64_t budget =
        kLoadBalanceVisitsPerRound / static_cast<int64_t>(remaining.size());
    const int trials =
        static_cast<int>(std::clamp<int64_t>(budget, 1, kLoadBalanceTrials));
    const double max_load = *std::max_element(load.begin(), load.end());
    best_round.clear();
    double best_spread = 0;
    for (int trial = 0; trial < trials; ++trial) {
      ++stamp;
      permutation = remaining;
      for (size_t i = permutation.size(); i > 1; --i) {
        std::swap(permutation[i - 1],
                  permutation[rng.Below(static_cast<int>(i))]);
      }
      round.clear();
      for (int t : permutation) {
        const LbTask& task = lb_tasks[t];
        bool blocked = false;
        for (int h : task.receiver_hosts) blocked |= busy_stamp[h] == stamp;
        if (blocked) continue;
        free_candidates.clear();
        weights.clear();
        double total_weight = 0;
        for (int h : task.sender_hosts) {
          if (busy_stamp[h] == stamp) continue;
          free_candidates.push_back(h);
          weights.push_back(max_load - load[h] + 1);
          total_weight += weights.back();
        }
        if (free_candidates.empty()) continue;
        double pick = rng.Uniform() * total_weight;
        size_t chosen = 0;
        while (chosen + 1 < weights.size() && pick >= weights[chosen]) {
          pick -= weights[chosen];
          ++chosen;
        }
        const int sender = free_candidates[chosen];
        busy_stamp[sender] = stamp;
        for (int h : task.receiver_hosts) busy_stamp[h] = stamp;
        round.push_back({t, sender});
      }
      // Spread of the host loads this round would leave.
      for (int h : involved_hosts) trial_load[h] = load[h];
      for (const auto& [t, sender] : round) {
        trial_load[sender] += lb_tasks[t].bytes;
      }
      double mean = 0;
      for (int h : involved_hosts) mean += trial_load[h];
      mean /= involved_hosts.size();
      double spread = 0;
      for (int h : involved_hosts) {
        spread += (trial_load[h] - mean) * (trial_load[h] - mean);
      }
      if (round.size() > best_round.size() ||
          (round.size() == best_round.size() && spread < best_spread)) {
        best_round = round;
        best_spread = spread;
      }
    }
    for (const auto& [t, sender] : best_round) {
      load[sender] += lb_tasks[t].bytes;
      scheduled[t] = 1;
      order.push_back({t, sender});
    }
    remaining.erase(std::remove_if(remaining.begin(), remaining.end(),
                                   [&](int t) { return scheduled[t] != 0; }),
                    remaining.end());
  }
  return order;
}

ReshardPlan PlanBroadcastLb(const std::vector<ReshardProblem>& problems,
                            const std::vector<UnitTask>& tasks,
                            const Topology& topology) {
  std::vector<LbTask> lb_tasks;
  lb_tasks.reserve(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    lb_tasks.push_back({static_cast<int>(i),
                        HostsOf(tasks[i].senders, topology),
                        HostsOf(tasks[i].receivers, topology),
                        static_cast<double>(tasks[i].bytes)});
  }
  const std::vector<std::pair<int, int>> order =
      LoadBalanceOrder(lb_tasks, topology.num_hosts);

  PlanBuilder builder(problems, StrategyName(Strategy::kBroadcastLb));
  HostIssueOrder issue(topology.num_hosts);
  std::vector<int64_t> sent(topology.num_devices(), 0);
  std::vector<int> on_host;
  for (const auto& [t, sender_host] : order) {
    const UnitTask& task = tasks[lb_tasks[t].task];
    on_host.clear();
    for (int device : task.senders) {
      if (topology.HostOf(device) == sender_host) on_host.push_back(device);
    }
    const int sender = LeastLoaded(on_host, sent);
    sent[sender] += task.bytes;
    const std::vector<int> hosts =
        HostsInvolved(sender, task.receivers, topology);
    const int index = builder.Add(task.tensor, task.slice, sender,
                                  task.receivers, issue.DepsOf(hosts));
    issue.Issue(hosts, index);
  }
  return builder.Take();
}

// ---------------------------------------------------------------------------
// meshcast.
//
// What a plan can change is the egress side: if each byte enters each host
// once, every receiver host and device takes in the same bytes whatever the
// plan. Egress resources are each host's NIC and each device's port, with
// loads measured in seconds (bytes over the resource's bandwidth).
//
// 1. Receivers on a host that holds the slice copy it from the least-loaded
//    local replica, over the host fabric.
// 2. The bytes other hosts need leave the holders once. Which holder device
//    sends how much of each slice is a fractional assignment that minimizes
//    the busiest egress resource over all tensors together. Block coordinate
//    descent re-pours one task at a time onto its holders up to a common
//    level (water-filling over NICs and ports). A greedy that keeps tasks
//    whole wherever that stays within 0.1% of the level reached is
//    preferred, so that slices are split only when it pays.
// 3. Each part (split along the slice's longest dimension) travels one relay
//    chain: the sending host's own receivers, then every remote receiver
//    host, so each byte crosses each NIC once. Hosts whose NIC egress is
//    busiest go last (the last host forwards nothing); within a host, the
//    device that has forwarded least goes first.
// 4. Everything runs concurrently: all tensors of the request share the
//    links from the start.

// [begin, end) index ranges of holders that share a host: usually one.
using HostRunList = absl::InlinedVector<std::pair<size_t, size_t>, 1>;
// Bytes per holder of one network task (aligned with its holders).
using HolderAmounts = absl::InlinedVector<double, 2>;

struct NetworkTask {
  int task;
  DeviceList holders;  // devices with a replica, ascending
  HostRunList runs;    // holders grouped by host
  // Per holder: the device whose port carries what it sends over the
  // network. Usually the holder itself; but a holder that already sends the
  // whole slice to its own host's receivers sends its network parts along
  // that chain, so the last of those receivers forwards them instead.
  DeviceList payer;
  double bytes;
};

// Runs of `holders` (ascending device ids) that share a host.
HostRunList HostRuns(absl::Span<const int> holders, const Topology& topology) {
  HostRunList runs;
  for (size_t i = 0; i < holders.size();) {
    size_t j = i + 1;
    while (j < holders.size() && topology.SameHost(holders[j], holders[i])) {
      ++j;
    }
    runs.push_back({i, j});
    i = j;
  }
  return runs;
}

// Egress loads, in seconds of each resource's time.
class EgressLoads {
 public:
  explicit EgressLoads(const Topology& topology)
      : topology_(&topology),
        nic_(topology.num_hosts, 0),
        port_(topology.num_devices(), 0) {}

  double nic(int host) const { return nic_[host]; }
  double port(int device) const { return port_[device]; }

  // Charges `bytes` of `task` sent over the network by holder `i`.
  void AddNetwork(const NetworkTask& task, size_t i, double bytes) {
    port_[task.payer[i]] += bytes / topology_->intra_host_bandwidth;
    nic_[topology_->HostOf(task.holders[i])] +=
        bytes / topology_->inter_host_bandwidth;
  }
  // Charges `bytes` sent inside the host by `device` (port only).
  void AddLocal(int device, double bytes) {
    port_[device] += bytes / topology_->intra_host_bandwidth;
  }
  // Charges a relay through `host`'s NIC.
  void AddRelay(int host, double bytes) {
    nic_[host] += bytes / topology_->inter_host_bandwidth;
  }
  // Ingress loads no plan can change (each receiving host and device takes
  // in what it needs once): a level below them gains nothing.
  void RaiseFloor(double seconds) { floor_ = std::max(floor_, seconds); }
  double Busiest() const {
    double busiest = floor_;
    for (double load : nic_) busiest = std::max(busiest, load);
    for (double load : port_) busiest = std::max(busiest, load);
    return busiest;
  }

  // Seconds at which holder `i` would finish if it sent the whole task.
  double FinishWhole(const NetworkTask& task, size_t i) const {
    return std::max(
        nic_[topology_->HostOf(task.holders[i])] +
            task.bytes / topology_->inter_host_bandwidth,
        port_[task.payer[i]] + task.bytes / topology_->intra_host_bandwidth);
  }

  // Bytes the holders of `run` (one host) can send over the network before
  // the host's NIC or any of their ports passes `level` seconds.
  double HostRoom(const NetworkTask& task, std::pair<size_t, size_t> run,
                  double level) const {
    const int host = topology_->HostOf(task.holders[run.first]);
    const double nic =
        std::max(0.0, level - nic_[host]) * topology_->inter_host_bandwidth;
    double ports = 0;
    for (size_t i = run.first; i < run.second; ++i) {
      ports += std::max(0.0, level - port_[task.payer[i]]) *
               topology_->intra_host_bandwidth;
    }
    return std::min(nic, ports);
  }

  // Spreads `bytes` of the host's share over the holders of `run`, filling
  // the least-loaded ports first up to `level` (so a share stays on as few
  // devices as the level allows). Adds into `amounts`.
  void FillHost(const NetworkTask& task, std::pair<size_t, size_t> run,
                double bytes, double level, HolderAmounts& amounts) const {
    std::vector<size_t> order(run.second - run.first);
    std::iota(order.begin(), order.end(), run.first);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return port_[task.payer[a]] < port_[task.payer[b]];
    });
    double left = bytes;
    for (size_t i : order) {
      if (left <= 0) break;
      const double room = std::max(0.0, level - port_[task.payer[i]]) *
                          topology_->intra_host_bandwidth;
      const double take = i == order.back() ? left : std::min(left, room);
      amounts[i] += take;
      left -= take;
    }
  }

 private:
  const Topology* topology_;
  std::vector<double> nic_;
  std::vector<double> port_;
  double floor_ = 0;
};

// Bisection steps of a pour: the level to about 1e-15 of its range.
constexpr int kPourSteps = 50;

// Pours `bytes` onto the task's holders up to the lowest common level of
// NIC and port loads that takes them all; returns bytes per holder.
HolderAmounts Pour(const NetworkTask& task, double bytes,
                   const EgressLoads& loads, const Topology& topology) {
  HolderAmounts amounts(task.holders.size(), 0);
  double low = 0;
  double high = 0;
  for (size_t i = 0; i < task.holders.size(); ++i) {
    high =
        std::max(high, std::max(loads.port(task.payer[i]),
                                loads.nic(topology.HostOf(task.holders[i]))));
  }
  high += bytes / std::min(topology.inter_host_bandwidth,
                           topology.intra_host_bandwidth);
  const auto room_at = [&](double level) {
    double room = 0;
    for (const auto& run : task.runs) room += loads.HostRoom(task, run, level);
    return room;
  };
  for (int iteration = 0; iteration < kPourSteps; ++iteration) {
    const double mid = 0.5 * (low + high);
    if (room_at(mid) >= bytes) {
      high = mid;
    } else {
      low = mid;
    }
  }
  const double total = room_at(high);
  if (!(total > 0)) {  // cannot happen with finite loads; stay safe anyway
    amounts[0] = bytes;
    return amounts;
  }
  for (const auto& run : task.runs) {
    const double share = loads.HostRoom(task, run, high) * bytes / total;
    if (share > 0) loads.FillHost(task, run, share, high, amounts);
  }
  return amounts;
}

void Charge(const NetworkTask& task, const HolderAmounts& amounts, double sign,
            EgressLoads& loads) {
  for (size_t i = 0; i < amounts.size(); ++i) {
    if (amounts[i] != 0) loads.AddNetwork(task, i, sign * amounts[i]);
  }
}

// Bytes each holder sends of each task (aligned with NetworkTask::holders).
// `loads` holds the fixed loads on entry and the final ones on return.
std::vector<HolderAmounts> AssignEgress(const std::vector<NetworkTask>& tasks,
                                        const Topology& topology,
                                        EgressLoads& loads) {
  const size_t n = tasks.size();
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Most constrained first, then largest first.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (tasks[a].runs.size() != tasks[b].runs.size()) {
      return tasks[a].runs.size() < tasks[b].runs.size();
    }
    return tasks[a].bytes > tasks[b].bytes;
  });
  const EgressLoads fixed = loads;

  // Fractional assignment by block coordinate descent, each task re-poured
  // in turn. The work per pass is bounded so huge requests stay fast.
  std::vector<HolderAmounts> fractional(n);
  double total_bytes = 0;
  int64_t work_per_pass = 1;
  for (int t : order) {
    // Start from whole tasks, each where it finishes lowest.
    fractional[t].assign(tasks[t].holders.size(), 0);
    size_t best = 0;
    for (size_t i = 1; i < tasks[t].holders.size(); ++i) {
      if (loads.FinishWhole(tasks[t], i) < loads.FinishWhole(tasks[t], best)) {
        best = i;
      }
    }
    fractional[t][best] = tasks[t].bytes;
    Charge(tasks[t], fractional[t], +1, loads);
    total_bytes += tasks[t].bytes;
    if (tasks[t].holders.size() > 1) work_per_pass += tasks[t].holders.size();
  }
  const int passes = static_cast<int>(std::clamp<int64_t>(
      30'000'000 / (kPourSteps * work_per_pass), 1, 32));
  for (int pass = 0; pass < passes; ++pass) {
    double moved = 0;
    for (int t : order) {
      if (tasks[t].holders.size() < 2) continue;
      Charge(tasks[t], fractional[t], -1, loads);
      HolderAmounts amounts = Pour(tasks[t], tasks[t].bytes, loads, topology);
      for (size_t i = 0; i < amounts.size(); ++i) {
        moved += std::abs(amounts[i] - fractional[t][i]);
      }
      fractional[t] = std::move(amounts);
      Charge(tasks[t], fractional[t], +1, loads);
    }
    if (moved <= 1e-9 * total_bytes) break;
  }
  const double level = loads.Busiest();
  const EgressLoads fractional_loads = loads;

  // Greedy: a task goes whole to the holder where it finishes lowest if that
  // stays under the level; otherwise it fills the holders up to the level,
  // lightest hosts first, and pours any rest on top.
  const double limit = level * (1 + 1e-3);
  loads = fixed;
  std::vector<HolderAmounts> greedy(n);
  std::vector<size_t> runs_by_load;
  for (int t : order) {
    const NetworkTask& task = tasks[t];
    greedy[t].assign(task.holders.size(), 0);
    size_t best = 0;
    double best_finish = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < task.holders.size(); ++i) {
      const double finish = loads.FinishWhole(task, i);
      if (finish < best_finish) {
        best_finish = finish;
        best = i;
      }
    }
    if (best_finish <= limit) {
      greedy[t][best] = task.bytes;
    } else {
      runs_by_load.resize(task.runs.size());
      std::iota(runs_by_load.begin(), runs_by_load.end(), 0);
      std::stable_sort(
          runs_by_load.begin(), runs_by_load.end(), [&](size_t a, size_t b) {
            return loads.nic(
                       topology.HostOf(task.holders[task.runs[a].first])) <
                   loads.nic(topology.HostOf(task.holders[task.runs[b].first]));
          });
      double left = task.bytes;
      for (size_t r : runs_by_load) {
        const double room = loads.HostRoom(task, task.runs[r], level);
        if (room < 1e-3 * task.bytes) continue;
        const double take = left - room < 1e-9 * task.bytes ? left : room;
        loads.FillHost(task, task.runs[r], take, level, greedy[t]);
        left -= take;
        if (left <= 0) break;
      }
      if (left > 0) {
        Charge(task, greedy[t], +1, loads);
        const HolderAmounts rest = Pour(task, left, loads, topology);
        Charge(task, greedy[t], -1, loads);
        for (size_t i = 0; i < rest.size(); ++i) greedy[t][i] += rest[i];
      }
    }
    Charge(task, greedy[t], +1, loads);
  }
  if (loads.Busiest() <= limit) return greedy;

  // Keep the fractional assignment, folding negligible shares (which would
  // become tiny transfers) into the task's largest one.
  loads = fractional_loads;
  for (size_t t = 0; t < n; ++t) {
    HolderAmounts& share = fractional[t];
    const size_t largest =
        std::max_element(share.begin(), share.end()) - share.begin();
    for (size_t i = 0; i < share.size(); ++i) {
      if (i != largest && share[i] > 0 && share[i] < 1e-3 * tasks[t].bytes) {
        loads.AddNetwork(tasks[t], i, -share[i]);
        loads.AddNetwork(tasks[t], largest, share[i]);
        share[largest] += share[i];
        share[i] = 0;
      }
    }
  }
  return fractional;
}

// Split broadcasts (step 3). A chain through H remote hosts pays, on top of
// the part's bytes at the NIC rate, a pipeline chunk's fill and a latency
// per hop, inside hosts too: for a part no bigger than a chunk nothing
// pipelines, and the chain takes H times as long as one hop. Cut into one
// piece per host instead, each piece crosses to one device of its host
// (the scatter), which sends it on to its host's other receivers and to
// every other remote host's (each a transfer after the scatter): every
// byte crosses at most two hops between hosts, and each host's NIC still
// sends about one copy of the part, as a relay does in the chain. Done
// once, the forwards would wait for the whole scatter (twice the bytes'
// time); so the part goes in rounds: round r's scatter starts when round
// r - 1's has finished, while the hosts send round r - 1's pieces on.
// Or as relay trees, one per piece (Transfer::parents): the forwarder
// passes each chunk on as soon as it has it, so no rounds, no budget of
// transfers, and one transfer per remote host; but the pieces share the
// sender's NIC, so each forwarder waits for a chunk at 1 / H of its rate,
// which rounds avoid for pieces no bigger than a chunk. Or as two binary
// relay trees over the hosts (BinaryTreeSeconds below), whose fill grows
// with log2(H) instead. The plan is made each way, and the simulator picks
// (PlanMeshcastChecked).

// Transfers one split part may take; past it, pieces are fewer than hosts
// (and the hosts holding one send it more often), then rounds fewer.
constexpr size_t kSplitTransferBudget = 16384;
// Rounds at most: where latency and setup cost nothing the estimate
// would take as many as the budget allows, for little gain past this.
constexpr size_t kMaxSplitRounds = 16;

// The receivers of a part outside its sending host.
struct RemoteReceivers {
  size_t hosts = 0;
  size_t devices = 0;  // on all of them
  size_t widest = 0;   // on the host with the most
};

struct SplitShape {
  size_t pieces = 1;  // per round, one per remote host within the budget
  size_t rounds = 1;
};

// Latency and pipeline fill of `hops` hops inside a host for `bytes`.
double InHostHopsSeconds(double bytes, size_t hops, const Topology& topology) {
  return static_cast<double>(hops) *
         (topology.intra_host_latency +
          std::min(bytes, topology.pipeline_chunk_bytes) /
              topology.intra_host_bandwidth);
}

// What one round of a split costs beyond its bytes: a latency, and the
// set-ups of the transfers the forwarding device starts in it, one per
// remote host. The simulator lets set-ups overlap, but a CPU worker runs
// its steps' set-ups on its own cores (measured on the emulated cluster:
// rounds sized by one set-up each made 1 MiB to 4 hosts slower than the
// chain), so they count one after another here.
double SplitRoundSeconds(const RemoteReceivers& remote,
                         const Topology& topology) {
  return static_cast<double>(remote.hosts) * topology.transfer_setup_seconds +
         topology.inter_host_latency;
}

// The split of `bytes`: as many pieces as hosts the budget allows, and the
// rounds that minimize SplitSeconds: each round costs SplitRoundSeconds,
// and more rounds shrink the last round's forwards, so
// sqrt(forwarded bytes' time / per-round cost).
SplitShape ChooseSplit(double bytes, const RemoteReceivers& remote,
                       const Topology& topology) {
  SplitShape shape;
  const size_t per_piece = remote.hosts + 1;  // scatter + forwards
  shape.pieces = std::max<size_t>(
      1, std::min(remote.hosts, kSplitTransferBudget / per_piece));
  const size_t max_rounds =
      std::max<size_t>(1, kSplitTransferBudget / (shape.pieces * per_piece));
  const double forward_share =
      std::min(1.0, static_cast<double>(remote.hosts - 1) /
                        static_cast<double>(shape.pieces));
  const double per_round = SplitRoundSeconds(remote, topology);
  const double best =
      per_round > 0 ? std::sqrt(forward_share * bytes /
                                (topology.inter_host_bandwidth * per_round))
                    : static_cast<double>(max_rounds);
  shape.rounds =
      std::clamp<size_t>(static_cast<size_t>(std::llround(std::min(best, 1e6))),
                         1, std::min(max_rounds, kMaxSplitRounds));
  return shape;
}

// Uncontended seconds for `bytes` to reach the remote receivers along one
// chain: every hop between hosts and inside them adds its latency and a
// chunk's fill.
double ChainSeconds(double bytes, const RemoteReceivers& remote,
                    const Topology& topology) {
  const double fill = std::min(bytes, topology.pipeline_chunk_bytes) /
                      topology.inter_host_bandwidth;
  return topology.transfer_setup_seconds +
         bytes / topology.inter_host_bandwidth +
         static_cast<double>(remote.hosts) * topology.inter_host_latency +
         static_cast<double>(remote.hosts - 1) * fill +
         InHostHopsSeconds(bytes, remote.devices - remote.hosts, topology);
}

// The same, split: the rounds' scatters back to back, then the last
// round's forwards (or, where the pieces are fewer than the hosts and the
// forwards are the slower phase, every round's forwards after the first
// scatter), and one host's hops inside it.
double SplitSeconds(double bytes, const RemoteReceivers& remote,
                    const SplitShape& shape, const Topology& topology) {
  const double rounds = static_cast<double>(shape.rounds);
  const double forward_share =
      static_cast<double>(remote.hosts - 1) / static_cast<double>(shape.pieces);
  const double seconds = bytes / topology.inter_host_bandwidth;
  const double piece = bytes / (rounds * static_cast<double>(shape.pieces));
  return (rounds + 1) * SplitRoundSeconds(remote, topology) +
         std::max(1.0, forward_share) * seconds +
         std::min(1.0, forward_share) * seconds / rounds +
         InHostHopsSeconds(piece, remote.widest - 1, topology);
}

// The chunks of relay trees. The H trees of a part share the sender's NIC,
// so a forwarder gets each chunk at 1 / H of its rate and passes the last
// one on H chunk-times after the sender finished: chunks of 1% of the
// part / H keep that wait at 1% of the part's time. But no smaller than a
// worker moves well: 64 KiB, and 20 us at the NIC rate (a GPU worker
// issues one NCCL group per chunk and round).
constexpr double kTreeFillShare = 0.01;
constexpr double kMinTreeChunkBytes = 64 << 10;
constexpr double kMinTreeChunkSeconds = 20e-6;

// Chunks that keep a tree's fill, `fill_chunks` chunk-times, at
// kTreeFillShare of the part's time, within the floor and the topology's
// chunk.
double FillBoundChunkBytes(double bytes, double fill_chunks,
                           const Topology& topology) {
  const double wanted = kTreeFillShare * bytes / fill_chunks;
  const double floor = std::max(
      kMinTreeChunkBytes, kMinTreeChunkSeconds * topology.inter_host_bandwidth);
  return std::min(topology.pipeline_chunk_bytes, std::max(wanted, floor));
}

// A tree step's Step.chunk_bytes: 0 (the worker's) where it is the
// topology's chunk.
int64_t TreeStepChunkBytes(double chunk, const Topology& topology) {
  return chunk < topology.pipeline_chunk_bytes ? static_cast<int64_t>(chunk)
                                               : 0;
}

double TreeChunkBytes(double bytes, size_t hosts, const Topology& topology) {
  return FillBoundChunkBytes(bytes, static_cast<double>(hosts), topology);
}

// The chunks above assume a tree has its NICs to itself. In a plan of many
// transfers it moves at its share of the busiest NIC on its path, and each
// chunk then waits at that share at every level: thousands of small trees
// beside bulk traffic (a whole model's replicated tensors) paid a tail as
// long as a quarter of the plan with 1 MiB chunks. Once the plan is whole,
// every tree whose bytes cross two hosts or more in a row gets the chunk
// that keeps its fill at kTreeFillShare of its own time at that share,
// with the per-chunk floor at that share too (a chunk that takes long at
// the tree's rate is long beside a worker's per-chunk cost). Chunks only
// shrink.
void FitTreeChunksToNicShares(ReshardPlan& plan, const Topology& topology) {
  const int hosts = topology.num_hosts;
  // Bytes through each host's NIC: egress at [h], ingress at [hosts + h].
  std::vector<double> nic_bytes(2 * static_cast<size_t>(hosts), 0.0);
  const auto for_each_remote_hop = [&](const Transfer& t, auto&& visit) {
    for (size_t k = 0; k < t.dst_devices.size(); ++k) {
      const int parent = ParentPosition(t, k);
      const int from = parent == 0 ? t.src_device : t.dst_devices[parent - 1];
      const int to = t.dst_devices[k];
      if (!topology.SameHost(from, to)) {
        visit(k, topology.HostOf(from), topology.HostOf(to));
      }
    }
  };
  for (const Transfer& t : plan.transfers) {
    const double bytes = static_cast<double>(t.bytes);
    for_each_remote_hop(t, [&](size_t, int from, int to) {
      nic_bytes[from] += bytes;
      nic_bytes[hosts + to] += bytes;
    });
  }
  const double nic = topology.inter_host_bandwidth;
  std::vector<int> depth;  // hops between hosts from the sender, per position
  for (Transfer& t : plan.transfers) {
    if (t.parents.empty() || t.bytes <= 0) continue;
    const double bytes = static_cast<double>(t.bytes);
    double rate = nic;
    for_each_remote_hop(t, [&](size_t, int from, int to) {
      const double busiest = std::max(nic_bytes[from], nic_bytes[hosts + to]);
      rate = std::min(rate, nic * bytes / busiest);
    });
    // Parents come before their children (AddTree's order).
    depth.assign(t.dst_devices.size() + 1, 0);
    int deepest = 0;
    for (size_t k = 0; k < t.dst_devices.size(); ++k) {
      const int parent = ParentPosition(t, k);
      const int from = parent == 0 ? t.src_device : t.dst_devices[parent - 1];
      depth[k + 1] =
          depth[parent] + (topology.SameHost(from, t.dst_devices[k]) ? 0 : 1);
      deepest = std::max(deepest, depth[k + 1]);
    }
    if (deepest < 2) continue;
    const double current = t.chunk_bytes > 0
                               ? static_cast<double>(t.chunk_bytes)
                               : topology.pipeline_chunk_bytes;
    const double fitted =
        std::max({kTreeFillShare * bytes / deepest, kMinTreeChunkBytes,
                  kMinTreeChunkSeconds * rate});
    if (fitted < current) {
      t.chunk_bytes = TreeStepChunkBytes(std::floor(fitted), topology);
    }
  }
}

// The same as relay trees (one per piece, no rounds): the sender's NIC and
// every host's ingress carry the part once, the forwarders' egress
// (H - 1) / H of it; every byte crosses two hops between hosts, and the
// second starts a chunk after the first (pipeline fill), not after the
// whole piece. The H trees share the sender's NIC, so a forwarder gets
// that chunk at 1 / H of the NIC rate.
double TreeSeconds(double bytes, const RemoteReceivers& remote,
                   const Topology& topology) {
  const double hosts = static_cast<double>(remote.hosts);
  const double piece = bytes / hosts;
  return topology.transfer_setup_seconds +
         bytes / topology.inter_host_bandwidth +
         2 * topology.inter_host_latency +
         hosts *
             std::min(piece, TreeChunkBytes(bytes, remote.hosts, topology)) /
             topology.inter_host_bandwidth +
         InHostHopsSeconds(piece, remote.widest - 1, topology);
}

// Two complementary binary relay trees (NCCL's double binary tree, over
// hosts): each carries half of the part; in each, a remote host's first
// receiver passes every chunk on along its host and to up to two other
// hosts, and the hosts that forward in one tree are leaves of the other.
// Every NIC then sends and receives about the part once, as in a chain,
// but a byte crosses only about log2(H) + 1 hops between hosts, each
// waiting for a chunk at half the NIC rate (a forwarder feeds two hosts,
// the sender two roots): the fill grows as 2 log2(H) chunks, not H.

// Hops between hosts from the sender to the deepest of `hosts` hosts laid
// out breadth first in a binary tree.
size_t BinaryTreeHops(size_t hosts) {
  size_t hops = 1;
  while ((size_t{2} << (hops - 1)) - 1 < hosts) ++hops;
  return hops;
}

// The fill is 2 chunk-times per hop.
double BinaryTreeChunkBytes(double bytes, size_t hosts,
                            const Topology& topology) {
  return FillBoundChunkBytes(
      bytes, 2.0 * static_cast<double>(BinaryTreeHops(hosts)), topology);
}

double BinaryTreeSeconds(double bytes, const RemoteReceivers& remote,
                         const Topology& topology) {
  const double hops = static_cast<double>(BinaryTreeHops(remote.hosts));
  const double half = bytes / 2;
  return topology.transfer_setup_seconds +
         bytes / topology.inter_host_bandwidth +
         hops * topology.inter_host_latency +
         2 * hops *
             std::min(half,
                      BinaryTreeChunkBytes(bytes, remote.hosts, topology)) /
             topology.inter_host_bandwidth +
         InHostHopsSeconds(half, remote.widest - 1, topology);
}

// How the meshcast plan may split a broadcast whose chain would be long.
enum class SplitMode {
  kNone,         // every part travels one chain
  kRounds,       // scatter and forwards as separate transfers, in rounds
  kTrees,        // one relay tree per piece, rounds where a tree cannot hold it
  kBinaryTrees,  // two binary relay trees, rounds where a tree cannot hold it
};

// Whether a part of `bytes` goes split: when that is faster uncontended
// and the chain would end late enough to matter (past
// kSplitWhenChainEndsPast of the plan's busiest resource, `level`), since
// a split adds transfers and store-and-forward steps.
constexpr double kSplitWhenChainEndsPast = 0.5;
// ... or when its latency and fill are more than this many times its
// bytes' time (binary trees only).
constexpr double kFillDominatedChain = 4;

double SplitEstimate(double bytes, const RemoteReceivers& remote,
                     SplitMode mode, const Topology& topology) {
  switch (mode) {
    case SplitMode::kTrees:
      return TreeSeconds(bytes, remote, topology);
    case SplitMode::kBinaryTrees:
      return BinaryTreeSeconds(bytes, remote, topology);
    default:
      return SplitSeconds(bytes, remote, ChooseSplit(bytes, remote, topology),
                          topology);
  }
}

bool SplitPays(double bytes, const RemoteReceivers& remote, double level,
               SplitMode mode, const Topology& topology) {
  if (remote.hosts < 2 || mode == SplitMode::kNone) return false;
  const double chain = ChainSeconds(bytes, remote, topology);
  if (SplitEstimate(bytes, remote, mode, topology) >= chain) return false;
  if (chain > kSplitWhenChainEndsPast * level) return true;
  // A chain whose fill outweighs its bytes ends late however early it
  // would end alone: among other flows, each relay passes its last chunk
  // on at its share of the NIC. A binary tree has log2(H) levels to fill,
  // not H.
  const double data = bytes / topology.inter_host_bandwidth;
  return mode == SplitMode::kBinaryTrees &&
         chain - topology.transfer_setup_seconds - data >
             kFillDominatedChain * data;
}

// Expected bytes each of `receivers` chain members forwards of `bytes`.
double ForwardShare(double bytes, size_t receivers) {
  return bytes * static_cast<double>(receivers - 1) /
         static_cast<double>(receivers);
}

// `splits` (when not null) receives the number of parts that went split,
// `candidates` the number that went to two remote hosts or more.
ReshardPlan PlanMeshcast(const std::vector<ReshardProblem>& problems,
                         const std::vector<UnitTask>& tasks,
                         const Topology& topology, SplitMode mode, int* splits,
                         int* candidates = nullptr) {
  if (splits != nullptr) *splits = 0;
  if (candidates != nullptr) *candidates = 0;
  const int num_hosts = topology.num_hosts;
  PlanBuilder builder(problems, StrategyName(Strategy::kMeshcast));
  builder.Reserve(tasks.size());  // at least one transfer per task
  EgressLoads loads(topology);

  // Receivers of the current task grouped by host.
  std::vector<std::vector<int>> receivers_on(num_hosts);
  const auto group_receivers = [&](const UnitTask& task) {
    for (int device : task.receivers) {
      receivers_on[topology.HostOf(device)].push_back(device);
    }
  };
  const auto clear_receivers = [&](const UnitTask& task) {
    for (int device : task.receivers) {
      receivers_on[topology.HostOf(device)].clear();
    }
  };

  // Largest tasks first, so that device and relay choices place them while
  // loads are still even.
  std::vector<int> by_size(tasks.size());
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(), [&](int a, int b) {
    return tasks[a].bytes > tasks[b].bytes;
  });

  // 1. Local chains (fixed loads, forwards included) and the network part
  // of every task.
  struct LocalChain {
    int host;
    int sender;
    std::vector<int> receivers;  // chain order
  };
  std::vector<std::vector<LocalChain>> local_chains(tasks.size());
  std::vector<absl::InlinedVector<int, 2>> remote_hosts(tasks.size());
  std::vector<NetworkTask> network_tasks;
  network_tasks.reserve(tasks.size());  // untouched room costs nothing
  std::vector<int> network_index(tasks.size(), -1);
  const auto by_port_load = [&](std::vector<int>& devices) {
    std::stable_sort(devices.begin(), devices.end(), [&](int a, int b) {
      return loads.port(a) < loads.port(b);
    });
  };
  for (int i : by_size) {
    const UnitTask& task = tasks[i];
    const double bytes = static_cast<double>(task.bytes);
    group_receivers(task);
    const HostRunList runs = HostRuns(task.senders, topology);
    for (const auto& [begin, end] : runs) {
      const int host = topology.HostOf(task.senders[begin]);
      if (receivers_on[host].empty()) continue;
      LocalChain local{host, task.senders[begin], receivers_on[host]};
      for (size_t k = begin; k < end; ++k) {
        if (loads.port(task.senders[k]) < loads.port(local.sender)) {
          local.sender = task.senders[k];
        }
      }
      by_port_load(local.receivers);
      loads.AddLocal(local.sender, bytes);
      for (size_t c = 0; c + 1 < local.receivers.size(); ++c) {
        loads.AddLocal(local.receivers[c], bytes);
      }
      local_chains[i].push_back(std::move(local));
      receivers_on[host].clear();
    }
    // Remote receivers forward what they get along the chain, all but the
    // last one: charge each its expected share until the chains are known.
    size_t remote_receivers = 0;
    for (int host : HostsOf(task.receivers, topology)) {
      if (receivers_on[host].empty()) continue;
      remote_hosts[i].push_back(host);
      remote_receivers += receivers_on[host].size();
    }
    for (int host : remote_hosts[i]) {
      for (int device : receivers_on[host]) {
        loads.AddLocal(device, ForwardShare(bytes, remote_receivers));
      }
    }
    if (!remote_hosts[i].empty()) {
      network_index[i] = static_cast<int>(network_tasks.size());
      NetworkTask network{i, task.senders, runs, task.senders, bytes};
      for (const LocalChain& local : local_chains[i]) {
        const size_t k = std::lower_bound(task.senders.begin(),
                                          task.senders.end(), local.sender) -
                         task.senders.begin();
        network.payer[k] = local.receivers.back();
      }
      network_tasks.push_back(std::move(network));
    }
    clear_receivers(task);
  }
  // 2. Who sends how much.
  {
    std::vector<double> host_in(num_hosts, 0);
    std::vector<double> device_in(topology.num_devices(), 0);
    for (size_t i = 0; i < tasks.size(); ++i) {
      for (int host : remote_hosts[i]) host_in[host] += tasks[i].bytes;
      for (int device : tasks[i].receivers) device_in[device] += tasks[i].bytes;
    }
    for (double bytes : host_in) {
      loads.RaiseFloor(bytes / topology.inter_host_bandwidth);
    }
    for (double bytes : device_in) {
      loads.RaiseFloor(bytes / topology.intra_host_bandwidth);
    }
  }
  const std::vector<HolderAmounts> egress =
      AssignEgress(network_tasks, topology, loads);
  // The busiest resource's time: a chain that ends well before it costs
  // the plan nothing, however long its tail.
  const double level = loads.Busiest();

  // Charges `bytes` to every member of an in-host chain but the last (each
  // forwards them to the next).
  const auto charge_forwards = [&](absl::Span<const int> chain_on_host,
                                   double bytes) {
    for (size_t c = 0; c + 1 < chain_on_host.size(); ++c) {
      loads.AddLocal(chain_on_host[c], bytes);
    }
  };
  // Calls place(j, piece, amount, holders) for every non-empty piece j of
  // `pieces`, headed for remote host remote[j], whose receivers `holders`
  // are sorted by port load (the first, the least loaded, forwards the
  // piece); then charges that host's NIC the piece's relay to the other
  // remote hosts.
  const auto place_pieces = [&](int tensor, absl::Span<const Box> pieces,
                                absl::Span<const int> remote,
                                const auto& place) {
    for (size_t j = 0; j < pieces.size(); ++j) {
      const int64_t piece_bytes = builder.BytesOf(tensor, pieces[j]);
      if (piece_bytes == 0) continue;
      const double amount = static_cast<double>(piece_bytes);
      std::vector<int>& holders = receivers_on[remote[j]];
      by_port_load(holders);
      place(j, pieces[j], amount, absl::MakeConstSpan(holders));
      loads.AddRelay(remote[j],
                     amount * static_cast<double>(remote.size() - 1));
    }
  };

  // A split broadcast of `part` from `sender` through `local` (the sending
  // host's own receivers, who get every piece) to the `remote` hosts, in
  // rounds: in each, piece j goes to the first receiver of remote[j] (the
  // least loaded port; after piece j of the round before), which sends it
  // on to its host's other receivers and to every other remote host's.
  std::vector<int> scatter_chain;
  std::vector<int> last_scatter;
  const auto split_broadcast =
      [&](int tensor, const Box& part, int sender, absl::Span<const int> local,
          absl::Span<const int> remote, const SplitShape& shape) {
        last_scatter.assign(shape.pieces, -1);
        for (const Box& block :
             SplitBox(part, std::vector<double>(shape.rounds, 1.0))) {
          const std::vector<Box> pieces =
              SplitBox(block, std::vector<double>(shape.pieces, 1.0));
          place_pieces(tensor, pieces, remote,
                       [&](size_t j, const Box& piece, double amount,
                           absl::Span<const int> holders) {
                         const int forwarder = holders.front();
                         scatter_chain.assign(local.begin(), local.end());
                         scatter_chain.push_back(forwarder);
                         std::vector<int> after;
                         if (last_scatter[j] >= 0)
                           after.push_back(last_scatter[j]);
                         const int scatter =
                             builder.Add(tensor, piece, sender, scatter_chain,
                                         std::move(after));
                         last_scatter[j] = scatter;
                         const auto send_on = [&](absl::Span<const int> to) {
                           builder.Add(tensor, piece, forwarder, to, {scatter});
                           loads.AddLocal(forwarder, amount);
                           charge_forwards(to, amount);
                         };
                         if (holders.size() > 1) send_on(holders.subspan(1));
                         for (size_t k = 0; k < remote.size(); ++k) {
                           if (k != j) send_on(receivers_on[remote[k]]);
                         }
                       });
        }
      };

  // The same as relay trees, one per remote host and no rounds: piece j
  // crosses through the sending host's own receivers to the forwarder of
  // remote[j], which passes each chunk on at once along its host and to
  // one receiver of every other remote host, who passes it along its own.
  std::vector<int> tree_devices;
  std::vector<int> tree_parents;
  // Appends `devices` to the tree as a chain hanging from chain position
  // `parent`.
  const auto hang = [&](absl::Span<const int> devices, int parent) {
    for (int device : devices) {
      tree_devices.push_back(device);
      tree_parents.push_back(parent);
      parent = static_cast<int>(tree_devices.size());
    }
  };
  const auto tree_broadcast = [&](int tensor, const Box& part, int sender,
                                  absl::Span<const int> local,
                                  absl::Span<const int> remote) {
    const std::vector<Box> pieces =
        SplitBox(part, std::vector<double>(remote.size(), 1.0));
    const int64_t chunk_bytes = TreeStepChunkBytes(
        TreeChunkBytes(static_cast<double>(builder.BytesOf(tensor, part)),
                       remote.size(), topology),
        topology);
    place_pieces(tensor, pieces, remote,
                 [&](size_t j, const Box& piece, double amount,
                     absl::Span<const int> holders) {
                   tree_devices.clear();
                   tree_parents.clear();
                   hang(local, 0);
                   hang(holders.subspan(0, 1), local.size());
                   const int forwarder = static_cast<int>(tree_devices.size());
                   if (holders.size() > 1) {
                     hang(holders.subspan(1), forwarder);
                     loads.AddLocal(holders.front(), amount);
                     charge_forwards(holders.subspan(1), amount);
                   }
                   for (size_t k = 0; k < remote.size(); ++k) {
                     if (k == j) continue;
                     std::vector<int>& on_host = receivers_on[remote[k]];
                     by_port_load(on_host);
                     hang(on_host, forwarder);
                     loads.AddLocal(holders.front(), amount);
                     charge_forwards(on_host, amount);
                   }
                   builder.AddTree(tensor, piece, sender, tree_devices,
                                   tree_parents, chunk_bytes);
                 });
  };

  // The same as two binary relay trees (BinaryTreeSeconds), each with half
  // of the part: the remote hosts breadth first in NIC-load order for the
  // first, in the reverse order for the second, so that the first half of
  // the list (the forwarders of the first) are leaves of the second. Host
  // i's entry (its least loaded receiver) gets the half from the entry of
  // host (i - 1) / 2, or, for the root, from the sending host's last
  // receiver (the sender itself without one), and passes it along its host
  // and to the entries of hosts 2i + 1 and 2i + 2.
  std::vector<int> entry_position;
  std::vector<size_t> preorder;
  const auto binary_tree_broadcast = [&](int tensor, const Box& part,
                                         int sender,
                                         absl::Span<const int> local,
                                         absl::Span<const int> remote) {
    const size_t n = remote.size();
    const std::vector<Box> halves = SplitBox(part, {1.0, 1.0});
    const int64_t chunk_bytes = TreeStepChunkBytes(
        BinaryTreeChunkBytes(static_cast<double>(builder.BytesOf(tensor, part)),
                             n, topology),
        topology);
    for (size_t tree = 0; tree < halves.size(); ++tree) {
      const int64_t half_bytes = builder.BytesOf(tensor, halves[tree]);
      if (half_bytes == 0) continue;
      const double amount = static_cast<double>(half_bytes);
      const auto host_at = [&](size_t i) {
        return remote[tree == 0 ? i : n - 1 - i];
      };
      tree_devices.clear();
      tree_parents.clear();
      hang(local, 0);
      // Preorder over the heap layout (host i's children are 2i + 1 and
      // 2i + 2): a host's entry and its chain, then its subtrees, so that
      // parents come first and each host's devices are together.
      entry_position.assign(n, 0);
      preorder.assign(1, 0);
      while (!preorder.empty()) {
        const size_t i = preorder.back();
        preorder.pop_back();
        std::vector<int>& holders = receivers_on[host_at(i)];
        by_port_load(holders);
        int parent = static_cast<int>(local.size());
        if (i > 0) {
          const size_t up = (i - 1) / 2;
          parent = entry_position[up];
          loads.AddLocal(tree_devices[parent - 1], amount);
          loads.AddRelay(host_at(up), amount);
        }
        entry_position[i] = static_cast<int>(tree_devices.size()) + 1;
        hang(holders, parent);
        if (holders.size() > 1) loads.AddLocal(holders.front(), amount);
        charge_forwards(absl::MakeConstSpan(holders).subspan(1), amount);
        for (size_t child : {2 * i + 2, 2 * i + 1}) {
          if (child < n) preorder.push_back(child);
        }
      }
      builder.AddTree(tensor, halves[tree], sender, tree_devices, tree_parents,
                      chunk_bytes);
    }
  };

  // 3. Emit chains. Relays and remote forwards add to the loads as they are
  // placed (local chains were charged above).
  std::vector<int> chain;
  std::vector<int> remote;
  std::vector<double> weights;
  std::vector<int> part_senders;
  std::vector<Box> parts;
  for (int i : by_size) {
    const UnitTask& task = tasks[i];
    group_receivers(task);
    // The parts of the slice and the device each leaves from (-1: the task
    // needs no network at all).
    parts.clear();
    part_senders.clear();
    if (network_index[i] >= 0) {
      const NetworkTask& network = network_tasks[network_index[i]];
      const HolderAmounts& share = egress[network_index[i]];
      weights.clear();
      for (size_t h = 0; h < share.size(); ++h) {
        if (share[h] <= 0) continue;
        weights.push_back(share[h]);
        part_senders.push_back(network.holders[h]);
      }
      parts = SplitBox(task.slice, weights);
    } else {
      parts.push_back(task.slice);
      part_senders.push_back(-1);
    }
    for (size_t p = 0; p < parts.size(); ++p) {
      const int64_t bytes = builder.BytesOf(task.tensor, parts[p]);
      if (bytes == 0) continue;
      const int sender = part_senders[p];
      const int sender_host = sender >= 0 ? topology.HostOf(sender) : -1;
      if (sender >= 0) {
        // The sending host's own receivers first, in their local order.
        chain.clear();
        for (const LocalChain& local : local_chains[i]) {
          if (local.host == sender_host) chain = local.receivers;
        }
        const size_t local_count = chain.size();
        remote.assign(remote_hosts[i].begin(), remote_hosts[i].end());
        size_t remote_receivers = 0;
        for (int host : remote) remote_receivers += receivers_on[host].size();
        for (int host : remote) {
          for (int device : receivers_on[host]) {
            loads.AddLocal(device, -ForwardShare(static_cast<double>(bytes),
                                                 remote_receivers));
          }
        }
        std::stable_sort(remote.begin(), remote.end(), [&](int a, int b) {
          return loads.nic(a) < loads.nic(b);
        });
        RemoteReceivers receivers{remote.size(), remote_receivers, 0};
        if (candidates != nullptr && remote.size() >= 2) ++*candidates;
        for (int host : remote) {
          receivers.widest =
              std::max(receivers.widest, receivers_on[host].size());
        }
        // Trees where one relay group holds them all, rounds otherwise.
        SplitMode how = mode;
        if ((how == SplitMode::kTrees || how == SplitMode::kBinaryTrees) &&
            1 + local_count + remote_receivers >
                static_cast<size_t>(kMaxRelayGroupDevices)) {
          how = SplitMode::kRounds;
        }
        if (SplitPays(static_cast<double>(bytes), receivers, level, how,
                      topology)) {
          if (how == SplitMode::kTrees) {
            tree_broadcast(task.tensor, parts[p], sender, chain, remote);
          } else if (how == SplitMode::kBinaryTrees) {
            binary_tree_broadcast(task.tensor, parts[p], sender, chain, remote);
          } else {
            split_broadcast(
                task.tensor, parts[p], sender, chain, remote,
                ChooseSplit(static_cast<double>(bytes), receivers, topology));
          }
          if (splits != nullptr) ++*splits;
        } else {
          for (size_t r = 0; r < remote.size(); ++r) {
            std::vector<int>& on_host = receivers_on[remote[r]];
            by_port_load(on_host);
            chain.insert(chain.end(), on_host.begin(), on_host.end());
            if (r + 1 < remote.size()) {
              loads.AddRelay(remote[r], static_cast<double>(bytes));
            }
          }
          // (The last local receiver's forward was charged to it as payer.)
          for (size_t c = local_count; c + 1 < chain.size(); ++c) {
            loads.AddLocal(chain[c], static_cast<double>(bytes));
          }
          builder.Add(task.tensor, parts[p], sender, chain);
        }
      }
      for (const LocalChain& local : local_chains[i]) {
        if (local.host == sender_host) continue;
        builder.Add(task.tensor, parts[p], local.sender, local.receivers);
      }
    }
    clear_receivers(task);
  }
  ReshardPlan plan = builder.Take();
  FitTreeChunksToNicShares(plan, topology);
  return plan;
}

// The meshcast plan with split broadcasts where the estimate says they pay;
// since that estimate ignores contention, a plan that split anything is
// simulated, as rounds, as relay trees per host and as binary relay trees,
// against the all-chains plan, and the fastest kept (ties go to the chains,
// which have the fewest transfers, then to the trees per host, then to the
// binary trees).
absl::StatusOr<ReshardPlan> PlanMeshcastChecked(
    const std::vector<ReshardProblem>& problems,
    const std::vector<UnitTask>& tasks, const Topology& topology) {
  int tree_splits = 0;
  int candidates = 0;
  ReshardPlan trees = PlanMeshcast(problems, tasks, topology, SplitMode::kTrees,
                                   &tree_splits, &candidates);
  // No part goes to two hosts or more: every mode plans the same chains.
  if (candidates == 0) return trees;
  int binary_splits = 0;
  int round_splits = 0;
  ReshardPlan binary = PlanMeshcast(problems, tasks, topology,
                                    SplitMode::kBinaryTrees, &binary_splits);
  ReshardPlan rounds = PlanMeshcast(problems, tasks, topology,
                                    SplitMode::kRounds, &round_splits);
  if (tree_splits == 0 && binary_splits == 0 && round_splits == 0) {
    return trees;  // all chains
  }
  // A mode that split nothing planned the chains.
  ReshardPlan best =
      tree_splits == 0     ? std::move(trees)
      : binary_splits == 0 ? std::move(binary)
      : round_splits == 0
          ? std::move(rounds)
          : PlanMeshcast(problems, tasks, topology, SplitMode::kNone, nullptr);
  ASSIGN_OR_RETURN(SimulationResult best_time, Simulate(best, topology));
  for (auto [plan, splits] :
       {std::pair{&trees, tree_splits}, std::pair{&binary, binary_splits},
        std::pair{&rounds, round_splits}}) {
    if (splits == 0) continue;  // (and maybe moved into best)
    ASSIGN_OR_RETURN(const SimulationResult time, Simulate(*plan, topology));
    if (time.seconds < best_time.seconds) {
      best = std::move(*plan);
      best_time = time;
    }
  }
  return best;
}

absl::StatusOr<std::vector<UnitTask>> CollectTasks(
    const std::vector<ReshardProblem>& problems, const Topology& topology) {
  RETURN_IF_ERROR(topology.Validate());
  std::vector<UnitTask> tasks;
  for (size_t p = 0; p < problems.size(); ++p) {
    RETURN_IF_ERROR(problems[p].Validate(topology));
    ASSIGN_OR_RETURN(std::vector<UnitTask> problem_tasks,
                     ComputeUnitTasks(problems[p], static_cast<int>(p)));
    if (tasks.empty()) {
      tasks = std::move(problem_tasks);
    } else {
      tasks.insert(tasks.end(), std::make_move_iterator(problem_tasks.begin()),
                   std::make_move_iterator(problem_tasks.end()));
    }
  }
  return tasks;
}

absl::StatusOr<ReshardPlan> PlanConcrete(
    const std::vector<ReshardProblem>& problems,
    const std::vector<UnitTask>& tasks, const Topology& topology,
    Strategy strategy) {
  switch (strategy) {
    case Strategy::kSendRecv:
      return PlanSendRecv(problems, tasks, topology);
    case Strategy::kLocalAllGather:
      return PlanLocalAllGather(problems, tasks, topology);
    case Strategy::kBroadcast:
      return PlanBroadcast(problems, tasks, topology);
    case Strategy::kBroadcastLb:
      return PlanBroadcastLb(problems, tasks, topology);
    case Strategy::kMeshcast:
      return PlanMeshcastChecked(problems, tasks, topology);
    case Strategy::kAuto:
      break;
  }
  return absl::InvalidArgumentError(
      "strategy: auto is not a concrete strategy");
}

absl::StatusOr<StrategyComparison> Compare(
    const std::vector<ReshardProblem>& problems,
    const std::vector<UnitTask>& tasks, const Topology& topology,
    const CompareOptions& options) {
  StrategyComparison comparison;
  comparison.unit_tasks = static_cast<int64_t>(tasks.size());
  const double lower_bound = LowerBoundSeconds(tasks, topology);
  int64_t moved = 0;
  for (const UnitTask& task : tasks) {
    moved += task.bytes * static_cast<int64_t>(task.receivers.size());
  }
  std::vector<Strategy> strategies = ConcreteStrategies();
  if (options.only != Strategy::kAuto) strategies = {options.only};
  comparison.rows.resize(strategies.size());
  // Meshcast first when pruning: it is usually the plan to beat.
  std::vector<int> order(strategies.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  if (options.prune) {
    std::stable_partition(order.begin(), order.end(), [&](int i) {
      return strategies[i] == Strategy::kMeshcast;
    });
  }
  double fastest = std::numeric_limits<double>::infinity();
  double broadcast_bound = -1;  // computed once, when first needed
  for (int i : order) {
    StrategyEvaluation& row = comparison.rows[i];
    row.strategy = strategies[i];
    row.lower_bound_seconds = lower_bound;
    row.moved_bytes = moved;
    if (options.prune && std::isfinite(fastest)) {
      double bound = lower_bound;
      if (row.strategy == Strategy::kBroadcast ||
          row.strategy == Strategy::kBroadcastLb) {
        if (broadcast_bound < 0) {
          broadcast_bound = SerializedBroadcastBoundSeconds(tasks, topology);
        }
        bound = std::max(bound, broadcast_bound);
      } else if (row.strategy == Strategy::kSendRecv) {
        bound = std::max(bound, PointToPointBoundSeconds(tasks, topology));
      }
      // Slower even at its bound (beyond the tie tolerance): cannot win.
      if (bound > fastest * (1 + 1e-9)) {
        row.predicted_seconds = bound;
        row.pruned = true;
        continue;
      }
    }
    ASSIGN_OR_RETURN(row.plan,
                     PlanConcrete(problems, tasks, topology, row.strategy));
    RETURN_IF_ERROR(LimitTransfersPerHost(row.plan, topology,
                                          options.max_transfers_per_host));
    ASSIGN_OR_RETURN(SimulationResult simulated, Simulate(row.plan, topology));
    row.predicted_seconds = simulated.seconds;
    fastest = std::min(fastest, row.predicted_seconds);
  }
  // Fastest wins; near-ties (relative 1e-9) go to the earlier row, except
  // that meshcast wins them. Pruned rows never win.
  int chosen = 0;
  while (comparison.rows[chosen].pruned) ++chosen;
  for (int i = chosen + 1; i < static_cast<int>(comparison.rows.size()); ++i) {
    if (comparison.rows[i].pruned) continue;
    const double best = comparison.rows[chosen].predicted_seconds;
    const double time = comparison.rows[i].predicted_seconds;
    const double tolerance = 1e-9 * std::max(best, time);
    const bool faster = time < best - tolerance;
    const bool tie = !faster && time <= best + tolerance;
    if (faster || (tie && comparison.rows[i].strategy == Strategy::kMeshcast)) {
      chosen = i;
    }
  }
  comparison.chosen = chosen;
  return comparison;
}

}  // namespace

std::string StrategyName(Strategy strategy) {
  switch (strategy) {
    case Strategy::kSendRecv:
      return "send_recv";
    case Strategy::kLocalAllGather:
      return "local_allgather";
    case Strategy::kBroadcast:
      return "broadcast";
    case Strategy::kBroadcastLb:
      return "broadcast_lb";
    case Strategy::kMeshcast:
      return "meshcast";
    case Strategy::kAuto:
      return "auto";
  }
  return "unknown";
}

absl::StatusOr<Strategy> ParseStrategy(absl::string_view name) {
  const std::string wanted =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  std::vector<std::string> names;
  for (Strategy strategy : ConcreteStrategies()) {
    if (StrategyName(strategy) == wanted) return strategy;
    names.push_back(StrategyName(strategy));
  }
  if (wanted == StrategyName(Strategy::kAuto)) return Strategy::kAuto;
  names.push_back(StrategyName(Strategy::kAuto));
  return absl::InvalidArgumentError(
      absl::StrCat("strategy: unknown strategy '", name,
                   "'; allowed: ", absl::StrJoin(names, ", ")));
}

std::vector<Strategy> ConcreteStrategies() {
  return {Strategy::kSendRecv, Strategy::kLocalAllGather, Strategy::kBroadcast,
          Strategy::kBroadcastLb, Strategy::kMeshcast};
}

absl::StatusOr<ReshardPlan> PlanReshard(
    const std::vector<ReshardProblem>& problems, const Topology& topology,
    Strategy strategy) {
  ASSIGN_OR_RETURN(std::vector<UnitTask> tasks,
                   CollectTasks(problems, topology));
  if (strategy != Strategy::kAuto) {
    return PlanConcrete(problems, tasks, topology, strategy);
  }
  CompareOptions options;
  options.prune = true;
  ASSIGN_OR_RETURN(StrategyComparison comparison,
                   Compare(problems, tasks, topology, options));
  return std::move(comparison.rows[comparison.chosen].plan);
}

absl::StatusOr<StrategyComparison> CompareStrategies(
    const std::vector<ReshardProblem>& problems, const Topology& topology,
    const CompareOptions& options) {
  ASSIGN_OR_RETURN(std::vector<UnitTask> tasks,
                   CollectTasks(problems, topology));
  return Compare(problems, tasks, topology, options);
}

double PointToPointBoundSeconds(const std::vector<UnitTask>& tasks,
                                const Topology& topology) {
  std::vector<double> entering(topology.num_hosts, 0.0);
  std::vector<int> sender_hosts;
  for (const UnitTask& task : tasks) {
    sender_hosts.clear();
    for (int d : task.senders) sender_hosts.push_back(topology.HostOf(d));
    for (int receiver : task.receivers) {
      const int host = topology.HostOf(receiver);
      if (host < 0 || host >= topology.num_hosts) continue;
      if (std::find(sender_hosts.begin(), sender_hosts.end(), host) !=
          sender_hosts.end()) {
        continue;
      }
      entering[host] += static_cast<double>(task.bytes);
    }
  }
  double worst = 0;
  for (double bytes : entering) worst = std::max(worst, bytes);
  if (worst == 0) return 0;
  return worst / topology.inter_host_bandwidth + topology.inter_host_latency +
         topology.transfer_setup_seconds;
}

double SerializedBroadcastBoundSeconds(const std::vector<UnitTask>& tasks,
                                       const Topology& topology) {
  const double per_broadcast =
      topology.inter_host_latency + topology.transfer_setup_seconds;
  std::vector<double> busy(topology.num_hosts, 0.0);
  std::vector<int> sender_hosts;
  std::vector<int> receiver_hosts;
  for (const UnitTask& task : tasks) {
    sender_hosts.clear();
    for (int d : task.senders) sender_hosts.push_back(topology.HostOf(d));
    receiver_hosts.clear();
    for (int d : task.receivers) receiver_hosts.push_back(topology.HostOf(d));
    std::sort(receiver_hosts.begin(), receiver_hosts.end());
    receiver_hosts.erase(
        std::unique(receiver_hosts.begin(), receiver_hosts.end()),
        receiver_hosts.end());
    for (int host : receiver_hosts) {
      if (host < 0 || host >= topology.num_hosts) continue;
      if (std::find(sender_hosts.begin(), sender_hosts.end(), host) !=
          sender_hosts.end()) {
        continue;  // a replica on the host may feed it without its NIC
      }
      busy[host] += task.bytes / topology.inter_host_bandwidth + per_broadcast;
    }
  }
  double worst = 0;
  for (double seconds : busy) worst = std::max(worst, seconds);
  return worst;
}

}  // namespace meshcast
