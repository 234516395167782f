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
// Time of one transfer: it starts when every transfer in its deps has
// finished (transfer_start); its flow begins transfer_setup_seconds later
// (the fixed start-up cost, during which it holds no bandwidth); the flow
// holds bandwidth until its last byte is sent (bytes / rate); the transfer
// finishes a tail later: per hop, the hop's latency, plus for every hop after
// the first one pipeline chunk (min(pipeline_chunk_bytes, bytes)) at the
// hop's link bandwidth (pipeline fill). So an uncontended transfer takes
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
// resource's work happens after it. Latency and pipeline fill are ignored.
// Every simulated plan that delivers `tasks` takes at least this long,
// whatever its strategy.
//
// Thread safety: pure functions.
#ifndef MESHCAST_PLANNER_COST_MODEL_H_
#define MESHCAST_PLANNER_COST_MODEL_H_

#include <vector>

#include "absl/status/statusor.h"
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
// bandwidth, plus the transfer set-up and one hop's latency when anything
// moves (so that tiny tensors get a meaningful ratio too).
double LowerBoundSeconds(const std::vector<UnitTask>& tasks,
                         const Topology& topology);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_COST_MODEL_H_
