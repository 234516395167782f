#include "planner/kinds/reshard/reshard_kind.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/cost_model.h"
#include "planner/kinds/reshard/reshard_lowering.h"
#include "planner/kinds/reshard/reshard_request.h"
#include "planner/strategy.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

absl::StatusOr<ReshardRequest> RequestOf(const v1::JobSpec& spec) {
  if (!spec.has_reshard()) {
    return absl::InvalidArgumentError("spec.reshard is not set");
  }
  return ReshardRequestFromProto(spec.reshard());
}

// A pruned row reads "broadcast_lb (pruned)" with the bound that ruled it
// out as its time.
PlanAlternative AlternativeOf(const StrategyEvaluation& row, bool chosen) {
  return {absl::StrCat(StrategyName(row.strategy),
                       row.pruned ? " (pruned)" : ""),
          row.predicted_seconds,
          row.lower_bound_seconds,
          static_cast<int>(row.plan.transfers.size()),
          row.plan.total_bytes(),
          chosen};
}

absl::StatusOr<PlannedJob> Lower(const ReshardPlan& plan, double predicted,
                                 double lower_bound,
                                 std::vector<PlanAlternative> alternatives) {
  PlannedJob job;
  ASSIGN_OR_RETURN(job.plan, LowerReshardPlan(plan));
  job.plan.set_predicted_seconds(predicted);
  job.plan.set_lower_bound_seconds(lower_bound);
  job.alternatives = std::move(alternatives);
  return job;
}

}  // namespace

absl::Status ReshardKind::Validate(const v1::JobSpec& spec) const {
  return RequestOf(spec).status();
}

absl::StatusOr<PlacementRequest> ReshardKind::Meshes(
    const v1::JobSpec& spec) const {
  ASSIGN_OR_RETURN(const ReshardRequest request, RequestOf(spec));
  return request.Meshes();
}

absl::StatusOr<PlannedJob> ReshardKind::Plan(
    const v1::JobSpec& spec, const std::vector<DeviceMesh>& meshes,
    const Topology& topology, const PlanOptions& options) const {
  ASSIGN_OR_RETURN(const ReshardRequest request, RequestOf(spec));
  if (meshes.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a reshard job places 2 meshes (src, dst); got ", meshes.size()));
  }
  ASSIGN_OR_RETURN(const ReshardProblem problem,
                   MakeProblem(request, meshes[0], meshes[1], topology));
  ASSIGN_OR_RETURN(PlannedJob job, PlanReshardJob({problem}, topology,
                                                  request.strategy, options));
  if (!request.src_buffer.empty()) {
    NameUserBuffers({request.src_buffer}, {request.dst_buffer}, job.plan);
  }
  return job;
}

absl::StatusOr<PlannedJob> PlanReshardJob(
    const std::vector<ReshardProblem>& problems, const Topology& topology,
    Strategy strategy, const PlanOptions& options, int max_transfers_per_host) {
  // A forced strategy is the only one planned, whatever compare_all says:
  // at scale the baselines cost far more than the plan asked for. Auto
  // prunes the strategies that cannot win.
  CompareOptions compare;
  compare.only = strategy;
  compare.prune = true;
  compare.max_transfers_per_host = max_transfers_per_host;
  ASSIGN_OR_RETURN(StrategyComparison comparison,
                   CompareStrategies(problems, topology, compare));
  if (comparison.rows.empty()) {
    return absl::InternalError("planner compared no strategies");
  }
  const int chosen = comparison.chosen;
  std::vector<PlanAlternative> alternatives;
  if (strategy == Strategy::kAuto || options.compare_all) {
    for (size_t i = 0; i < comparison.rows.size(); ++i) {
      alternatives.push_back(AlternativeOf(comparison.rows[i],
                                           static_cast<int>(i) == chosen));
    }
  }
  const StrategyEvaluation& best = comparison.rows[chosen];
  return Lower(best.plan, best.predicted_seconds, best.lower_bound_seconds,
               std::move(alternatives));
}

void NameUserBuffers(const std::vector<std::string>& src_names,
                     const std::vector<std::string>& dst_names,
                     v1::Plan& plan) {
  for (v1::Buffer& buffer : *plan.mutable_buffers()) {
    const size_t t = static_cast<size_t>(buffer.tensor());
    if (buffer.role() == v1::Buffer::ROLE_SOURCE && t < src_names.size()) {
      buffer.set_user_buffer(src_names[t]);
    } else if (buffer.role() == v1::Buffer::ROLE_DESTINATION &&
               t < dst_names.size()) {
      buffer.set_user_buffer(dst_names[t]);
    }
  }
}

void ReshardKind::Summarize(const v1::JobSpec& spec, const v1::Plan& plan,
                            v1::JobResult& result) const {
  SummarizeReshard(result);
}

void SummarizeReshard(v1::JobResult& result) {
  if (result.seconds() <= 0) return;
  auto& metrics = *result.mutable_metrics();
  if (result.bytes_delivered() > 0) {  // a run's (a prediction has none)
    metrics["movbw_bytes_per_second"] =
        static_cast<double>(result.bytes_delivered()) / result.seconds();
  }
  if (result.lower_bound_seconds() > 0) {
    metrics["lower_bound_ratio"] =
        result.seconds() / result.lower_bound_seconds();
  }
}

}  // namespace meshcast
