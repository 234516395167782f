// Resharding strategies: each turns reshard problems into a ReshardPlan.
//
//   send_recv        every receiver gets its own copy, point to point, from
//                    the least-loaded replica (device-level greedy).
//   local_allgather  Alpa's older method: one copy of each piece into each
//                    receiving host over the network (receivers split the
//                    slice), then an all-gather inside the host; falls back to
//                    send_recv where not applicable.
//   broadcast        one broadcast per unit task from its first replica.
//   broadcast_lb     the cross-mesh resharding paper: sender host chosen to
//                    balance load across hosts, tasks ordered in rounds of
//                    host-disjoint broadcasts (randomized greedy, seeded).
//   meshcast         splits tasks across replica hosts so their NICs share
//                    the egress, relays host to host so each byte crosses each
//                    NIC at most once, balances device ports, and plans all
//                    tensors of a request together.
//   auto             the strategy with the lowest simulated time.
//
// Thread safety: pure functions.
#ifndef MESHCAST_PLANNER_STRATEGY_H_
#define MESHCAST_PLANNER_STRATEGY_H_

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
  ReshardPlan plan;
  double predicted_seconds = 0;
  double lower_bound_seconds = 0;
  int64_t moved_bytes = 0;  // bytes the problems must deliver (all receivers)
};

// Plans and simulates every concrete strategy; `chosen` is the index of the
// fastest (ties go to the earlier in ConcreteStrategies() order, except that
// meshcast wins ties).
struct StrategyComparison {
  std::vector<StrategyEvaluation> rows;
  int chosen = 0;
};
absl::StatusOr<StrategyComparison> CompareStrategies(
    const std::vector<ReshardProblem>& problems, const Topology& topology);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_STRATEGY_H_
