#include "planner/kinds/collective/collective_kind.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/ir/plan_building.h"
#include "planner/ir/spec_convert.h"
#include "planner/sim/plan_simulator.h"
#include "util/bytes_text.h"
#include "util/status_macros.h"
#include "util/text_safety.h"

namespace meshcast {
namespace {

constexpr int kMaxIterations = 100000;

struct OpInfo {
  const char* name;
  v1::Step::Op op;
  const char* algorithm;  // what the workers run, for the plan table
};

constexpr OpInfo kOps[] = {
    {"all_reduce", v1::Step::OP_ALL_REDUCE, "ring"},
    {"all_gather", v1::Step::OP_ALL_GATHER, "ring"},
    {"reduce_scatter", v1::Step::OP_REDUCE_SCATTER, "ring"},
    {"all_to_all", v1::Step::OP_ALL_TO_ALL, "pairwise"},
    {"broadcast", v1::Step::OP_BROADCAST, "relay_chain"},
};

const OpInfo* FindOp(absl::string_view name) {
  for (const OpInfo& info : kOps) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

// The spec, checked and in domain types.
struct CollectiveRequest {
  const OpInfo* op = nullptr;
  MeshRequest mesh;
  int64_t requested_bytes = 0;
  DType dtype = DType::kFloat32;
  v1::Reduction reduction = v1::REDUCTION_SUM;
  int iterations = 1;

  int ranks() const {
    int n = 1;
    for (int extent : mesh.shape) n *= extent;
    return n;
  }
  bool RoundsToRanks() const {
    return op->op == v1::Step::OP_ALL_GATHER ||
           op->op == v1::Step::OP_REDUCE_SCATTER ||
           op->op == v1::Step::OP_ALL_TO_ALL;
  }
  // Elements per rank as the plan runs them (nccl-tests' rounding).
  int64_t count() const {
    int64_t c = requested_bytes / DTypeSize(dtype);
    if (RoundsToRanks()) c -= c % ranks();
    return c;
  }
};

absl::StatusOr<CollectiveRequest> RequestOf(const v1::JobSpec& spec) {
  if (!spec.has_collective()) {
    return absl::InvalidArgumentError("spec.collective is not set");
  }
  const v1::CollectiveSpec& c = spec.collective();
  CollectiveRequest request;
  request.op = FindOp(c.op());
  if (request.op == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective.op ", QuotePrefix(c.op()), " is not one of ",
        absl::StrJoin(CollectiveOpNames(), ", ")));
  }
  if (!c.has_mesh()) {
    return absl::InvalidArgumentError(
        "collective.mesh is required (e.g. shape [2, 4]: 2 hosts x 4 "
        "devices)");
  }
  ASSIGN_OR_RETURN(request.mesh,
                   MeshRequestFromProto(c.mesh(), "collective.mesh"));
  if (request.ranks() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective.mesh ", request.mesh.ToString(),
                     " has 1 device; a collective needs at least 2"));
  }
  if (c.dtype() != v1::DTYPE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(request.dtype,
                     DTypeFromProto(c.dtype(), "collective.dtype"));
  }
  if (c.size().empty()) {
    return absl::InvalidArgumentError(
        "collective.size is required (bytes per rank as nccl-tests counts "
        "them, e.g. \"256MiB\")");
  }
  absl::StatusOr<int64_t> bytes = ParseBytes(c.size());
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective.size: ", bytes.status().message()));
  }
  request.requested_bytes = *bytes;
  const int64_t element = DTypeSize(request.dtype);
  const int64_t minimum =
      element * (request.RoundsToRanks() ? request.ranks() : 1);
  if (request.requested_bytes < minimum) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective.size ", QuotePrefix(c.size()), " is below the smallest ",
        c.op(),
        " on ", request.ranks(), " ranks of ", DTypeName(request.dtype), ": ",
        minimum, " bytes"));
  }
  if (request.requested_bytes > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective.size ", QuotePrefix(c.size()),
        " is over the 1 TiB limit per rank"));
  }
  if (c.reduction().empty() || c.reduction() == "sum") {
    request.reduction = v1::REDUCTION_SUM;
  } else if (c.reduction() == "max") {
    request.reduction = v1::REDUCTION_MAX;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective.reduction ", QuotePrefix(c.reduction()),
        " is not one of sum, max"));
  }
  if (c.iterations() < 0 || c.iterations() > kMaxIterations) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective.iterations is ", c.iterations(),
                     "; allowed: 1..", kMaxIterations, " (0 = 1)"));
  }
  request.iterations = std::max(1, c.iterations());
  return request;
}

// Appends the IR of one collective step repeated `iterations` times to a
// plan: its group, tensors, buffers and steps, each step after the previous
// one, the first after step `after` (-1: none).
class CollectivePlanBuilder {
 public:
  CollectivePlanBuilder(const CollectiveRequest& request,
                        const std::vector<int>& devices, v1::Plan& plan)
      : request_(request), devices_(devices), plan_(plan) {
    v1::CommGroup* group = plan_.add_groups();
    group->set_id(plan_.groups_size() - 1);
    group_ = group->id();
    for (int d : devices_) group->add_devices(d);
  }

  // Returns the ids of the steps it appended.
  std::vector<int> Append(int after) && {
    const int64_t n = static_cast<int64_t>(devices_.size());
    const int64_t c = request_.count();
    std::vector<int> inputs, outputs;
    int step_tensor = 0;
    Box slice;
    switch (request_.op->op) {
      case v1::Step::OP_ALL_REDUCE:
      case v1::Step::OP_REDUCE_SCATTER: {
        const int in = AddTensor({n, c});
        const int out = AddTensor({c});
        const bool scatter = request_.op->op == v1::Step::OP_REDUCE_SCATTER;
        for (int r = 0; r < n; ++r) {
          inputs.push_back(AddBuffer(in, r, {{r, r + 1}, {0, c}},
                                     v1::Buffer::ROLE_SOURCE));
          const Box out_box = scatter ? Box{{r * (c / n), (r + 1) * (c / n)}}
                                      : Box{{0, c}};
          outputs.push_back(
              AddBuffer(out, r, out_box, v1::Buffer::ROLE_DESTINATION));
        }
        step_tensor = in;
        break;
      }
      case v1::Step::OP_ALL_GATHER: {
        const int t = AddTensor({c});
        for (int r = 0; r < n; ++r) {
          inputs.push_back(AddBuffer(t, r, {{r * (c / n), (r + 1) * (c / n)}},
                                     v1::Buffer::ROLE_SOURCE));
          outputs.push_back(
              AddBuffer(t, r, {{0, c}}, v1::Buffer::ROLE_DESTINATION));
        }
        step_tensor = t;
        break;
      }
      case v1::Step::OP_ALL_TO_ALL: {
        const int in = AddTensor({n * c});
        const int out = AddTensor({n * c});
        for (int r = 0; r < n; ++r) {
          inputs.push_back(AddBuffer(in, r, {{r * c, (r + 1) * c}},
                                     v1::Buffer::ROLE_SOURCE));
          outputs.push_back(AddBuffer(out, r, {{r * c, (r + 1) * c}},
                                      v1::Buffer::ROLE_DESTINATION));
        }
        step_tensor = in;
        break;
      }
      default: {  // broadcast: a relay chain from rank 0
        const int t = AddTensor({c});
        inputs.push_back(AddBuffer(t, 0, {{0, c}}, v1::Buffer::ROLE_SOURCE));
        for (int r = 1; r < n; ++r) {
          outputs.push_back(
              AddBuffer(t, r, {{0, c}}, v1::Buffer::ROLE_DESTINATION));
        }
        step_tensor = t;
        slice = {{0, c}};
        break;
      }
    }
    std::vector<int> ids;
    for (int i = 0; i < request_.iterations; ++i) {
      v1::Step* step = plan_.add_steps();
      step->set_id(plan_.steps_size() - 1);
      step->set_op(request_.op->op);
      step->set_group(group_);
      step->set_tensor(step_tensor);
      BoxToProto(slice, step->mutable_slice());
      step->set_bytes(c * DTypeSize(request_.dtype));
      step->set_stage(i);
      if (after >= 0) step->add_deps(after);
      after = step->id();
      ids.push_back(step->id());
      for (int b : inputs) step->add_inputs()->set_buffer(b);
      for (int b : outputs) step->add_outputs()->set_buffer(b);
      step->set_reduction(request_.reduction);
      if (request_.op->op == v1::Step::OP_ALL_TO_ALL) {
        for (int64_t k = 0; k < n * n; ++k) step->add_counts(c / n);
      }
    }
    return ids;
  }

 private:
  int AddTensor(std::vector<int64_t> shape) {
    return AddPlanTensor(plan_, shape, request_.dtype,
                         v1::Initializer::KIND_PATTERN);
  }

  int AddBuffer(int tensor, int rank, const Box& box, v1::Buffer::Role role) {
    return AddPlanBuffer(plan_, tensor, devices_[rank], box, role);
  }

  const CollectiveRequest& request_;
  const std::vector<int> devices_;
  v1::Plan& plan_;
  int group_ = 0;
};

}  // namespace

std::vector<std::string> CollectiveOpNames() {
  std::vector<std::string> names;
  for (const OpInfo& info : kOps) names.push_back(info.name);
  return names;
}

double BusBandwidthFactor(absl::string_view op, int n) {
  if (n < 1) return 0;
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

absl::StatusOr<std::vector<int>> AppendCollectiveSteps(
    const v1::JobSpec& spec, const std::vector<int>& devices, int after,
    v1::Plan& plan) {
  ASSIGN_OR_RETURN(const CollectiveRequest request, RequestOf(spec));
  if (static_cast<int>(devices.size()) != request.ranks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective.mesh ", request.mesh.ToString(), " has ",
                     request.ranks(), " devices, given ", devices.size()));
  }
  return CollectivePlanBuilder(request, devices, plan).Append(after);
}

absl::Status CollectiveKind::Validate(const v1::JobSpec& spec) const {
  return RequestOf(spec).status();
}

absl::StatusOr<PlacementRequest> CollectiveKind::Meshes(
    const v1::JobSpec& spec) const {
  ASSIGN_OR_RETURN(const CollectiveRequest request, RequestOf(spec));
  return PlacementRequest::One(request.mesh, "mesh");
}

absl::StatusOr<PlannedJob> CollectiveKind::Plan(
    const v1::JobSpec& spec, const std::vector<DeviceMesh>& meshes,
    const Topology& topology, const PlanOptions& options) const {
  ASSIGN_OR_RETURN(const CollectiveRequest request, RequestOf(spec));
  if (meshes.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a collective job places 1 mesh; got ", meshes.size()));
  }
  RETURN_IF_ERROR(meshes[0].Validate(topology));
  PlannedJob job;
  job.plan.set_kind("collective");
  job.plan.set_strategy(request.op->algorithm);
  CollectivePlanBuilder(request, meshes[0].devices, job.plan).Append(-1);
  RETURN_IF_ERROR(PredictPlan(job.plan, topology).status());
  const int64_t bytes = job.plan.steps(0).bytes();
  job.plan.set_lower_bound_seconds(
      request.iterations * CollectiveLowerBoundSeconds(request.op->op,
                                                       meshes[0].devices,
                                                       bytes, topology));
  if (options.compare_all) {
    job.alternatives.push_back({request.op->algorithm,
                                job.plan.predicted_seconds(),
                                job.plan.lower_bound_seconds(),
                                job.plan.steps_size(),
                                bytes * request.iterations, true});
  }
  return job;
}

void CollectiveKind::Summarize(const v1::JobSpec& spec, const v1::Plan& plan,
                               v1::JobResult& result) const {
  if (!spec.has_collective() || plan.steps_size() == 0) return;
  const std::string& op = spec.collective().op();
  int n = 0;
  if (plan.groups_size() > 0) n = plan.groups(0).devices_size();
  // A step's time is its slowest worker's: a collective ends when its last
  // rank has its data.
  absl::flat_hash_map<int, double> step_seconds;
  for (const v1::StepResult& step : result.steps()) {
    double& slowest = step_seconds[step.step()];
    slowest = std::max(slowest, step.seconds());
  }
  double time = 0;
  if (!step_seconds.empty()) {
    for (const auto& [id, seconds] : step_seconds) time += seconds;
    time /= static_cast<double>(step_seconds.size());
  } else {
    time = result.seconds() / plan.steps_size();
  }
  if (time <= 0) return;
  const double bytes = static_cast<double>(plan.steps(0).bytes());
  const double factor = BusBandwidthFactor(op, n);
  auto& metrics = *result.mutable_metrics();
  metrics["time_per_iteration_seconds"] = time;
  metrics["size_bytes"] = bytes;
  metrics["algbw_bytes_per_second"] = bytes / time;
  metrics["busbw_bytes_per_second"] = bytes / time * factor;
  const double bound = plan.lower_bound_seconds() / plan.steps_size();
  if (bound > 0) {
    metrics["busbw_bound_bytes_per_second"] = bytes / bound * factor;
  }
  const double predicted = plan.predicted_seconds() / plan.steps_size();
  if (predicted > 0) {
    metrics["busbw_predicted_bytes_per_second"] = bytes / predicted * factor;
  }
}

}  // namespace meshcast
