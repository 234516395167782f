#include "planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

// Two events closer than this fraction of the current time are processed as
// one batch, so that symmetric flows finishing "together" up to rounding
// trigger a single rate recomputation instead of one each.
constexpr double kRelativeEpsilon = 1e-9;

// Above this many concurrent flows, completions within kWindow (relative) of
// the first one are batched too: each such flow still finishes at its own
// time, but the bandwidth it frees is shared out at the end of the window.
// Every flow keeps a feasible rate throughout, so the result stays a valid
// schedule (never below the lower bound); it is at most about kWindow
// pessimistic per batch, and bounds the number of rate recomputations of
// huge plans whose flows all finish at different times.
constexpr size_t kExactFlows = 1024;
constexpr double kWindow = 1e-3;

absl::Status CheckPlan(const ReshardPlan& plan, const Topology& topology) {
  const int num_devices = topology.num_devices();
  const auto bad_device = [&](size_t t, absl::string_view field, int device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transfer ", t, ": ", field, " ", device,
        " is not a device of the topology (allowed 0..", num_devices - 1, ")"));
  };
  std::vector<int> seen_in(num_devices, -1);
  for (size_t t = 0; t < plan.transfers.size(); ++t) {
    const Transfer& transfer = plan.transfers[t];
    if (transfer.src_device < 0 || transfer.src_device >= num_devices) {
      return bad_device(t, "src_device", transfer.src_device);
    }
    if (transfer.dst_devices.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("transfer ", t, ": dst_devices is empty"));
    }
    if (transfer.bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transfer ", t, ": bytes must be >= 0, got ", transfer.bytes));
    }
    seen_in[transfer.src_device] = static_cast<int>(t);
    for (int device : transfer.dst_devices) {
      if (device < 0 || device >= num_devices) {
        return bad_device(t, "dst_devices entry", device);
      }
      if (seen_in[device] == static_cast<int>(t)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "transfer ", t, ": device ", device,
            " appears twice in its relay chain (src_device + dst_devices)"));
      }
      seen_in[device] = static_cast<int>(t);
    }
    if (absl::Status parents = CheckParents(transfer); !parents.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("transfer ", t, ": ", parents.message()));
    }
    for (int dep : transfer.deps) {
      if (dep < 0 || dep >= static_cast<int>(t)) {
        return absl::InvalidArgumentError(
            absl::StrCat("transfer ", t, ": dep ", dep,
                         " must name an earlier transfer (allowed 0..",
                         static_cast<int>(t) - 1, ")"));
      }
    }
  }
  return absl::OkStatus();
}

// The flows' resources (with multiplicity) in compressed rows.
struct FlowPathsView {
  const std::vector<int>& begin;  // per flow, plus one sentinel
  const std::vector<int>& resource;
  const std::vector<int>& weight;
};

// Max-min fair rates by progressive filling. Scratch arrays are sized once
// per simulation and only the resources of active flows are touched, so one
// recomputation costs O(active flows x path length x log).
class RateSolver {
 public:
  RateSolver(FlowPathsView paths, const std::vector<double>& capacity)
      : paths_(paths),
        capacity_(capacity),
        capacity_left_(capacity_.size(), 0),
        weight_left_(capacity_.size(), 0),
        touched_(capacity_.size(), 0),
        list_begin_(capacity_.size(), 0),
        position_(capacity_.size(), 0),
        frozen_(paths.begin.size(), 0) {}

  // Sets rate[f] for every f in `active`.
  void Solve(const std::vector<int>& active, std::vector<double>& rate) {
    touched_list_.clear();
    for (int flow : active) {
      frozen_[flow] = 0;
      for (int k = paths_.begin[flow]; k < paths_.begin[flow + 1]; ++k) {
        const int r = paths_.resource[k];
        if (!touched_[r]) {
          touched_[r] = 1;
          touched_list_.push_back(r);
          capacity_left_[r] = capacity_[r];
          weight_left_[r] = 0;
          list_begin_[r] = 0;
        }
        weight_left_[r] += paths_.weight[k];
        ++list_begin_[r];  // a count until turned into an offset below
      }
    }
    // Resource -> active flows, compressed: list_begin_ holds counts first,
    // then running offsets.
    int offset = 0;
    for (int r : touched_list_) {
      const int count = list_begin_[r];
      list_begin_[r] = offset;
      offset += count;
    }
    flows_of_resource_.resize(offset);
    fill_.assign(touched_list_.size(), 0);
    for (size_t i = 0; i < touched_list_.size(); ++i) {
      position_[touched_list_[i]] = static_cast<int>(i);
    }
    for (int flow : active) {
      for (int k = paths_.begin[flow]; k < paths_.begin[flow + 1]; ++k) {
        const int r = paths_.resource[k];
        const int slot = position_[r];
        flows_of_resource_[list_begin_[r] + fill_[slot]++] = flow;
      }
    }
    // A min-heap of resources by fair share. Freezing flows at the smallest
    // share only raises the shares of the other resources, so an entry's
    // key is a lower bound of its resource's current share: a popped entry
    // whose share has grown meanwhile goes back with the new key (one entry
    // per resource at any time, no decrease-key needed).
    heap_.clear();
    for (int r : touched_list_) {
      heap_.push_back({capacity_left_[r] / weight_left_[r], r});
    }
    std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
      const Entry entry = heap_.back();
      heap_.pop_back();
      const int r = entry.resource;
      if (weight_left_[r] <= 0) continue;
      const double share = capacity_left_[r] / weight_left_[r];
      if (share > entry.share * (1 + 1e-12)) {
        heap_.push_back({share, r});
        std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
        continue;
      }
      const int slot = position_[r];
      for (int i = 0; i < fill_[slot]; ++i) {
        const int flow = flows_of_resource_[list_begin_[r] + i];
        if (frozen_[flow]) continue;
        frozen_[flow] = 1;
        rate[flow] = share;
        for (int k = paths_.begin[flow]; k < paths_.begin[flow + 1]; ++k) {
          const int other = paths_.resource[k];
          const int w = paths_.weight[k];
          capacity_left_[other] =
              std::max(0.0, capacity_left_[other] - share * w);
          weight_left_[other] -= w;
        }
      }
    }
    for (int r : touched_list_) touched_[r] = 0;
  }

 private:
  struct Entry {
    double share;
    int resource;
    bool operator>(const Entry& other) const {
      if (share != other.share) return share > other.share;
      return resource > other.resource;
    }
  };
  FlowPathsView paths_;
  const std::vector<double>& capacity_;
  std::vector<double> capacity_left_;
  std::vector<int> weight_left_;
  std::vector<char> touched_;
  std::vector<int> touched_list_;
  // Per touched resource: offset of its flows in flows_of_resource_, its
  // slot in touched_list_, and (by slot) how many flows it has.
  std::vector<int> list_begin_;
  std::vector<int> position_;
  std::vector<int> fill_;
  std::vector<int> flows_of_resource_;
  std::vector<char> frozen_;
  std::vector<Entry> heap_;
};

}  // namespace

std::vector<double> NetworkResources::Capacities(
    const Topology& topology) const {
  std::vector<double> capacity(size());
  for (int host = 0; host < hosts_; ++host) {
    capacity[HostEgress(host)] = topology.inter_host_bandwidth;
    capacity[HostIngress(host)] = topology.inter_host_bandwidth;
    if (has_copy_) capacity[HostCopy(host)] = topology.host_copy_bandwidth;
  }
  for (int device = 0; device < devices_; ++device) {
    capacity[DeviceEgress(device)] = topology.intra_host_bandwidth;
    capacity[DeviceIngress(device)] = topology.intra_host_bandwidth;
    capacity[DeviceCompute(device)] = 1;
  }
  return capacity;
}

HopLink AppendHop(const Topology& topology, const NetworkResources& resources,
                  int from, int to, std::vector<int>& uses) {
  uses.push_back(resources.DeviceEgress(from));
  uses.push_back(resources.DeviceIngress(to));
  const int from_host = topology.HostOf(from);
  const int to_host = topology.HostOf(to);
  HopLink link{topology.intra_host_bandwidth, topology.intra_host_latency};
  if (from_host != to_host) {
    uses.push_back(resources.HostEgress(from_host));
    uses.push_back(resources.HostIngress(to_host));
    link = {topology.inter_host_bandwidth, topology.inter_host_latency};
  }
  if (resources.has_copy()) {
    // A local hop is one memcpy on its host; a hop between hosts packs on
    // the sender's host and unpacks on the receiver's.
    uses.push_back(resources.HostCopy(from_host));
    if (from_host != to_host) uses.push_back(resources.HostCopy(to_host));
  }
  return link;
}

double RelayTail::FillAt(double rate) const {
  if (fill_bytes <= 0) return 0;
  return rate > 0 ? std::max(fill_floor, fill_bytes / rate) : fill_floor;
}

namespace {

// The chunk a relay of `bytes` forwards: its own size, else the topology's;
// never more than the bytes.
double RelayChunk(const Topology& topology, int64_t bytes,
                  int64_t chunk_bytes) {
  return std::min(static_cast<double>(bytes),
                  chunk_bytes > 0 ? static_cast<double>(chunk_bytes)
                                  : topology.pipeline_chunk_bytes);
}

// Adds hop `from` -> `to` to `tail` (the tail up to `from`) for a relay of
// `chunk`-byte chunks. `first`: `from` is the sender; `crossed`: the path
// to `from` crossed hosts. A hop waits for one chunk to reach `from`
// before it can forward it (the pipeline fill): inside a host, or where
// `from` got it by a copy inside the sender's host, the time of a copy; on
// a hop between hosts after the path crossed hosts, the chunk's time at the
// rate the flow ends with (the NIC share that brought it).
RelayTail ExtendTail(const Topology& topology, RelayTail tail, int from, int to,
                     const HopLink& link, double chunk, bool first,
                     bool crossed) {
  tail.fixed += link.latency;
  if (first) return tail;
  if (topology.SameHost(from, to)) {
    tail.fixed += chunk / link.bandwidth;
  } else if (crossed) {
    tail.fill_bytes += chunk;
    tail.fill_floor += chunk / link.bandwidth;
  } else {
    tail.fixed += chunk / topology.intra_host_bandwidth;
  }
  return tail;
}

}  // namespace

RelayTail AppendRelayTree(const Topology& topology,
                          const NetworkResources& resources, int src,
                          absl::Span<const int> dsts,
                          absl::Span<const int> parents, int64_t bytes,
                          std::vector<int>& uses, int64_t chunk_bytes) {
  if (parents.empty()) {
    return AppendRelayChain(topology, resources, src, dsts, bytes, uses,
                            chunk_bytes);
  }
  const double chunk = RelayChunk(topology, bytes, chunk_bytes);
  // tails[p]: the tail up to position p; crossed[p]: its path crossed
  // hosts.
  std::vector<RelayTail> tails(dsts.size() + 1);
  std::vector<bool> crossed(dsts.size() + 1, false);
  RelayTail tail;
  tail.chunk = chunk;
  for (size_t k = 0; k < dsts.size(); ++k) {
    const int parent = parents[k];
    const int from = parent == 0 ? src : dsts[parent - 1];
    const HopLink link = AppendHop(topology, resources, from, dsts[k], uses);
    tails[k + 1] = ExtendTail(topology, tails[parent], from, dsts[k], link,
                              chunk, parent == 0, crossed[parent]);
    crossed[k + 1] = crossed[parent] || !topology.SameHost(from, dsts[k]);
    tail.fixed = std::max(tail.fixed, tails[k + 1].fixed);
    tail.fill_bytes = std::max(tail.fill_bytes, tails[k + 1].fill_bytes);
    tail.fill_floor = std::max(tail.fill_floor, tails[k + 1].fill_floor);
  }
  return tail;
}

RelayTail AppendRelayChain(const Topology& topology,
                           const NetworkResources& resources, int src,
                           absl::Span<const int> dsts, int64_t bytes,
                           std::vector<int>& uses, int64_t chunk_bytes) {
  RelayTail tail;
  const double chunk = RelayChunk(topology, bytes, chunk_bytes);
  tail.chunk = chunk;
  int from = src;
  bool crossed = false;
  for (size_t hop = 0; hop < dsts.size(); ++hop) {
    const int to = dsts[hop];
    const HopLink link = AppendHop(topology, resources, from, to, uses);
    tail = ExtendTail(topology, tail, from, to, link, chunk, hop == 0, crossed);
    crossed = crossed || !topology.SameHost(from, to);
    from = to;
  }
  return tail;
}

int FlowProblem::AddTask(double setup_seconds, absl::Span<const int> deps) {
  setup_.push_back(setup_seconds);
  tail_.push_back(0);
  deps_.insert(deps_.end(), deps.begin(), deps.end());
  task_dep_begin_.push_back(static_cast<int>(deps_.size()));
  task_flow_begin_.push_back(static_cast<int>(amount_.size()));
  return num_tasks() - 1;
}

void FlowProblem::AddFlow(double amount, std::vector<int>& uses) {
  amount_.push_back(amount);
  task_of_flow_.push_back(num_tasks() - 1);
  ++task_flow_begin_.back();
  std::sort(uses.begin(), uses.end());
  for (size_t i = 0; i < uses.size();) {
    size_t j = i;
    while (j < uses.size() && uses[j] == uses[i]) ++j;
    resource_.push_back(uses[i]);
    weight_.push_back(static_cast<int>(j - i));
    i = j;
  }
  flow_path_begin_.push_back(static_cast<int>(resource_.size()));
}

absl::StatusOr<FlowSchedule> RunFlows(const FlowProblem& problem) {
  const int n = problem.num_tasks();
  const std::vector<int>& task_flow_begin = problem.task_flow_begin_;
  const std::vector<int>& task_dep_begin = problem.task_dep_begin_;
  const std::vector<int>& deps = problem.deps_;
  for (int t = 0; t < n; ++t) {
    for (int k = task_dep_begin[t]; k < task_dep_begin[t + 1]; ++k) {
      if (deps[k] < 0 || deps[k] >= n) {
        return absl::InvalidArgumentError(
            absl::StrCat("flow task ", t, ": dep ", deps[k],
                         " is not a task (allowed 0..", n - 1, ")"));
      }
    }
  }
  RateSolver solver(FlowPathsView{problem.flow_path_begin_, problem.resource_,
                                  problem.weight_},
                    problem.capacity_);

  // Dependents in compressed rows, and the number of unfinished deps.
  std::vector<int> pending(n, 0);
  std::vector<int> dependents_begin(n + 1, 0);
  for (int t = 0; t < n; ++t) {
    for (int k = task_dep_begin[t]; k < task_dep_begin[t + 1]; ++k) {
      ++dependents_begin[deps[k] + 1];
    }
    pending[t] = task_dep_begin[t + 1] - task_dep_begin[t];
  }
  for (int t = 0; t < n; ++t) dependents_begin[t + 1] += dependents_begin[t];
  std::vector<int> dependents(dependents_begin[n]);
  {
    std::vector<int> fill(dependents_begin.begin(), dependents_begin.end() - 1);
    for (int t = 0; t < n; ++t) {
      for (int k = task_dep_begin[t]; k < task_dep_begin[t + 1]; ++k) {
        dependents[fill[deps[k]]++] = t;
      }
    }
  }

  FlowSchedule result;
  result.start.assign(n, 0);
  result.finish.assign(n, 0);
  const int num_flows = problem.num_flows();
  std::vector<double> remaining(num_flows, 0);
  std::vector<double> rate(num_flows, 0);
  // Per task: flows still moving, and the time the last finished one did.
  std::vector<int> outstanding(n, 0);
  std::vector<double> data_end(n, 0);
  std::vector<int> active;  // flows
  // Tasks with dependents whose last unit left the network, waiting out
  // their tail: (finish time, task), earliest first. Tasks without
  // dependents finish on the spot: their tail changes nothing else, so it
  // need not be an event.
  using Timed = std::pair<double, int>;
  std::priority_queue<Timed, std::vector<Timed>, std::greater<>> tails;
  // Tasks in their set-up time: (time their flows begin, task), earliest
  // first.
  std::priority_queue<Timed, std::vector<Timed>, std::greater<>> setups;
  double now = 0;
  int finished = 0;
  // Per resource, for the rate a relay's fill is paid at (fill_rate): the
  // weight of the flows on the network, and the units they have left to
  // move times their weights, drained at the resource's load (drain)
  // between solves and brought up to date lazily (settle).
  const size_t num_resources = problem.capacity_.size();
  std::vector<double> active_weight(num_resources, 0);
  std::vector<double> units_left(num_resources, 0);
  std::vector<double> drain(num_resources, 0);
  std::vector<double> settled_at(num_resources, 0);
  std::vector<int> draining;  // resources with drain > 0
  const auto settle = [&](int r, double time) {
    if (time > settled_at[r]) {
      units_left[r] =
          std::max(0.0, units_left[r] - drain[r] * (time - settled_at[r]));
      settled_at[r] = time;
    }
  };
  // Puts flow f's `units` (sign +1 on, -1 off) into the books at `time`.
  const auto book = [&](int f, double units, double sign, double time) {
    for (int k = problem.flow_path_begin_[f];
         k < problem.flow_path_begin_[f + 1]; ++k) {
      const int r = problem.resource_[k];
      settle(r, time);
      active_weight[r] += sign * problem.weight_[k];
      units_left[r] =
          std::max(0.0, units_left[r] + sign * problem.weight_[k] * units);
    }
  };
  // New rates: each resource drains at the load of its flows.
  const auto set_drains = [&](double time) {
    for (int r : draining) {
      settle(r, time);
      drain[r] = 0;
    }
    draining.clear();
    for (int f : active) {
      for (int k = problem.flow_path_begin_[f];
           k < problem.flow_path_begin_[f + 1]; ++k) {
        const int r = problem.resource_[k];
        if (drain[r] == 0) {
          settle(r, time);
          draining.push_back(r);
        }
        drain[r] += problem.weight_[k] * rate[f];
      }
    }
  };
  // The rate at which flow f's last chunks, `chunk` bytes each, move along
  // its path once f has left the network: at each resource, the capacity
  // over f's own uses of it plus, for every flow still there, its weight
  // while it has a chunk's worth left (it takes turns with f's chunk), less
  // once it has less. A relay that forwards to c children pays c chunks;
  // one beside flows that go on pays its share; but flows that end at about
  // the same time (a symmetric plan) hardly charge each other, since each
  // link interleaves their chunks and so pays the pipeline's fill once.
  const auto fill_rate = [&](int f, double chunk, double time) {
    double rate = std::numeric_limits<double>::infinity();
    for (int k = problem.flow_path_begin_[f];
         k < problem.flow_path_begin_[f + 1]; ++k) {
      const int r = problem.resource_[k];
      settle(r, time);
      const double others =
          chunk > 0
              ? std::min(std::max(0.0, active_weight[r]), units_left[r] / chunk)
              : 0.0;
      rate =
          std::min(rate, problem.capacity_[r] / (problem.weight_[k] + others));
    }
    return std::isfinite(rate) ? rate : 0.0;
  };
  // Tasks whose data ended at this event, with their last flow: their fill
  // is charged once every flow that ends with them has left.
  std::vector<std::pair<int, int>> ended;
  // `rate`: what its fill moves at (fill_rate; 0: no flow).
  const auto data_done = [&](int t, double time, double rate) {
    const double finish = time +
                          (static_cast<size_t>(t) < problem.relay_fill_.size()
                               ? problem.relay_fill_[t].FillAt(rate)
                               : 0.0) +
                          problem.tail_[t];
    if (dependents_begin[t] == dependents_begin[t + 1]) {
      result.finish[t] = finish;
      result.seconds = std::max(result.seconds, finish);
      ++finished;
    } else {
      tails.push({finish, t});
    }
  };
  bool active_changed = false;

  // Puts task t's flows on the network at `time` (after its setup).
  const auto begin_flows = [&](int t, double time) {
    const int first = task_flow_begin[t];
    const int last = task_flow_begin[t + 1];
    if (first == last) {
      data_done(t, time, 0);
      return;
    }
    for (int f = first; f < last; ++f) {
      remaining[f] = problem.amount_[f];
      active.push_back(f);
      book(f, remaining[f], +1, time);
    }
    outstanding[t] = last - first;
    active_changed = true;
  };
  const auto start = [&](int t) {
    result.start[t] = now;
    if (problem.setup_[t] > 0) {
      setups.push({now + problem.setup_[t], t});
    } else {
      begin_flows(t, now);
    }
  };
  for (int t = 0; t < n; ++t) {
    if (pending[t] == 0) start(t);
  }

  while (finished < n) {
    if (active_changed) {
      solver.Solve(active, rate);
      set_drains(now);
      active_changed = false;
    }
    double next_done = std::numeric_limits<double>::infinity();
    int first_done = -1;
    for (int f : active) {
      const double done = now + remaining[f] / rate[f];
      if (done < next_done) {
        next_done = done;
        first_done = f;
      }
    }
    // The next event other than a flow's last unit: a tail elapsing or a
    // setup ending.
    double next_event = std::numeric_limits<double>::infinity();
    if (!tails.empty()) next_event = tails.top().first;
    if (!setups.empty()) next_event = std::min(next_event, setups.top().first);
    double horizon = next_done;
    if (next_event <= next_done) {
      horizon = next_event;
      first_done = -1;
    } else if (active.size() > kExactFlows) {
      horizon = std::min(next_done * (1 + kWindow), next_event);
    }
    if (!std::isfinite(horizon)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "simulation stalled: ", n - finished,
          " tasks wait on deps that never finish (a dependency cycle)"));
    }
    const double dt = std::max(0.0, horizon - now);
    const double tolerance = kRelativeEpsilon * horizon;
    // Advance every active flow; retire those whose last unit leaves by the
    // horizon (up to the tolerance), each at its own time; a task's data is
    // done when its last flow retires.
    for (size_t i = 0; i < active.size();) {
      const int f = active[i];
      const double done = now + remaining[f] / rate[f];
      if (f == first_done || done <= horizon + tolerance) {
        const double remaining_before = remaining[f];
        remaining[f] = 0;
        const int t = problem.task_of_flow_[f];
        data_end[t] = std::max(data_end[t], std::min(done, horizon));
        if (--outstanding[t] == 0) ended.push_back({t, f});
        // What it had left (none, but for a flow retired early with others
        // near the horizon).
        book(f, std::max(0.0, remaining_before - rate[f] * dt), -1, horizon);
        active[i] = active.back();
        active.pop_back();
        active_changed = true;
      } else {
        remaining[f] -= rate[f] * dt;
        ++i;
      }
    }
    now = std::max(now, horizon);
    for (const auto& [t, f] : ended) {
      const double chunk = static_cast<size_t>(t) < problem.relay_fill_.size()
                               ? problem.relay_fill_[t].chunk
                               : 0.0;
      data_done(t, data_end[t], fill_rate(f, chunk, now));
    }
    ended.clear();
    // Tasks whose setup has elapsed put their flows on the network (one
    // without flows may finish on the spot and queue a tail, handled just
    // below).
    while (!setups.empty() && setups.top().first <= now + tolerance) {
      const auto [time, t] = setups.top();
      setups.pop();
      begin_flows(t, time);
    }
    // Finish tasks whose tail has elapsed and start their dependents;
    // dependents without flows may finish right away, hence the loop.
    while (!tails.empty() && tails.top().first <= now + tolerance) {
      const auto [time, t] = tails.top();
      tails.pop();
      result.finish[t] = time;
      result.seconds = std::max(result.seconds, time);
      ++finished;
      for (int k = dependents_begin[t]; k < dependents_begin[t + 1]; ++k) {
        const int next_task = dependents[k];
        if (--pending[next_task] == 0) start(next_task);
      }
    }
  }
  return result;
}

absl::StatusOr<SimulationResult> Simulate(const ReshardPlan& plan,
                                          const Topology& topology) {
  RETURN_IF_ERROR(topology.Validate());
  RETURN_IF_ERROR(CheckPlan(plan, topology));
  const NetworkResources resources(topology);
  FlowProblem problem(resources.Capacities(topology));
  std::vector<int> uses;  // resource ids of one flow, with repeats
  for (const Transfer& transfer : plan.transfers) {
    problem.AddTask(topology.transfer_setup_seconds, transfer.deps);
    uses.clear();
    const RelayTail tail = AppendRelayTree(
        topology, resources, transfer.src_device, transfer.dst_devices,
        transfer.parents, transfer.bytes, uses, transfer.chunk_bytes);
    // A transfer of 0 bytes has no flow: it pays its setup and tail only.
    if (transfer.bytes > 0) {
      problem.AddFlow(static_cast<double>(transfer.bytes), uses);
    }
    problem.SetTail(tail);
  }
  ASSIGN_OR_RETURN(FlowSchedule schedule, RunFlows(problem));
  SimulationResult result;
  result.seconds = schedule.seconds;
  result.transfer_start = std::move(schedule.start);
  result.transfer_finish = std::move(schedule.finish);
  return result;
}

namespace {

// max over unit sets S that hold some slice of: bytes held only inside S
// that a unit outside S needs, over |S| x capacity, plus the relay term
// below. `unit_of` maps a device to its unit (host or device).
//
// Relay term (relay_latency > 0: the latency of one hop between units).
// When every such slice is needed by at least K >= 2 units outside S, the
// last bytes cannot all arrive one hop after they leave S. Let t be the
// time the bytes alone take at S's full egress, L the hop latency. A byte
// that reaches an outside unit through another outside unit crossed two
// hops, so it left S by T - 2L; a transfer that leaves S later reaches one
// outside unit only, so each byte first sent after T - 2L leaves S K times
// by T - L. With Y bytes out by T - 2L (Y <= capacity |S| (T - 2L)):
// Y + K (bytes - Y) <= capacity |S| (T - L), which gives
// T >= t + (2 - 1/K) L, unless every byte goes out directly K times,
// which takes t K + L. So the bound adds min((1 - 1/K) L, (K - 1) t) on
// top of the caller's one latency. K = 1 (some slice has one outside
// unit) adds nothing.
template <typename UnitOf>
double SetEgressBound(const std::vector<UnitTask>& tasks, int num_units,
                      UnitOf unit_of, double capacity,
                      double relay_latency = 0) {
  // Group tasks by their (sorted, distinct) sender unit set.
  absl::flat_hash_map<std::vector<int>, int> group_of_set;
  std::vector<std::vector<int>> group_set;
  std::vector<std::vector<int>> group_tasks;
  std::vector<int> units;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].senders.empty()) continue;
    units.clear();
    for (int device : tasks[i].senders) units.push_back(unit_of(device));
    std::sort(units.begin(), units.end());
    units.erase(std::unique(units.begin(), units.end()), units.end());
    auto [it, inserted] =
        group_of_set.try_emplace(units, static_cast<int>(group_set.size()));
    if (inserted) {
      group_set.push_back(units);
      group_tasks.emplace_back();
    }
    group_tasks[it->second].push_back(static_cast<int>(i));
  }
  std::vector<char> in_set(num_units, 0);
  // Outside units counted for the current (set, task): stamped.
  std::vector<int64_t> seen(num_units, 0);
  double bound = 0;
  for (size_t g = 0; g < group_set.size(); ++g) {
    const std::vector<int>& set = group_set[g];
    for (int unit : set) in_set[unit] = 1;
    double bytes = 0;
    // Fewest outside units any counted slice needs (K above); counting
    // stops once a slice reaches the fewest so far.
    int fewest_outside = std::numeric_limits<int>::max();
    for (size_t h = 0; h < group_set.size(); ++h) {
      const std::vector<int>& subset = group_set[h];
      if (h != g && (set.size() == 1 || subset.size() > set.size() ||
                     !std::includes(set.begin(), set.end(), subset.begin(),
                                    subset.end()))) {
        continue;
      }
      for (int i : group_tasks[h]) {
        const int64_t stamp =
            int64_t{i} + 1 +
            static_cast<int64_t>(g) * static_cast<int64_t>(tasks.size());
        int outside = 0;
        for (int device : tasks[i].receivers) {
          const int unit = unit_of(device);
          if (in_set[unit] || seen[unit] == stamp) continue;
          seen[unit] = stamp;
          if (++outside >= fewest_outside || relay_latency <= 0) break;
        }
        if (outside == 0) continue;
        bytes += static_cast<double>(tasks[i].bytes);
        fewest_outside = std::min(fewest_outside, outside);
      }
    }
    for (int unit : set) in_set[unit] = 0;
    const double seconds = bytes / (capacity * set.size());
    double relay = 0;
    if (relay_latency > 0 && bytes > 0 && fewest_outside >= 2) {
      const double k = fewest_outside;
      relay = std::min((1 - 1 / k) * relay_latency, (k - 1) * seconds);
    }
    bound = std::max(bound, seconds + relay);
  }
  return bound;
}

}  // namespace

double LowerBoundSeconds(const std::vector<UnitTask>& tasks,
                         const Topology& topology) {
  const int num_hosts = topology.num_hosts;
  const int num_devices = topology.num_devices();
  std::vector<double> host_in(num_hosts, 0);
  std::vector<double> device_in(num_devices, 0);
  // Bytes of slices held on one host only that some other host needs: each
  // leaves that host at least once, packed there.
  std::vector<double> host_only_out(num_hosts, 0);
  std::vector<char> sender_host(num_hosts, 0);
  std::vector<char> counted(num_hosts, 0);
  bool must_move = false;
  for (const UnitTask& task : tasks) {
    for (int device : task.senders) sender_host[topology.HostOf(device)] = 1;
    bool leaves_host = false;
    for (int device : task.receivers) {
      device_in[device] += static_cast<double>(task.bytes);
      const int host = topology.HostOf(device);
      if (!sender_host[host]) {
        leaves_host = true;
        if (!counted[host]) {
          counted[host] = 1;
          host_in[host] += static_cast<double>(task.bytes);
        }
      }
    }
    for (int device : task.senders) sender_host[topology.HostOf(device)] = 0;
    for (int device : task.receivers) counted[topology.HostOf(device)] = 0;
    if (leaves_host && !task.senders.empty()) {
      const int host = topology.HostOf(task.senders.front());
      const bool on_one_host = std::all_of(
          task.senders.begin(), task.senders.end(),
          [&](int device) { return topology.HostOf(device) == host; });
      if (on_one_host) host_only_out[host] += static_cast<double>(task.bytes);
    }
    if (task.bytes > 0 && !task.receivers.empty()) must_move = true;
  }
  // Two kinds of bound, by the last hop their last byte must still take:
  // what crosses a NIC pays an inter-host hop's latency after it; what
  // passes a device port or a host's copy may stay inside a host, so it
  // pays at least the cheaper hop's.
  double device_bound = 0;
  if (topology.host_copy_bandwidth > 0) {
    // Every hop into a device of a host uses that host's copy once (a local
    // memcpy or an unpack), every hop out of it to another host once more
    // (a pack): the two sets of hops are disjoint.
    std::vector<double> copy_bytes = host_only_out;
    for (int device = 0; device < num_devices; ++device) {
      copy_bytes[topology.HostOf(device)] += device_in[device];
    }
    for (double bytes : copy_bytes) {
      device_bound = std::max(device_bound, bytes / topology.host_copy_bandwidth);
    }
  }
  for (double bytes : device_in) {
    device_bound = std::max(device_bound, bytes / topology.intra_host_bandwidth);
  }
  device_bound = std::max(
      device_bound,
      SetEgressBound(
          tasks, num_devices, [](int device) { return device; },
          topology.intra_host_bandwidth));
  double nic_bound = 0;
  for (double bytes : host_in) {
    nic_bound = std::max(nic_bound, bytes / topology.inter_host_bandwidth);
  }
  nic_bound = std::max(
      nic_bound,
      SetEgressBound(
          tasks, num_hosts, [&](int device) { return topology.HostOf(device); },
          topology.inter_host_bandwidth, topology.inter_host_latency));
  if (!must_move) return std::max(device_bound, nic_bound);
  // No flow moves a byte before its transfer's setup has elapsed, so all the
  // work above happens after it; and the transfer that carries the last byte
  // of a resource still pays a hop's latency after it.
  const double cheaper_hop =
      std::min(topology.intra_host_latency, topology.inter_host_latency);
  double bound = device_bound + cheaper_hop;
  if (nic_bound > 0) {
    bound = std::max(bound, nic_bound + topology.inter_host_latency);
  }
  return topology.transfer_setup_seconds + bound;
}

}  // namespace meshcast
