// Resharding strategies: each turns reshard problems into a ReshardPlan.
//
//   send_recv        every receiver gets its own copy, point to point, from
//                    the least-loaded replica (device-level greedy on bytes
//                    sent, over the whole request); all copies concurrent.
//   local_allgather  Alpa's older method: where every destination tile lies
//                    inside one host on a mesh of rank <= 2, one copy of
//                    each slice into each receiving host over the network,
//                    cut into one piece per receiver (stage 0, cut along
//                    tensor dimensions by gcd as Alpa does), then a ring
//                    all-gather inside the host (stage 1, each piece relayed
//                    through the other receivers); send_recv for the tasks
//                    where that does not apply.
//   broadcast        one broadcast per unit task from its first replica, in
//                    the naive (destination tile, source slice) order.
//   broadcast_lb     the cross-mesh resharding paper: sender host chosen to
//                    balance load across hosts, tasks ordered in rounds of
//                    host-disjoint broadcasts (Alpa's randomized greedy, up
//                    to 100 trials per round, fixed seed); within the host,
//                    the device that has sent least.
//                    Both broadcast strategies model the paper's execution:
//                    a relay chain [sender] + receivers in ascending device
//                    order (NCCL's ring), and a host issues its broadcasts
//                    one at a time, so each broadcast depends on the
//                    previous one of every host it involves.
//   meshcast         splits tasks across replica hosts so their NICs share
//                    the egress (a fractional assignment balancing NIC and
//                    port egress over all tensors, kept whole wherever that
//                    costs nothing), relays host to host so each byte
//                    crosses each NIC at most once (the sending host's own
//                    receivers first, then the remote hosts, the busiest
//                    NIC last), feeds receivers on holder hosts from a local
//                    replica, balances device ports, and runs everything
//                    concurrently. Where a chain through many hosts would
//                    pay more in hops (latency, pipeline fill) than a
//                    second hop costs, the part goes split instead: one
//                    piece to each remote host, which sends it on to the
//                    others, in rounds so that the forwards of one overlap
//                    the scatter of the next (about two hops' time in all;
//                    a plan that splits is kept only if its simulation
//                    beats the all-chains plan). Assumes device ports at
//                    least as fast as NICs (NVLink, memory copies);
//                    elsewhere auto may pick another strategy.
//   auto             the strategy with the lowest simulated time.
//
// Every strategy lists relay chains host by host and is deterministic.
//
// Thread safety: pure functions.
#ifndef MESHCAST_PLANNER_STRATEGY_H_
#define MESHCAST_PLANNER_STRATEGY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/plan.h"
#include "planner/topology.h"
#include "planner/unit_task.h"

namespace meshcast {

enum class Strategy {
  kSendRecv,
  kLocalAllGather,
  kBroadcast,
  kBroadcastLb,
  kMeshcast,
  kAuto,
};

std::string StrategyName(Strategy strategy);
// Accepts the names above; the error lists them.
absl::StatusOr<Strategy> ParseStrategy(absl::string_view name);
// Every concrete strategy (all but kAuto), in the order tables print them.
std::vector<Strategy> ConcreteStrategies();

// Plans all problems together with one strategy. For kAuto, plans with every
// concrete strategy and returns the plan with the lowest simulated time
// (plan.strategy names the one chosen).
absl::StatusOr<ReshardPlan> PlanReshard(
    const std::vector<ReshardProblem>& problems, const Topology& topology,
    Strategy strategy);

// One row of a strategy comparison.
struct StrategyEvaluation {
  Strategy strategy;
  ReshardPlan plan;  // empty when pruned
  // The simulated time; for a pruned row, the bound that ruled it out (its
  // plan would take at least this long).
  double predicted_seconds = 0;
  double lower_bound_seconds = 0;
  int64_t moved_bytes = 0;  // bytes the problems must deliver (all receivers)
  bool pruned = false;
};

struct CompareOptions {
  // A concrete strategy: plan and simulate that one only (one row).
  Strategy only = Strategy::kAuto;
  // Skip the strategies that cannot win: meshcast is planned first, and a
  // strategy whose own lower bound is already slower than the fastest
  // plan so far is listed as pruned, not planned. The broadcast strategies'
  // bound: a host issues its broadcasts one at a time, so every broadcast
  // that must enter a host through its NIC (a receiver there, no replica)
  // is serialized on it, each taking at least its bytes at the NIC rate
  // plus one inter-host latency and the set-up time. send_recv's: every
  // receiver gets its own copy, so a host's NIC takes one copy per
  // receiving device that has no replica on the host. The others' bound is
  // the lower bound on any plan.
  bool prune = false;
  // > 0: every planned strategy's plan runs at most this many transfers
  // that touch any one host at once (LimitTransfersPerHost,
  // planner/transfer_window.h), and is simulated so.
  int max_transfers_per_host = 0;
};

// Plans and simulates the concrete strategies (all of them by default);
// `chosen` is the index of the fastest row that was planned (ties go to the
// earlier in ConcreteStrategies() order, except that meshcast wins ties).
// Rows stay in ConcreteStrategies() order.
struct StrategyComparison {
  std::vector<StrategyEvaluation> rows;
  int chosen = 0;
  int64_t unit_tasks = 0;  // of all the problems together
};
absl::StatusOr<StrategyComparison> CompareStrategies(
    const std::vector<ReshardProblem>& problems, const Topology& topology,
    const CompareOptions& options = {});

// The broadcast strategies' bound (CompareOptions::prune) for `tasks`.
double SerializedBroadcastBoundSeconds(const std::vector<UnitTask>& tasks,
                                       const Topology& topology);
// send_recv's bound (CompareOptions::prune) for `tasks`.
double PointToPointBoundSeconds(const std::vector<UnitTask>& tasks,
                                const Topology& topology);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_STRATEGY_H_
