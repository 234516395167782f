#include "planner/ir/plan_hazards.h"

#include <cstdint>
#include <queue>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/ir/spec_convert.h"
#include "planner/tensor.h"

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

// Ancestors of every step as bitsets over step indices, in an order where
// each step follows its dependencies. INVALID_ARGUMENT for an unknown
// dependency or a cycle.
absl::Status Ancestors(const v1::Plan& plan,
                       std::vector<std::vector<uint64_t>>* out) {
  const int n = plan.steps_size();
  std::vector<int> index_of_id;
  for (int i = 0; i < n; ++i) {
    const int id = plan.steps(i).id();
    if (id < 0 || id > 4 * n + 1024) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", i, " has id ", id, "; ids must be small"));
    }
    if (id >= static_cast<int>(index_of_id.size())) {
      index_of_id.resize(id + 1, -1);
    }
    index_of_id[id] = i;
  }
  std::vector<std::vector<int>> users(n);
  std::vector<int> pending(n, 0);
  for (int i = 0; i < n; ++i) {
    for (int dep : plan.steps(i).deps()) {
      const int d = dep >= 0 && dep < static_cast<int>(index_of_id.size())
                        ? index_of_id[dep]
                        : -1;
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step ", plan.steps(i).id(), " depends on unknown step ", dep));
      }
      users[d].push_back(i);
      ++pending[i];
    }
  }
  const size_t words = (n + 63) / 64;
  out->assign(n, std::vector<uint64_t>(words, 0));
  std::queue<int> ready;
  for (int i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  int done = 0;
  while (!ready.empty()) {
    const int i = ready.front();
    ready.pop();
    ++done;
    for (int u : users[i]) {
      std::vector<uint64_t>& a = (*out)[u];
      const std::vector<uint64_t>& b = (*out)[i];
      for (size_t w = 0; w < words; ++w) a[w] |= b[w];
      a[i / 64] |= uint64_t{1} << (i % 64);
      if (--pending[u] == 0) ready.push(u);
    }
  }
  if (done != n) {
    return absl::InvalidArgumentError("plan.steps: the deps form a cycle");
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
