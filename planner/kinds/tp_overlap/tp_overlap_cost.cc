#include "planner/kinds/tp_overlap/tp_overlap_cost.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "planner/kinds/job_kind.h"
#include "planner/sim/plan_simulator.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

int ModeSteps(const v1::Plan& plan) {
  int steps = 0;
  for (const v1::Step& step : plan.steps()) {
    if (step.stage() >= kStageModeComm) ++steps;
  }
  return steps;
}

// Why overlap modes stay out of `auto` on this topology, or "" when they
// need not: CPU devices with less than a core each (Topology::
// cpu_cores_per_device).
std::string CrowdedCoresNote(const Topology& topology) {
  const double cores = topology.cpu_cores_per_device;
  if (cores <= 0 || cores >= 1) return "";
  return absl::StrFormat(
      "not for auto: %.2f cores per CPU device, none spare to overlap", cores);
}

TpAlternative AlternativeOf(const TpPrediction& p) {
  return {p.name, p.seconds, ModeSteps(p.lowering.plan),
          PlanStepBytes(p.lowering.plan)};
}

// The best of `mode`'s candidates (or of `chunks` alone when > 0); every
// candidate tried lands in `tried`.
absl::StatusOr<TpPrediction> BestOfMode(const TpShape& shape, TpMode mode,
                                        int chunks,
                                        const std::vector<int>& devices,
                                        const Topology& topology,
                                        const TpCostModel& model,
                                        std::vector<TpAlternative>* tried) {
  const int tp = static_cast<int>(devices.size());
  std::vector<int> candidates = chunks > 0 ? std::vector<int>{chunks}
                                           : TpCandidateChunks(shape, tp, mode);
  if (candidates.empty()) {
    // Only reachable through CheckTpChunks's own errors: say why.
    RETURN_IF_ERROR(
        CheckTpChunks(shape, tp, mode, mode == TpMode::kFused ? tp : 2));
    return absl::InvalidArgumentError(absl::StrCat(
        "tp_overlap.mode ", TpModeName(mode), " has no chunk count for m ",
        shape.m, " on ", tp, " ranks"));
  }
  TpPrediction best;
  best.seconds = std::numeric_limits<double>::infinity();
  for (int c : candidates) {
    ASSIGN_OR_RETURN(TpPrediction p,
                     PredictTpMode(shape, mode, c, devices, topology, model));
    if (tried != nullptr) tried->push_back(AlternativeOf(p));
    if (p.seconds < best.seconds) best = std::move(p);
  }
  return best;
}

}  // namespace

double GemmEfficiency(int64_t rows, const TpCostModel& model) {
  if (rows <= 0) return 0;
  const double r = static_cast<double>(rows);
  return r / (r + std::max(0.0, model.half_rate_rows));
}

double EffectiveGemmFlops(int64_t rows, int64_t n, int64_t k,
                          const TpCostModel& model) {
  if (rows <= 0) return 0;
  return 2.0 * static_cast<double>(rows) * n * k / GemmEfficiency(rows, model);
}

double ModePhaseSeconds(const v1::Plan& plan) {
  if (plan.predicted_step_start_size() != plan.steps_size() ||
      plan.predicted_step_finish_size() != plan.steps_size()) {
    return 0;
  }
  double first = std::numeric_limits<double>::infinity(), last = 0;
  for (int i = 0; i < plan.steps_size(); ++i) {
    if (plan.steps(i).stage() < kStageModeComm) continue;
    first = std::min(first, plan.predicted_step_start(i));
    last = std::max(last, plan.predicted_step_finish(i));
  }
  return last > first ? last - first : 0;
}

absl::StatusOr<TpPrediction> PredictTpMode(const TpShape& shape, TpMode mode,
                                           int chunks,
                                           const std::vector<int>& devices,
                                           const Topology& topology,
                                           const TpCostModel& model) {
  TpPrediction p;
  p.mode = mode;
  p.chunks = chunks;
  p.name = TpStrategyName(mode, chunks);
  ASSIGN_OR_RETURN(p.lowering,
                   LowerTpOverlap(shape, mode, chunks, devices, model));
  v1::Plan& plan = p.lowering.plan;
  // The ring's additions are timed as a collective's own reductions are
  // (not at all): on a twin whose elementwise steps touch nothing.
  v1::Plan timed = plan;
  for (v1::Step& step : *timed.mutable_steps()) {
    if (step.op() != v1::Step::OP_COMPUTE ||
        !step.compute().has_elementwise()) {
      continue;
    }
    step.clear_inputs();
    step.clear_outputs();
    step.set_flops(0);
  }
  RETURN_IF_ERROR(PredictPlan(timed, topology).status());
  plan.set_predicted_seconds(timed.predicted_seconds());
  *plan.mutable_predicted_step_start() = timed.predicted_step_start();
  *plan.mutable_predicted_step_finish() = timed.predicted_step_finish();
  p.seconds = ModePhaseSeconds(plan);
  return p;
}

absl::StatusOr<TpSearch> SearchTpModes(const TpShape& shape, TpMode mode,
                                       int chunks,
                                       const std::vector<int>& devices,
                                       const Topology& topology,
                                       const TpCostModel& model,
                                       bool all_modes) {
  TpSearch search;
  if (mode != TpMode::kAuto && !all_modes) {
    ASSIGN_OR_RETURN(search.best,
                     BestOfMode(shape, mode, chunks, devices, topology, model,
                                chunks == 0 ? &search.alternatives : nullptr));
    return search;
  }
  search.best.seconds = std::numeric_limits<double>::infinity();
  const int tp = static_cast<int>(devices.size());
  const std::string crowded = CrowdedCoresNote(topology);
  for (TpMode m : {TpMode::kSequential, TpMode::kChunked, TpMode::kFused}) {
    const bool forced = m == mode;
    if (!forced && TpCandidateChunks(shape, tp, m).empty()) continue;
    ASSIGN_OR_RETURN(TpPrediction p,
                     BestOfMode(shape, m, forced ? chunks : 0, devices,
                                topology, model, nullptr));
    TpAlternative row = AlternativeOf(p);
    // Overlap needs a core beside every device's GEMM; without one the
    // prediction (each device a core of its own) is not to be trusted.
    const bool eligible = m == TpMode::kSequential || crowded.empty();
    if (!eligible) row.note = crowded;
    search.alternatives.push_back(std::move(row));
    // A forced mode is the answer whatever the others predict.
    const bool take = mode == TpMode::kAuto
                          ? eligible && p.seconds < search.best.seconds
                          : forced;
    if (take) search.best = std::move(p);
  }
  return search;
}

}  // namespace meshcast
