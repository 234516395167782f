// Cost model: a flow-level network simulator that times a ReshardPlan on a
// Topology, and lower bounds that no plan can beat.
//
// Simulator. Resources: each host's NIC egress and ingress
// (inter_host_bandwidth each), each device's port egress and ingress
// (intra_host_bandwidth each). A transfer is one flow along its relay chain
// src -> dst[0] -> dst[1] ...: it uses the egress port of every chain member
// but the last, the ingress port of every receiver, and for each hop between
// hosts the sender host's NIC egress and the receiver host's NIC ingress.
// Concurrent flows share each resource max-min fairly (progressive filling);
// rates are recomputed whenever a flow starts or ends. A flow's time is
// bytes / rate plus, per hop, the hop's latency and one pipeline chunk at the
// hop's bandwidth (pipeline fill). Transfers start when their deps finish.
//
// Lower bound. The maximum of: for each host, bytes it must receive that no
// device of it holds, over its NIC ingress; for each set of hosts that holds a
// slice, the bytes that only that set holds and other hosts need, over the
// set's total NIC egress; and the same two per device over the device port.
// The simulator never predicts less than the lower bound.
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
