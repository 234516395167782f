// Step spans: the measured (or, without a result, predicted) interval of
// every step of a plan, and the longest span of a selection of them. What
// kinds summarize their phases with (tp_overlap's GEMM alone, moe's gate
// or combine).
//
//   const std::vector<StepSpan> spans = StepSpansOf(plan, result);
//   const double gate = SlowestSpan(
//       spans, [&](const StepSpan& s) { return plan.steps(s.index).stage() ==
//       0; },
//       [](const StepSpan& s) { return absl::StrCat(s.device); });
//
// Thread safety: pure functions.
#ifndef MESHCAST_PLANNER_KINDS_STEP_SPANS_H_
#define MESHCAST_PLANNER_KINDS_STEP_SPANS_H_

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "meshcast/v1/job.pb.h"
#include "meshcast/v1/plan.pb.h"

namespace meshcast {

// One step's measured (or predicted) interval.
struct StepSpan {
  int index = 0;       // position in plan.steps
  std::string worker;  // "" when predicted
  int device = -1;
  double start = 0;
  double end = 0;
  double cpu = 0;  // CPU seconds its thread used (0: not measured)
};

// The result's step intervals; when the result has none, the plan's
// predicted ones (so a plan's figures read like a run's).
std::vector<StepSpan> StepSpansOf(const v1::Plan& plan,
                                  const v1::JobResult& result);

// The largest, over keys, of last end - first start of the spans `pick`
// selects, grouped by `key`; 0 when none is selected.
template <typename Pick, typename Key>
double SlowestSpan(const std::vector<StepSpan>& spans, Pick pick, Key key) {
  std::map<std::string, std::pair<double, double>> by_key;
  for (const StepSpan& span : spans) {
    if (!pick(span)) continue;
    auto [it, fresh] = by_key.try_emplace(key(span), span.start, span.end);
    if (!fresh) {
      it->second.first = std::min(it->second.first, span.start);
      it->second.second = std::max(it->second.second, span.end);
    }
  }
  double slowest = 0;
  for (const auto& [name, interval] : by_key) {
    slowest = std::max(slowest, interval.second - interval.first);
  }
  return slowest;
}

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_STEP_SPANS_H_
