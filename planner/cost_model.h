// Cost model: a flow-level network simulator that times a ReshardPlan on a
// Topology, and lower bounds that no plan can beat.
//
// Simulator. Resources: each host's NIC egress and ingress
// (inter_host_bandwidth each), each device's port egress and ingress
// (intra_host_bandwidth each), and, when host_copy_bandwidth > 0, each host's
// copy capacity (host_copy_bandwidth, shared by all its devices). A transfer
// is one flow along its relay chain src -> dst[0] -> dst[1] ...: it uses the
// egress port of every chain member but the last, the ingress port of every
// receiver, and for each hop between hosts the sender host's NIC egress and
// the receiver host's NIC ingress (a chain that leaves a host twice loads its
// NIC twice). Host copy, per hop of the chain: a hop inside host h uses h's
// copy once (the memcpy); a hop from host a to host b uses a's copy once
// (packing the slice) and b's copy once (unpacking it). Uses add up, so a
// flow whose chain touches a host's copy k times consumes k x its rate of it
// (e.g. 0 -> 1 -> 2 inside one host: 2x; a relay through a device of host h
// from another host to a third: 2x at h, unpack then pack).
// Concurrent flows share each resource max-min fairly (progressive filling);
// rates are recomputed whenever a flow starts or ends.
//
// A relay tree (Transfer::parents) is one flow too: it uses every edge's
// resources as a hop of a chain would, so a position that forwards to c
// children loads its egress c times.
//
// Time of one transfer: it starts when every transfer in its deps has
// finished (transfer_start); its flow begins transfer_setup_seconds later
// (the fixed start-up cost, during which it holds no bandwidth); the flow
// holds bandwidth until its last byte is sent (bytes / rate); the transfer
// finishes a tail later: per hop, the hop's latency, plus for every hop after
// the first one pipeline chunk (min(pipeline_chunk_bytes, bytes)) at the
// hop's link bandwidth (pipeline fill); a tree's tail is its deepest
// path's. So an uncontended transfer takes
// setup + bytes / min(rates of its resources) + tail, zero-byte ones setup +
// tail, and a chain of k dependent transfers pays the setup k times.
//
// Completions within a relative 1e-9 of each other are processed as one
// event; with more than 1024 concurrent flows, completions within 0.1% of the
// first are batched (each flow still finishes at its own time, but the
// bandwidth it frees is shared out at the end of the window: a feasible,
// slightly pessimistic schedule) so that huge plans stay fast. Cost per
// event: O(active flows x path length x log). Malformed plans (unknown
// devices, empty or repeating chains, deps on later transfers) are
// InvalidArgument errors naming the transfer.
//
// Lower bound. The maximum of: for each host, bytes it must receive that no
// device of it holds, over its NIC ingress; for each set of hosts that holds
// a slice (the sender sets that occur), the bytes of slices held only inside
// that set (by it or any subset) that other hosts need, over the set's total
// NIC egress; the same two per device over the device ports; and, when
// host_copy_bandwidth > 0, for each host, the bytes its devices must receive
// plus the bytes of slices held only on it that other hosts need, over its
// copy capacity (every hop into a device of h, from inside h or not, uses h's
// copy once, and each such slice leaves h by at least one hop from h, which
// packs at h). When some byte must move, transfer_setup_seconds is added:
// no flow moves data before its transfer's setup has elapsed, so every
// resource's work happens after it. The transfer carrying a resource's last
// byte still has a hop to finish: the NIC bounds (host ingress, sender sets
// of hosts) add an inter-host hop's latency, the device-port and host-copy
// bounds the cheaper of the two hops' (their last byte may stay inside a
// host). A set of hosts whose slices each go to K >= 2 other hosts adds
// up to (1 - 1/K) of an inter-host latency more: bytes that reach a host
// through another one cross two hops, and bytes sent late enough to cross
// only one must leave the set once per receiving host (the derivation is
// at SetEgressBound in cost_model.cc). Pipeline fill is ignored.
// Every simulated plan that delivers `tasks` takes at least this long,
// whatever its strategy.
//
// Flow engine. Simulate is one client of a general engine declared below
// (NetworkResources, FlowProblem, RunFlows): a DAG of tasks, each of which
// waits for its deps, then its setup time, then moves any number of flows
// concurrently over shared resources (max-min fair, as above), and finishes a
// tail after its last flow's last unit. planner/sim/plan_simulator.h times
// the plan IR with the same engine, adding each device's compute as a
// resource. A transfer of a ReshardPlan is one task with one relay-chain
// flow (none when it moves 0 bytes).
//
// Thread safety: pure functions; a FlowProblem is a plain value.
#ifndef MESHCAST_PLANNER_COST_MODEL_H_
#define MESHCAST_PLANNER_COST_MODEL_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "planner/plan.h"
#include "planner/topology.h"
#include "planner/unit_task.h"

namespace meshcast {

struct SimulationResult {
  double seconds = 0;                   // makespan
  std::vector<double> transfer_start;   // per transfer (s)
  std::vector<double> transfer_finish;  // per transfer (s)
};

absl::StatusOr<SimulationResult> Simulate(const ReshardPlan& plan,
                                          const Topology& topology);

// Lower bound on the time of any plan delivering `tasks`: the busiest link
// (NIC, device link or host copy) or the busiest set of senders at full
// bandwidth, plus the transfer set-up and the last hop's latency when
// anything moves (inter-host after a NIC bound; so that tiny tensors, and
// large clusters where each NIC moves little, get a meaningful ratio too).
double LowerBoundSeconds(const std::vector<UnitTask>& tasks,
                         const Topology& topology);

// ---------------------------------------------------------------------------
// The flow engine.

// The resources of a topology, numbered: each host's NIC egress and ingress,
// each device's port egress and ingress, each host's copy capacity (only when
// topology.host_copy_bandwidth > 0), and each device's compute. Link
// capacities are in bytes/s; a device's compute has capacity 1 (device
// seconds per second), so a compute flow's amount is the time it would take
// alone on its device, and concurrent compute flows share the device max-min
// fairly.
class NetworkResources {
 public:
  explicit NetworkResources(const Topology& topology)
      : hosts_(topology.num_hosts),
        devices_(topology.num_devices()),
        has_copy_(topology.host_copy_bandwidth > 0) {}
  int HostEgress(int host) const { return host; }
  int HostIngress(int host) const { return hosts_ + host; }
  int DeviceEgress(int device) const { return 2 * hosts_ + device; }
  int DeviceIngress(int device) const { return 2 * hosts_ + devices_ + device; }
  int HostCopy(int host) const { return 2 * (hosts_ + devices_) + host; }
  int DeviceCompute(int device) const {
    return 2 * (hosts_ + devices_) + (has_copy_ ? hosts_ : 0) + device;
  }
  bool has_copy() const { return has_copy_; }
  int size() const {
    return 2 * (hosts_ + devices_) + (has_copy_ ? hosts_ : 0) + devices_;
  }
  // Capacity of every resource, indexed by resource id.
  std::vector<double> Capacities(const Topology& topology) const;

 private:
  int hosts_;
  int devices_;
  bool has_copy_;
};

// The link of one hop: its bandwidth and latency.
struct HopLink {
  double bandwidth = 0;
  double latency = 0;
};

// Appends to `uses` the resources that a flow's hop from device `from` to
// device `to` uses, as the simulator above describes them (ports; NICs when
// it crosses hosts; host copies when limited), and returns the hop's link.
// Devices must be valid ids of `topology`.
HopLink AppendHop(const Topology& topology, const NetworkResources& resources,
                  int from, int to, std::vector<int>& uses);

// What a relay adds after its flow's last byte has left the sender: each
// hop's latency, plus for every hop after the first the pipeline fill, one
// chunk (min(pipeline_chunk_bytes, bytes)) that the hop's sender waits for
// before it forwards. A hop inside a host waits for it at the hop's
// bandwidth (a worker hands a chunk to its own devices as a copy), and so
// does a hop between hosts whose sender got the chunk by a copy inside the
// sending host (at the intra-host bandwidth); a hop between hosts after
// the path has crossed hosts waits for it at the rate the flow's path
// offers when its data ends (FlowProblem), at most the hop's bandwidth: a
// relay that forwards to several hosts, or shares its NIC with flows that
// are still moving, passes the last chunk on at its share.
struct RelayTail {
  double fixed = 0;       // latencies, and the fill of hops inside hosts (s)
  double fill_bytes = 0;  // chunks the hops between hosts wait for
  double fill_floor = 0;  // those chunks at the hops' bandwidths (s)
  double chunk = 0;       // the relay's chunk (bytes)

  // The fill of a flow that ends at `rate` bytes/s, and its whole tail.
  double FillAt(double rate) const;
  double SecondsAt(double rate) const { return fixed + FillAt(rate); }
  // The tail of an uncontended flow (at every hop's full bandwidth).
  double Uncontended() const { return fixed + fill_floor; }
};

// Appends the uses of a relay chain src -> dsts[0] -> dsts[1] ... and returns
// its tail (above); its chunks are `chunk_bytes` (0: the topology's
// pipeline_chunk_bytes).
RelayTail AppendRelayChain(const Topology& topology,
                           const NetworkResources& resources, int src,
                           absl::Span<const int> dsts, int64_t bytes,
                           std::vector<int>& uses, int64_t chunk_bytes = 0);

// The same for a relay tree (Transfer::parents: parents[k] is the chain
// position, 0 = src and j = dsts[j - 1], that forwards to dsts[k]; empty: a
// chain). Every edge is a hop (a position with c children uses its egress c
// times); the tail covers every path: each of its parts is the largest
// over the paths from the sender.
RelayTail AppendRelayTree(const Topology& topology,
                          const NetworkResources& resources, int src,
                          absl::Span<const int> dsts,
                          absl::Span<const int> parents, int64_t bytes,
                          std::vector<int>& uses, int64_t chunk_bytes = 0);

// The simulated times of a FlowProblem's tasks.
struct FlowSchedule {
  double seconds = 0;          // makespan (0 without tasks)
  std::vector<double> start;   // per task (s)
  std::vector<double> finish;  // per task (s)
};

// A DAG of tasks over resources of given capacities. Build it task by task:
//
//   FlowProblem problem(resources.Capacities(topology));
//   const int t = problem.AddTask(setup_seconds, deps);
//   problem.AddFlow(bytes, uses);   // any number, all concurrent
//   problem.SetTail(tail_seconds);
//   ASSIGN_OR_RETURN(FlowSchedule schedule, RunFlows(problem));
//
// A task starts when all its deps have finished (at 0 without deps), holds
// nothing for setup_seconds, then moves all its flows at once; it finishes
// tail_seconds after the last unit of its last flow (a relay's tail: its
// fill at the rate that flow's path offers once it, and the flows that end
// with it, left the network: each resource's capacity over the flow's own
// uses of it plus the weight of the flows still moving there; at start +
// setup + tail without flows).
class FlowProblem {
 public:
  explicit FlowProblem(std::vector<double> capacity)
      : capacity_(std::move(capacity)) {
    task_flow_begin_.push_back(0);
    task_dep_begin_.push_back(0);
    flow_path_begin_.push_back(0);
  }

  // Adds a task; deps are indices of tasks (of this problem, added before or
  // after; RunFlows checks them). Returns the new task's index.
  int AddTask(double setup_seconds, absl::Span<const int> deps);
  // Adds a flow of `amount` units (> 0; bytes on links, device seconds on a
  // compute resource) to the last task added. `uses` lists its resource ids,
  // a repeat meaning the flow loads that resource once more (it is sorted in
  // place). Every resource of one flow must share the unit of `amount`.
  void AddFlow(double amount, std::vector<int>& uses);
  // Sets the tail of the last task added.
  void SetTail(double tail_seconds) { tail_.back() = tail_seconds; }
  // Sets the tail of the last task added to a relay's: its fixed part, and
  // its fill at the rate its last flow's path offers when that flow ends
  // (above).
  void SetTail(const RelayTail& tail) {
    tail_.back() = tail.fixed;
    relay_fill_.resize(tail_.size());
    relay_fill_.back() = tail;
  }

  int num_tasks() const { return static_cast<int>(setup_.size()); }
  int num_flows() const { return static_cast<int>(amount_.size()); }

 private:
  friend absl::StatusOr<FlowSchedule> RunFlows(
      const FlowProblem& problem);

  std::vector<double> capacity_;
  // Per task (compressed rows for flows and deps).
  std::vector<double> setup_;
  std::vector<double> tail_;
  // Per task (may be shorter: none); fixed is unused here.
  std::vector<RelayTail> relay_fill_;
  std::vector<int> task_flow_begin_;
  std::vector<int> task_dep_begin_;
  std::vector<int> deps_;
  // Per flow.
  std::vector<double> amount_;
  std::vector<int> task_of_flow_;
  std::vector<int> flow_path_begin_;
  std::vector<int> resource_;
  std::vector<int> weight_;
};

// Simulates `problem`. InvalidArgument when a dep is out of range or the
// deps form a cycle (some task never starts).
absl::StatusOr<FlowSchedule> RunFlows(const FlowProblem& problem);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_COST_MODEL_H_
