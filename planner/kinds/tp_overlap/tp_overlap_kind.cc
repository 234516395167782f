#include "planner/kinds/tp_overlap/tp_overlap_kind.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/ir/spec_convert.h"
#include "planner/kinds/step_spans.h"
#include "planner/kinds/tp_overlap/tp_overlap_cost.h"
#include "planner/kinds/tp_overlap/tp_overlap_lowering.h"
#include "planner/sim/plan_simulator.h"
#include "util/status_macros.h"
#include "util/text_safety.h"

namespace meshcast {
namespace {

constexpr int64_t kMaxExtent = int64_t{1} << 20;

struct TpRequest {
  TpShape shape;
  MeshRequest mesh;
  TpMode mode = TpMode::kSequential;
  int chunks = 0;  // 0: the cost model's pick

  int ranks() const {
    int r = 1;
    for (int extent : mesh.shape) r *= extent;
    return r;
  }
};

absl::Status CheckExtent(absl::string_view field, int64_t value) {
  if (value < 1 || value > kMaxExtent) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tp_overlap.", field, " is ", value, "; allowed: 1..", kMaxExtent));
  }
  return absl::OkStatus();
}

absl::StatusOr<TpMode> ModeOf(absl::string_view text) {
  if (text.empty() || text == "sequential") return TpMode::kSequential;
  if (text == "chunked") return TpMode::kChunked;
  if (text == "fused") return TpMode::kFused;
  if (text == "auto") return TpMode::kAuto;
  return absl::InvalidArgumentError(
      absl::StrCat("tp_overlap.mode ", QuotePrefix(text),
                   " is not one of sequential, chunked, fused, auto"));
}

absl::StatusOr<TpRequest> RequestOf(const v1::JobSpec& spec) {
  if (!spec.has_tp_overlap()) {
    return absl::InvalidArgumentError("spec.tp_overlap is not set");
  }
  const v1::TpOverlapSpec& t = spec.tp_overlap();
  TpRequest request;
  TpShape& shape = request.shape;
  RETURN_IF_ERROR(CheckExtent("m", t.m()));
  RETURN_IF_ERROR(CheckExtent("n", t.n()));
  RETURN_IF_ERROR(CheckExtent("k", t.k()));
  shape.m = t.m();
  shape.n = t.n();
  shape.k = t.k();
  if (t.dtype() != v1::DTYPE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(shape.dtype,
                     DTypeFromProto(t.dtype(), "tp_overlap.dtype"));
  }
  if (shape.dtype != DType::kFloat32 && shape.dtype != DType::kFloat64 &&
      shape.dtype != DType::kFloat16 && shape.dtype != DType::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp_overlap.dtype ", DTypeName(shape.dtype),
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
    shape.all_reduce = false;
  } else if (t.collective() == "all_reduce") {
    shape.all_reduce = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("tp_overlap.collective ", QuotePrefix(t.collective()),
                     " is not one of reduce_scatter, all_reduce"));
  }
  ASSIGN_OR_RETURN(request.mode, ModeOf(t.mode()));
  if (t.chunks() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tp_overlap.chunks is ", t.chunks(), "; allowed: 0 (auto) or more"));
  }
  request.chunks = t.chunks();
  if (shape.k % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp_overlap.k ", shape.k, " is not divisible by the ", tp,
                     " ranks of tp_overlap.mesh ", request.mesh.ToString()));
  }
  if (!shape.all_reduce && shape.m % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp_overlap.m ", shape.m, " is not divisible by the ", tp,
                     " ranks of tp_overlap.mesh ", request.mesh.ToString(),
                     " (reduce_scatter splits the output's rows)"));
  }
  if (request.mode == TpMode::kFused && tp < 2) {
    return CheckTpChunks(shape, tp, TpMode::kFused, tp);  // names the rule
  }
  if (request.chunks > 0) {
    RETURN_IF_ERROR(CheckTpChunks(shape, tp, request.mode, request.chunks));
  } else if (request.mode != TpMode::kAuto &&
             TpCandidateChunks(shape, tp, request.mode).empty()) {
    // fused with m < tp: no j fits.
    RETURN_IF_ERROR(CheckTpChunks(shape, tp, request.mode, tp));
  }
  return request;
}

}  // namespace

absl::Status TpOverlapKind::Validate(const v1::JobSpec& spec) const {
  return RequestOf(spec).status();
}

absl::StatusOr<PlacementRequest> TpOverlapKind::Meshes(
    const v1::JobSpec& spec) const {
  ASSIGN_OR_RETURN(const TpRequest request, RequestOf(spec));
  return PlacementRequest::One(request.mesh, "tp_overlap.mesh");
}

absl::StatusOr<PlannedJob> TpOverlapKind::Plan(
    const v1::JobSpec& spec, const std::vector<DeviceMesh>& meshes,
    const Topology& topology, const PlanOptions& options) const {
  ASSIGN_OR_RETURN(const TpRequest request, RequestOf(spec));
  if (meshes.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tp_overlap job places 1 mesh; got ", meshes.size()));
  }
  RETURN_IF_ERROR(meshes[0].Validate(topology));
  const std::vector<int>& devices = meshes[0].devices;
  ASSIGN_OR_RETURN(
      TpSearch search,
      SearchTpModes(request.shape, request.mode, request.chunks, devices,
                    topology,
                    TpCostModel::ForDeviceFlops(topology.device_flops),
                    options.compare_all));
  PlannedJob job;
  job.plan = std::move(search.best.lowering.plan);
  // The mode phase, not the measurement stages before it (see the header).
  job.plan.set_predicted_seconds(search.best.seconds);
  // No schedule beats the longer of the GEMM alone and the collective alone.
  const v1::Step& comm = job.plan.steps(search.best.lowering.comm_alone_step);
  const double comm_bound =
      CollectiveLowerBoundSeconds(comm.op(), devices, comm.bytes(), topology);
  double gemm_alone = 0;
  for (int i = 0; i < job.plan.steps_size(); ++i) {
    if (job.plan.steps(i).stage() != kStageGemmAlone) continue;
    gemm_alone = std::max(gemm_alone, job.plan.predicted_step_finish(i) -
                                          job.plan.predicted_step_start(i));
  }
  job.plan.set_lower_bound_seconds(std::max(comm_bound, gemm_alone));
  for (const TpAlternative& row : search.alternatives) {
    job.alternatives.push_back({row.name, row.seconds,
                                job.plan.lower_bound_seconds(), row.steps,
                                row.bytes, row.name == search.best.name,
                                /*peak_memory_bytes=*/0, row.note});
  }
  return job;
}

double TpOverlapKind::PredictedSpanSeconds(
    const v1::JobResult& result) const {
  const auto total = result.metrics().find("total_seconds");
  return total != result.metrics().end() ? total->second : result.seconds();
}

void TpOverlapKind::Summarize(const v1::JobSpec& spec, const v1::Plan& plan,
                              v1::JobResult& result) const {
  const std::vector<StepSpan> spans = StepSpansOf(plan, result);
  const auto stage = [&](const StepSpan& s) {
    return plan.steps(s.index).stage();
  };
  const auto by_device = [](const StepSpan& s) {
    return absl::StrCat(s.device);
  };
  const double gemm = SlowestSpan(
      spans, [&](const StepSpan& s) { return stage(s) == kStageGemmAlone; },
      by_device);
  const double comm = SlowestSpan(
      spans, [&](const StepSpan& s) { return stage(s) == kStageCommAlone; },
      [](const StepSpan& s) { return s.worker; });
  const double total = SlowestSpan(
      spans, [&](const StepSpan& s) { return stage(s) >= kStageModeComm; },
      [](const StepSpan&) { return std::string(); });
  const double gemm_under_overlap = SlowestSpan(
      spans,
      [&](const StepSpan& s) {
        const v1::Step& step = plan.steps(s.index);
        return step.stage() >= kStageModeComm &&
               step.op() == v1::Step::OP_COMPUTE && step.compute().has_gemm();
      },
      by_device);
  auto& metrics = *result.mutable_metrics();
  if (gemm > 0) metrics["gemm_seconds"] = gemm;
  if (comm > 0) metrics["comm_seconds"] = comm;
  if (total > 0) metrics["total_seconds"] = total;
  if (gemm > 0 && comm > 0 && total > 0) {
    // Above 1 the mode would beat max(gemm, comm), its bound: that is noise
    // in the alone phases (a loaded host), not overlap, so it reads as 1.
    metrics["overlap_efficiency"] = std::clamp(
        (gemm + comm - total) / std::min(gemm, comm), 0.0, 1.0);
  }
  if (gemm > 0 && gemm_under_overlap > 0) {
    metrics["gemm_slowdown"] = gemm_under_overlap / gemm;
  }
  if (plan.predicted_seconds() > 0) {
    metrics["predicted_total_seconds"] = plan.predicted_seconds();
  }
}

}  // namespace meshcast
