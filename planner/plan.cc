#include "planner/plan.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/sharding.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

// The part of `target` that `covers` leave uncovered, as disjoint boxes.
// Subtracting one cover at a time keeps the remainder a disjoint set, so the
// result is exact however the covers overlap each other.
std::vector<Box> Uncovered(const Box& target,
                           const std::vector<const Box*>& covers) {
  std::vector<Box> remaining;
  if (!IsEmpty(target)) remaining.push_back(target);
  std::vector<Box> next;
  for (const Box* cover : covers) {
    if (remaining.empty()) break;
    next.clear();
    for (const Box& piece : remaining) {
      for (Box& rest : SubtractBox(piece, *cover)) {
        next.push_back(std::move(rest));
      }
    }
    remaining.swap(next);
  }
  return remaining;
}

int64_t TotalElements(const std::vector<Box>& boxes) {
  int64_t total = 0;
  for (const Box& box : boxes) total += NumElements(box);
  return total;
}

// Where each device sits in a problem's source and destination meshes.
struct ProblemIndex {
  absl::flat_hash_map<int, int> src_index;
  absl::flat_hash_map<int, int> dst_index;
};

std::string Describe(int index, const Transfer& transfer) {
  return absl::StrCat("transfer ", index, " (tensor ", transfer.tensor,
                      ", slice ", BoxToString(transfer.slice), ", src device ",
                      transfer.src_device, ")");
}

absl::Status CheckTransferShape(const ReshardPlan& plan,
                                const Topology& topology,
                                const std::vector<Transfer>& transfers, int i) {
  const Transfer& transfer = transfers[i];
  const auto fail = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(i, transfer), ": ", why));
  };
  if (transfer.tensor < 0 ||
      transfer.tensor >= static_cast<int>(plan.problems.size())) {
    return fail(absl::StrCat("tensor index out of range; the plan has ",
                             plan.problems.size(), " problem(s)"));
  }
  const TensorSpec& tensor = plan.problems[transfer.tensor].tensor;
  if (transfer.slice.size() != tensor.shape.size()) {
    return fail(absl::StrCat("slice has rank ", transfer.slice.size(),
                             " but the tensor has rank ", tensor.shape.size()));
  }
  if (IsEmpty(transfer.slice)) return fail("slice is empty");
  if (!Contains(tensor.full_box(), transfer.slice)) {
    return fail(absl::StrCat("slice lies outside the tensor ",
                             BoxToString(tensor.full_box())));
  }
  const int64_t expected_bytes =
      NumElements(transfer.slice) * DTypeSize(tensor.dtype);
  if (transfer.bytes != expected_bytes) {
    return fail(absl::StrCat("bytes is ", transfer.bytes, " but the slice has ",
                             expected_bytes));
  }
  const auto in_topology = [&](int device) {
    return device >= 0 && device < topology.num_devices();
  };
  if (!in_topology(transfer.src_device)) {
    return fail(absl::StrCat("src device is outside the topology (0..",
                             topology.num_devices() - 1, ")"));
  }
  if (transfer.dst_devices.empty()) return fail("no dst devices");
  absl::flat_hash_set<int> chain = {transfer.src_device};
  for (int device : transfer.dst_devices) {
    if (!in_topology(device)) {
      return fail(absl::StrCat("dst device ", device,
                               " is outside the topology (0..",
                               topology.num_devices() - 1, ")"));
    }
    if (!chain.insert(device).second) {
      return fail(
          absl::StrCat("device ", device, " appears twice in the relay chain"));
    }
  }
  if (absl::Status parents = CheckParents(transfer); !parents.ok()) {
    return fail(parents.message());
  }
  int expected_stage = 0;
  for (int dep : transfer.deps) {
    if (dep < 0 || dep >= i) {
      return fail(
          absl::StrCat("dep ", dep, " does not point to an earlier transfer"));
    }
    expected_stage = std::max(expected_stage, transfers[dep].stage + 1);
  }
  if (transfer.stage != expected_stage) {
    return fail(absl::StrCat(
        "stage is ", transfer.stage, " but its dependency depth is ",
        expected_stage, " (0 without deps, else 1 + the largest dep stage)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckParents(const Transfer& transfer) {
  if (transfer.parents.empty()) return absl::OkStatus();
  if (transfer.parents.size() != transfer.dst_devices.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "has ", transfer.parents.size(), " parents for ",
        transfer.dst_devices.size(), " dst devices; need one each (or none)"));
  }
  for (size_t k = 0; k < transfer.parents.size(); ++k) {
    if (transfer.parents[k] < 0 || transfer.parents[k] > static_cast<int>(k)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parents[", k, "] is ", transfer.parents[k],
          "; must be a chain position in [0, ", k, "] (0 = the src)"));
    }
  }
  return absl::OkStatus();
}

int64_t ReshardPlan::total_bytes() const {
  int64_t total = 0;
  for (const Transfer& transfer : transfers) total += transfer.bytes;
  return total;
}

absl::Status VerifyPlan(const ReshardPlan& plan, const Topology& topology) {
  RETURN_IF_ERROR(topology.Validate());
  std::vector<ProblemIndex> index(plan.problems.size());
  for (size_t t = 0; t < plan.problems.size(); ++t) {
    const ReshardProblem& problem = plan.problems[t];
    absl::Status status = problem.Validate(topology);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("problem ", t, ": ", status.message()));
    }
    for (int k = 0; k < problem.src_mesh.num_devices(); ++k) {
      index[t].src_index[problem.src_mesh.devices[k]] = k;
    }
    for (int k = 0; k < problem.dst_mesh.num_devices(); ++k) {
      index[t].dst_index[problem.dst_mesh.devices[k]] = k;
    }
  }
  const std::vector<Transfer>& transfers = plan.transfers;
  const int num_transfers = static_cast<int>(transfers.size());
  for (int i = 0; i < num_transfers; ++i) {
    RETURN_IF_ERROR(CheckTransferShape(plan, topology, transfers, i));
  }

  // What a device holds in a problem's source layout (empty box if none).
  const auto source_box = [&](int t, int device) -> Box {
    const ReshardProblem& problem = plan.problems[t];
    auto it = index[t].src_index.find(device);
    if (it == index[t].src_index.end()) {
      return Box(problem.tensor.shape.size(), Interval{0, 0});
    }
    return DeviceBox(problem.tensor, problem.src_mesh, problem.src_spec,
                     it->second);
  };

  // Every sender holds its slice: from the source layout, or from transfers
  // it (transitively) depends on that delivered to the sending device.
  std::vector<int> visited(num_transfers, -1);
  std::vector<int> stack;
  for (int i = 0; i < num_transfers; ++i) {
    const Transfer& transfer = transfers[i];
    const Box held = source_box(transfer.tensor, transfer.src_device);
    if (Contains(held, transfer.slice)) continue;
    std::vector<const Box*> covers = {&held};
    stack.assign(transfer.deps.begin(), transfer.deps.end());
    while (!stack.empty()) {
      const int j = stack.back();
      stack.pop_back();
      if (visited[j] == i) continue;
      visited[j] = i;
      const Transfer& earlier = transfers[j];
      if (earlier.tensor == transfer.tensor &&
          std::find(earlier.dst_devices.begin(), earlier.dst_devices.end(),
                    transfer.src_device) != earlier.dst_devices.end() &&
          !IsEmpty(Intersect(earlier.slice, transfer.slice))) {
        covers.push_back(&earlier.slice);
      }
      for (int dep : earlier.deps) {
        if (visited[dep] != i) stack.push_back(dep);
      }
    }
    const std::vector<Box> missing = Uncovered(transfer.slice, covers);
    if (!missing.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Describe(i, transfer), ": the sender does not hold ",
          TotalElements(missing), " element(s) of the slice, e.g. ",
          BoxToString(missing.front()),
          ", in the source layout nor from a transfer it depends on"));
    }
  }

  // Every destination device ends up with all it needs.
  absl::flat_hash_map<int64_t, std::vector<int>> received;
  const auto key = [](int t, int device) {
    return (static_cast<int64_t>(t) << 32) | static_cast<uint32_t>(device);
  };
  for (int i = 0; i < num_transfers; ++i) {
    for (int device : transfers[i].dst_devices) {
      received[key(transfers[i].tensor, device)].push_back(i);
    }
  }
  for (size_t t = 0; t < plan.problems.size(); ++t) {
    const ReshardProblem& problem = plan.problems[t];
    for (int k = 0; k < problem.dst_mesh.num_devices(); ++k) {
      const int device = problem.dst_mesh.devices[k];
      const Box needed =
          DeviceBox(problem.tensor, problem.dst_mesh, problem.dst_spec, k);
      if (IsEmpty(needed)) continue;
      const Box held = source_box(static_cast<int>(t), device);
      if (Contains(held, needed)) continue;
      std::vector<const Box*> covers = {&held};
      auto it = received.find(key(static_cast<int>(t), device));
      if (it != received.end()) {
        for (int i : it->second) covers.push_back(&transfers[i].slice);
      }
      const std::vector<Box> missing = Uncovered(needed, covers);
      if (!missing.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", t, ": destination device ", device, " misses ",
            TotalElements(missing), " element(s) of its tile ",
            BoxToString(needed), ", e.g. ", BoxToString(missing.front()),
            ": no transfer delivers them and the device does not hold them"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace meshcast
