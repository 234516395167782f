#include "planner/ir/plan_hazards.h"

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "planner/ir/step_order.h"
#include "planner/ir/spec_convert.h"
#include "planner/tensor.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

struct Access {
  int step;  // index in plan.steps
  Box box;
  bool write;
};

bool TensorForm(const v1::Step& step) {
  return (step.op() == v1::Step::OP_BROADCAST ||
          step.op() == v1::Step::OP_SEND_RECV) &&
         step.slice_size() > 0;
}

// Ancestors of every step as bitsets over step indices (position in
// plan.steps), filled in dependency order.
absl::Status Ancestors(const v1::Plan& plan,
                       std::vector<std::vector<uint64_t>>* out) {
  ASSIGN_OR_RETURN(const std::vector<int> order, StepsInDependencyOrder(plan));
  const int n = plan.steps_size();
  absl::flat_hash_map<int, int> position;
  for (int i = 0; i < n; ++i) position[plan.steps(i).id()] = i;
  const size_t words = (n + 63) / 64;
  out->assign(n, std::vector<uint64_t>(words, 0));
  for (int i : order) {
    std::vector<uint64_t>& mine = (*out)[i];
    for (int dep : plan.steps(i).deps()) {
      const int d = position.at(dep);
      const std::vector<uint64_t>& theirs = (*out)[d];
      for (size_t w = 0; w < words; ++w) mine[w] |= theirs[w];
      mine[d / 64] |= uint64_t{1} << (d % 64);
    }
  }
  return absl::OkStatus();
}

bool Before(const std::vector<std::vector<uint64_t>>& ancestors, int a,
            int b) {
  return (ancestors[b][a / 64] >> (a % 64)) & 1;
}

}  // namespace

absl::Status CheckPlanHazards(const v1::Plan& plan) {
  const int n = plan.steps_size();
  if (n > kMaxHazardCheckSteps) {
    return absl::ResourceExhaustedError(
        absl::StrCat("plan has ", n, " steps; the hazard check takes at most ",
                     kMaxHazardCheckSteps));
  }
  std::vector<std::vector<Access>> by_buffer(plan.buffers_size());
  for (int i = 0; i < n; ++i) {
    const v1::Step& step = plan.steps(i);
    if (TensorForm(step)) continue;
    auto add = [&](const v1::Operand& operand, bool write) -> absl::Status {
      const int b = operand.buffer();
      if (b < 0 || b >= plan.buffers_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step ", step.id(), " names unknown buffer ", b));
      }
      Box box = operand.slice_size() > 0
                    ? BoxFromProto(operand.slice())
                    : BoxFromProto(plan.buffers(b).box());
      by_buffer[b].push_back({i, std::move(box), write});
      return absl::OkStatus();
    };
    for (const v1::Operand& in : step.inputs()) {
      absl::Status s = add(in, false);
      if (!s.ok()) return s;
    }
    for (const v1::Operand& out : step.outputs()) {
      absl::Status s = add(out, true);
      if (!s.ok()) return s;
    }
  }
  std::vector<std::vector<uint64_t>> ancestors;
  absl::Status ordered = Ancestors(plan, &ancestors);
  if (!ordered.ok()) return ordered;
  for (size_t b = 0; b < by_buffer.size(); ++b) {
    const std::vector<Access>& accesses = by_buffer[b];
    for (size_t x = 0; x < accesses.size(); ++x) {
      for (size_t y = x + 1; y < accesses.size(); ++y) {
        const Access& p = accesses[x];
        const Access& q = accesses[y];
        if (p.step == q.step || (!p.write && !q.write)) continue;
        if (Before(ancestors, p.step, q.step) ||
            Before(ancestors, q.step, p.step)) {
          continue;
        }
        const Box shared = Intersect(p.box, q.box);
        if (IsEmpty(shared)) continue;
        return absl::FailedPreconditionError(absl::StrCat(
            "steps ", plan.steps(p.step).id(), " and ",
            plan.steps(q.step).id(), " both touch buffer ", b, " at ",
            BoxToString(shared), " (step ", plan.steps(p.step).id(),
            p.write ? " writes" : " reads", ", step ",
            plan.steps(q.step).id(), q.write ? " writes" : " reads",
            ") and neither depends on the other"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace meshcast
