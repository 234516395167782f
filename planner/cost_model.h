// Cost model: a flow-level network simulator that times a ReshardPlan on a
// Topology, and lower bounds that no plan can beat.
//
// Simulator. Resources: each host's NIC egress and ingress
// (inter_host_bandwidth each), each device's port egress and ingress
// (intra_host_bandwidth each). A transfer is one flow along its relay chain
// src -> dst[0] -> dst[1] ...: it uses the egress port of every chain member
// but the last, the ingress port of every receiver, and for each hop between
// hosts the sender host's NIC egress and the receiver host's NIC ingress (a
// chain that leaves a host twice loads its NIC twice). Concurrent flows share
// each resource max-min fairly (progressive filling); rates are recomputed
// whenever a flow starts or ends. A flow holds bandwidth until its last byte
// is sent (bytes / rate); the transfer finishes a tail later: per hop, the
// hop's latency, plus for every hop after the first one pipeline chunk
// (min(pipeline_chunk_bytes, bytes)) at the hop's bandwidth (pipeline fill).
// Transfers start when every transfer in their deps has finished.
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
// NIC egress; and the same two per device over the device ports. Latency and
// pipeline fill are ignored. Every simulated plan that delivers `tasks`
// takes at least this long, whatever its strategy.
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

// Lower bound on the time of any plan delivering `tasks`.
double LowerBoundSeconds(const std::vector<UnitTask>& tasks,
                         const Topology& topology);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_COST_MODEL_H_
