// Transfer window: bounds how many transfers of a ReshardPlan touch any one
// host at a time, so that a worker never runs more relay steps at once than
// that — each holds staging slots (pipeline_depth chunks per segment) and a
// thread while it runs — however many tensors a plan moves. A whole model's
// weights are tens of thousands of transfers; with every one of a host's
// hundreds issued at once, its staging alone can reach gigabytes.
//
//   ASSIGN_OR_RETURN(ReshardPlan plan, PlanReshard(problems, topology, s));
//   RETURN_IF_ERROR(LimitTransfersPerHost(plan, topology, 16));
//   ASSIGN_OR_RETURN(SimulationResult sim, Simulate(plan, topology));
//   MostTransfersAtOnceOnAHost(plan, topology, sim);  // <= 16
//
// How: each host's transfers (those whose sender or any receiver is on it),
// in plan order, go into `per_host` dependency chains round robin — the
// i-th of them waits for the (i - per_host)-th to finish — so at most
// per_host of them run at once: one per chain. A transfer on several hosts
// waits in the chain of each. Deps only point to earlier transfers, so the
// plan stays a DAG that every worker can run without waiting on one another
// out of order, and VerifyPlan still holds (nothing is added but order;
// each transfer's stage becomes its new dependency depth).
// What it costs, the simulator says: fewer transfers share the links at
// once, and each chain pays its transfers' set-up and tails in turn.
//
// Errors: InvalidArgument when a transfer names a device outside the
// topology or a dep that is not an earlier transfer (naming the transfer).
// per_host <= 0: OK, the plan unchanged. Cost: O(sum over transfers of the
// hosts each touches). Thread safety: pure function.
#ifndef MESHCAST_PLANNER_TRANSFER_WINDOW_H_
#define MESHCAST_PLANNER_TRANSFER_WINDOW_H_

#include "absl/status/status.h"
#include "planner/cost_model.h"
#include "planner/plan.h"
#include "planner/topology.h"

namespace meshcast {

absl::Status LimitTransfersPerHost(ReshardPlan& plan, const Topology& topology,
                                   int per_host);

// The most transfers touching one host (as above) that run at once in
// `sim`, a simulation of `plan` (a transfer runs from its start to its
// finish; one that ends as another starts does not overlap it).
int MostTransfersAtOnceOnAHost(const ReshardPlan& plan,
                               const Topology& topology,
                               const SimulationResult& sim);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_TRANSFER_WINDOW_H_
