#include "planner/kinds/tp_overlap/tp_overlap_kind.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "planner/ir/spec_convert.h"
#include "planner/sim/plan_simulator.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

constexpr int64_t kMaxExtent = int64_t{1} << 20;
constexpr uint64_t kSeedA = 1;
constexpr uint64_t kSeedB = 2;

struct TpRequest {
  int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::kFloat32;
  MeshRequest mesh;
  bool all_reduce = false;

  int ranks() const {
    int r = 1;
    for (int extent : mesh.shape) r *= extent;
    return r;
  }
};

absl::Status CheckExtent(absl::string_view field, int64_t value) {
  if (value < 1 || value > kMaxExtent) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp_overlap.", field, " is ", value, "; allowed: 1..",
                     kMaxExtent));
  }
  return absl::OkStatus();
}

absl::StatusOr<TpRequest> RequestOf(const v1::JobSpec& spec) {
  if (!spec.has_tp_overlap()) {
    return absl::InvalidArgumentError("spec.tp_overlap is not set");
  }
  const v1::TpOverlapSpec& t = spec.tp_overlap();
  TpRequest request;
  RETURN_IF_ERROR(CheckExtent("m", t.m()));
  RETURN_IF_ERROR(CheckExtent("n", t.n()));
  RETURN_IF_ERROR(CheckExtent("k", t.k()));
  request.m = t.m();
  request.n = t.n();
  request.k = t.k();
  if (t.dtype() != v1::DTYPE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(request.dtype,
                     DTypeFromProto(t.dtype(), "tp_overlap.dtype"));
  }
  if (request.dtype != DType::kFloat32 && request.dtype != DType::kFloat64 &&
      request.dtype != DType::kFloat16 && request.dtype != DType::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp_overlap.dtype ", DTypeName(request.dtype),
                     " is not one of float32, float64, float16, bfloat16"));
  }
  if (!t.has_mesh()) {
    return absl::InvalidArgumentError(
        "tp_overlap.mesh is required (the TP group, e.g. shape [1, 4])");
  }
  ASSIGN_OR_RETURN(request.mesh,
                   MeshRequestFromProto(t.mesh(), "tp_overlap.mesh"));
  const int tp = request.ranks();
  if (t.collective().empty() || t.collective() == "reduce_scatter") {
    request.all_reduce = false;
  } else if (t.collective() == "all_reduce") {
    request.all_reduce = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("tp_overlap.collective \"", t.collective(),
                     "\" is not one of reduce_scatter, all_reduce"));
  }
  if (!t.mode().empty() && t.mode() != "sequential") {
    return absl::InvalidArgumentError(absl::StrCat(
        "tp_overlap.mode \"", t.mode(),
        "\" is not available; modes built so far: sequential"));
  }
  if (t.chunks() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tp_overlap.chunks is ", t.chunks(), "; allowed: 0 (auto) or more"));
  }
  if (request.k % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp_overlap.k ", request.k, " is not divisible by the ",
                     tp, " ranks of tp_overlap.mesh ", request.mesh.ToString()));
  }
  if (!request.all_reduce && request.m % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tp_overlap.m ", request.m, " is not divisible by the ", tp,
        " ranks of tp_overlap.mesh ", request.mesh.ToString(),
        " (reduce_scatter splits the output's rows)"));
  }
  return request;
}

v1::Plan BuildSequentialPlan(const TpRequest& request,
                             const std::vector<int>& devices) {
  v1::Plan plan;
  plan.set_kind("tp_overlap");
  plan.set_strategy("sequential");
  const int64_t tp = static_cast<int64_t>(devices.size());
  const int64_t m = request.m, n = request.n, k = request.k, kr = k / tp;
  const auto add_tensor = [&](std::vector<int64_t> shape,
                              v1::Initializer::Kind init, uint64_t seed) {
    v1::TensorSpec* tensor = plan.add_tensors();
    for (int64_t extent : shape) tensor->add_shape(extent);
    tensor->set_dtype(DTypeToProto(request.dtype));
    v1::Initializer* i = plan.add_tensor_inits();
    i->set_kind(init);
    i->set_seed(seed);
    return plan.tensors_size() - 1;
  };
  const int a = add_tensor({m, k}, v1::Initializer::KIND_RANDOM, kSeedA);
  const int b = add_tensor({k, n}, v1::Initializer::KIND_RANDOM, kSeedB);
  const int p = add_tensor({tp, m, n}, v1::Initializer::KIND_ZEROS, 0);
  const int y = add_tensor({m, n}, v1::Initializer::KIND_ZEROS, 0);
  const auto add_buffer = [&](int tensor, int rank, const Box& box,
                              v1::Buffer::Role role) {
    v1::Buffer* buffer = plan.add_buffers();
    buffer->set_id(plan.buffers_size() - 1);
    buffer->set_tensor(tensor);
    buffer->set_device(devices[rank]);
    BoxToProto(box, buffer->mutable_box());
    buffer->set_role(role);
    return buffer->id();
  };
  v1::CommGroup* group = plan.add_groups();
  group->set_id(0);
  for (int d : devices) group->add_devices(d);
  const int64_t element = DTypeSize(request.dtype);
  std::vector<int> partials, outputs;
  for (int r = 0; r < tp; ++r) {
    const int a_r = add_buffer(a, r, {{0, m}, {r * kr, (r + 1) * kr}},
                               v1::Buffer::ROLE_SOURCE);
    const int b_r = add_buffer(b, r, {{r * kr, (r + 1) * kr}, {0, n}},
                               v1::Buffer::ROLE_SOURCE);
    const int p_r = add_buffer(p, r, {{r, r + 1}, {0, m}, {0, n}},
                               v1::Buffer::ROLE_SCRATCH);
    const Box y_box = request.all_reduce
                          ? Box{{0, m}, {0, n}}
                          : Box{{r * (m / tp), (r + 1) * (m / tp)}, {0, n}};
    outputs.push_back(
        add_buffer(y, r, y_box, v1::Buffer::ROLE_DESTINATION));
    partials.push_back(p_r);
    v1::Step* gemm = plan.add_steps();
    gemm->set_id(r);
    gemm->set_op(v1::Step::OP_COMPUTE);
    gemm->set_device(devices[r]);
    gemm->add_inputs()->set_buffer(a_r);
    gemm->add_inputs()->set_buffer(b_r);
    gemm->add_outputs()->set_buffer(p_r);
    v1::GemmAttrs* attrs = gemm->mutable_compute()->mutable_gemm();
    attrs->set_m(m);
    attrs->set_n(n);
    attrs->set_k(kr);
    attrs->set_alpha(1);
    gemm->set_flops(2.0 * m * n * kr);
  }
  v1::Step* collective = plan.add_steps();
  collective->set_id(static_cast<int>(tp));
  collective->set_op(request.all_reduce ? v1::Step::OP_ALL_REDUCE
                                        : v1::Step::OP_REDUCE_SCATTER);
  collective->set_group(0);
  collective->set_tensor(p);
  collective->set_stage(1);
  collective->set_bytes(m * n * element);
  collective->set_reduction(v1::REDUCTION_SUM);
  for (int r = 0; r < tp; ++r) {
    collective->add_deps(r);
    collective->add_inputs()->set_buffer(partials[r]);
    collective->add_outputs()->set_buffer(outputs[r]);
  }
  return plan;
}

}  // namespace

absl::Status TpOverlapKind::Validate(const v1::JobSpec& spec) const {
  return RequestOf(spec).status();
}

absl::StatusOr<PlacementRequest> TpOverlapKind::Meshes(
    const v1::JobSpec& spec) const {
  ASSIGN_OR_RETURN(const TpRequest request, RequestOf(spec));
  PlacementRequest placement;
  placement.meshes = {request.mesh};
  placement.names = {"tp_overlap.mesh"};
  return placement;
}

absl::StatusOr<PlannedJob> TpOverlapKind::Plan(
    const v1::JobSpec& spec, const std::vector<DeviceMesh>& meshes,
    const Topology& topology, const PlanOptions& options) const {
  ASSIGN_OR_RETURN(const TpRequest request, RequestOf(spec));
  if (meshes.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a tp_overlap job places 1 mesh; got ", meshes.size()));
  }
  RETURN_IF_ERROR(meshes[0].Validate(topology));
  PlannedJob job;
  job.plan = BuildSequentialPlan(request, meshes[0].devices);
  ASSIGN_OR_RETURN(const PlanSimulation simulation,
                   PredictPlan(job.plan, topology));
  // No schedule beats the longer of the GEMM alone and the collective alone.
  const v1::Step& comm = job.plan.steps(job.plan.steps_size() - 1);
  const double comm_bound = CollectiveLowerBoundSeconds(
      comm.op(), meshes[0].devices, comm.bytes(), topology);
  double gemm_alone = 0;
  for (int r = 0; r + 1 < job.plan.steps_size(); ++r) {
    gemm_alone = std::max(gemm_alone, simulation.step_finish[r] -
                                          simulation.step_start[r]);
  }
  job.plan.set_lower_bound_seconds(std::max(comm_bound, gemm_alone));
  if (options.compare_all) {
    int64_t bytes = 0;
    for (const v1::Step& step : job.plan.steps()) bytes += step.bytes();
    job.alternatives.push_back({"sequential", job.plan.predicted_seconds(),
                                job.plan.lower_bound_seconds(),
                                job.plan.steps_size(), bytes, true});
  }
  return job;
}

void TpOverlapKind::Summarize(const v1::JobSpec& spec, const v1::Plan& plan,
                              v1::JobResult& result) const {
  double gemm = 0, comm = 0;
  for (const v1::StepResult& step : result.steps()) {
    if (step.step() < 0 || step.step() >= plan.steps_size()) continue;
    const bool is_gemm =
        plan.steps(step.step()).op() == v1::Step::OP_COMPUTE;
    double& slot = is_gemm ? gemm : comm;
    slot = std::max(slot, step.seconds());
  }
  auto& metrics = *result.mutable_metrics();
  metrics["gemm_seconds"] = gemm;
  metrics["comm_seconds"] = comm;
  metrics["total_seconds"] = result.seconds();
  if (gemm > 0 && comm > 0 && result.seconds() > 0) {
    metrics["overlap_efficiency"] =
        std::max(0.0, (gemm + comm - result.seconds()) / std::min(gemm, comm));
  }
}

}  // namespace meshcast
