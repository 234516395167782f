#include "planner/ir/step_order.h"

#include <functional>
#include <queue>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace meshcast {
namespace {

absl::Status StepError(const v1::Step& step, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "plan step ", step.id(), " (", v1::Step::Op_Name(step.op()), "): ",
      what));
}

}  // namespace

absl::StatusOr<std::vector<int>> StepsInDependencyOrder(
    const v1::Plan& plan, const StepOrderOptions& options) {
  const int n = plan.steps_size();
  absl::flat_hash_map<int, int> position;
  for (int i = 0; i < n; ++i) {
    if (!position.try_emplace(plan.steps(i).id(), i).second) {
      return StepError(plan.steps(i), "id used by an earlier step");
    }
  }
  std::vector<std::vector<int>> users(n);
  std::vector<int> pending(n, 0);
  for (int i = 0; i < n; ++i) {
    for (int dep : plan.steps(i).deps()) {
      const auto it = position.find(dep);
      if (it == position.end()) {
        if (options.skip_unknown_deps) continue;
        return StepError(plan.steps(i),
                         absl::StrCat("depends on unknown step ", dep));
      }
      users[it->second].push_back(i);
      ++pending[i];
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int u : users[i]) {
      if (--pending[u] == 0) ready.push(u);
    }
  }
  if (static_cast<int>(order.size()) == n) return order;
  for (int i = 0; i < n; ++i) {
    if (pending[i] > 0) {
      return StepError(plan.steps(i),
                       "deps form a cycle (the step can never start)");
    }
  }
  return order;  // not reached: a short order leaves a step pending
}

}  // namespace meshcast
