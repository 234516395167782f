#include "planner/kinds/calibrate/calibrate_kind.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/ir/spec_convert.h"
#include "planner/kinds/collective/collective_kind.h"
#include "planner/sim/plan_simulator.h"
#include "util/bytes_text.h"
#include "util/status_macros.h"
#include "util/text_safety.h"

namespace meshcast {
namespace {

constexpr int kMaxPoints = 32;
constexpr int kMaxRepeat = 100;
constexpr int64_t kMaxBytes = int64_t{1} << 32;  // 4 GiB per rank

struct CalibrateRequest {
  std::vector<std::string> ops;
  MeshRequest mesh;
  std::vector<int64_t> sizes;  // per-rank bytes, ascending
  int repeat = 3;
  v1::DType dtype = v1::DTYPE_FLOAT32;

  int hosts() const { return mesh.shape[0]; }
  int devices() const { return mesh.shape[1]; }
  std::vector<std::string> classes() const {
    std::vector<std::string> out;
    if (devices() >= 2) out.push_back(kIntraHost);
    if (hosts() >= 2) out.push_back(kInterHost);
    return out;
  }
  // The mesh's devices a class measures (mesh row-major: host h, device j
  // is devices[h * D + j]).
  std::vector<int> Group(const std::string& link_class,
                         const std::vector<int>& devices) const {
    std::vector<int> group;
    if (link_class == kIntraHost) {
      group.assign(devices.begin(), devices.begin() + this->devices());
    } else {
      for (int h = 0; h < hosts(); ++h) {
        group.push_back(devices[h * this->devices()]);
      }
    }
    return group;
  }
};

absl::StatusOr<int64_t> SizeOf(const std::string& field,
                               const std::string& text, int64_t fallback) {
  if (text.empty()) return fallback;
  absl::StatusOr<int64_t> bytes = ParseBytes(text);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibrate.", field, ": ", bytes.status().message()));
  }
  if (*bytes < 1 || *bytes > kMaxBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibrate.", field, " ", QuotePrefix(text),
                     " is out of range; allowed: 1 byte .. 4GiB per rank"));
  }
  return *bytes;
}

absl::StatusOr<CalibrateRequest> RequestOf(const v1::JobSpec& spec) {
  if (!spec.has_calibrate()) {
    return absl::InvalidArgumentError("spec.calibrate is not set");
  }
  const v1::CalibrateSpec& c = spec.calibrate();
  CalibrateRequest request;
  const std::vector<std::string> known = CalibratedOpNames();
  for (int i = 0; i < c.ops_size(); ++i) {
    if (std::find(known.begin(), known.end(), c.ops(i)) == known.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibrate.ops[", i, "] ", QuotePrefix(c.ops(i)),
                       " is not one of ", absl::StrJoin(known, ", ")));
    }
    if (std::find(request.ops.begin(), request.ops.end(), c.ops(i)) ==
        request.ops.end()) {
      request.ops.push_back(c.ops(i));
    }
  }
  if (request.ops.empty()) request.ops = known;
  v1::DeviceMesh mesh = c.mesh();
  if (!c.has_mesh()) {
    mesh.add_shape(2);
    mesh.add_shape(2);
  }
  ASSIGN_OR_RETURN(request.mesh, MeshRequestFromProto(mesh, "calibrate.mesh"));
  if (request.mesh.shape.size() != 2 ||
      request.hosts() * request.devices() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibrate.mesh ", request.mesh.ToString(),
        " must be hosts x devices per host with 2 hosts or 2 devices at "
        "least (e.g. [2, 4])"));
  }
  request.dtype = c.dtype() == v1::DTYPE_UNSPECIFIED ? v1::DTYPE_FLOAT32
                                                     : c.dtype();
  ASSIGN_OR_RETURN(const DType dtype,
                   DTypeFromProto(request.dtype, "calibrate.dtype"));
  ASSIGN_OR_RETURN(const int64_t low,
                   SizeOf("min_size", c.min_size(), int64_t{64} << 10));
  ASSIGN_OR_RETURN(const int64_t high,
                   SizeOf("max_size", c.max_size(), int64_t{16} << 20));
  // Every op must hold one element per rank of the larger group.
  const int64_t smallest =
      DTypeSize(dtype) * std::max(request.hosts(), request.devices());
  if (low < smallest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibrate.min_size is ", low, " bytes; allowed: at least ", smallest,
        " (one ", DTypeName(dtype), " element per rank)"));
  }
  if (high <= low) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibrate.max_size (", high, " bytes) must be above min_size (", low,
        " bytes)"));
  }
  const int points = c.points() == 0 ? 4 : c.points();
  if (points < 2 || points > kMaxPoints) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibrate.points is ", c.points(), "; allowed: 2..", kMaxPoints,
        " (0 = 4)"));
  }
  for (int p = 0; p < points; ++p) {
    const double ratio = static_cast<double>(high) / low;
    request.sizes.push_back(static_cast<int64_t>(
        std::llround(low * std::pow(ratio, static_cast<double>(p) /
                                               (points - 1)))));
  }
  request.repeat = c.repeat() == 0 ? 3 : c.repeat();
  if (request.repeat < 1 || request.repeat > kMaxRepeat) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibrate.repeat is ", c.repeat(), "; allowed: 1..", kMaxRepeat,
        " (0 = 3)"));
  }
  return request;
}

// The `collective` job spec of one measurement point.
v1::JobSpec PointSpec(const CalibrateRequest& request, const std::string& op,
                      int ranks, int64_t bytes) {
  v1::JobSpec spec;
  v1::CollectiveSpec& c = *spec.mutable_collective();
  c.set_op(op);
  c.mutable_mesh()->add_shape(ranks);
  c.set_size(absl::StrCat(bytes));
  c.set_dtype(request.dtype);
  c.set_iterations(request.repeat);
  return spec;
}

// Visits every measurement point in plan order: (class, op, size index).
template <typename Visit>
void ForEachPoint(const CalibrateRequest& request, Visit visit) {
  for (const std::string& link_class : request.classes()) {
    for (const std::string& op : request.ops) {
      for (size_t i = 0; i < request.sizes.size(); ++i) {
        visit(link_class, op, i);
      }
    }
  }
}

std::string Prefix(const std::string& op, const std::string& link_class) {
  return absl::StrCat(op, "_", link_class, "_");
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

std::vector<std::string> CalibratedOpNames() {
  return {"all_to_all", "all_gather", "reduce_scatter", "all_reduce"};
}

absl::StatusOr<AlphaBeta> FitAlphaBeta(const std::vector<double>& bytes,
                                       const std::vector<double>& seconds) {
  if (bytes.size() != seconds.size() || bytes.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("a fit needs 2 points or more, got ", bytes.size()));
  }
  // Weighted least squares with weights 1 / t^2: the normal equations of
  // sum w (a + b x - t)^2.
  double sw = 0, sx = 0, sxx = 0, st = 0, sxt = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!(seconds[i] > 0) || !std::isfinite(seconds[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("a fit needs times > 0, point ", i, " is ", seconds[i]));
    }
    const double w = 1 / (seconds[i] * seconds[i]);
    sw += w;
    sx += w * bytes[i];
    sxx += w * bytes[i] * bytes[i];
    st += w * seconds[i];
    sxt += w * bytes[i] * seconds[i];
  }
  const double det = sw * sxx - sx * sx;
  if (!(det > 1e-12 * sw * sxx)) {
    return absl::InvalidArgumentError("a fit needs two different sizes");
  }
  AlphaBeta fit;
  fit.alpha_seconds = (sxx * st - sx * sxt) / det;
  fit.beta_seconds_per_byte = (sw * sxt - sx * st) / det;
  if (fit.alpha_seconds < 0) {  // through the origin: min sum w (b x - t)^2
    fit.alpha_seconds = 0;
    fit.beta_seconds_per_byte = sxt / sxx;
  }
  if (!(fit.beta_seconds_per_byte > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the fit's beta is ", fit.beta_seconds_per_byte,
        " s/byte: the times do not grow with the size (too noisy)"));
  }
  return fit;
}

absl::Status CalibrateKind::Validate(const v1::JobSpec& spec) const {
  return RequestOf(spec).status();
}

absl::StatusOr<PlacementRequest> CalibrateKind::Meshes(
    const v1::JobSpec& spec) const {
  ASSIGN_OR_RETURN(const CalibrateRequest request, RequestOf(spec));
  return PlacementRequest::One(request.mesh, "calibrate.mesh");
}

absl::StatusOr<PlannedJob> CalibrateKind::Plan(
    const v1::JobSpec& spec, const std::vector<DeviceMesh>& meshes,
    const Topology& topology, const PlanOptions& options) const {
  ASSIGN_OR_RETURN(const CalibrateRequest request, RequestOf(spec));
  if (meshes.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a calibrate job places 1 mesh; got ", meshes.size()));
  }
  RETURN_IF_ERROR(meshes[0].Validate(topology));
  PlannedJob job;
  job.plan.set_kind("calibrate");
  job.plan.set_strategy("sweep");
  int last = -1;
  absl::Status status;
  ForEachPoint(request, [&](const std::string& link_class,
                            const std::string& op, size_t i) {
    if (!status.ok()) return;
    const std::vector<int> group =
        request.Group(link_class, meshes[0].devices);
    absl::StatusOr<std::vector<int>> steps = AppendCollectiveSteps(
        PointSpec(request, op, static_cast<int>(group.size()),
                  request.sizes[i]),
        group, last, job.plan);
    if (!steps.ok()) {
      status = steps.status();
      return;
    }
    last = steps->back();
  });
  RETURN_IF_ERROR(status);
  // The model's own times of these steps, without any earlier calibration:
  // the fit of the measurement is compared with them.
  Topology nominal = topology;
  nominal.calibration.clear();
  RETURN_IF_ERROR(PredictPlan(job.plan, nominal).status());
  job.plan.set_lower_bound_seconds(0);
  if (options.compare_all) {
    int64_t bytes = 0;
    for (const v1::Step& step : job.plan.steps()) bytes += step.bytes();
    job.alternatives.push_back({"sweep", job.plan.predicted_seconds(), 0,
                                job.plan.steps_size(), bytes, true});
  }
  return job;
}

void CalibrateKind::Summarize(const v1::JobSpec& spec, const v1::Plan& plan,
                              v1::JobResult& result) const {
  const absl::StatusOr<CalibrateRequest> request = RequestOf(spec);
  if (!request.ok()) return;
  // A step's time: its slowest worker's (a collective ends when its last
  // rank has its data).
  std::vector<double> measured(plan.steps_size(), 0);
  for (const v1::StepResult& step : result.steps()) {
    if (step.step() < 0 || step.step() >= plan.steps_size()) continue;
    measured[step.step()] = std::max(measured[step.step()], step.seconds());
  }
  const bool predicted = plan.predicted_step_start_size() == plan.steps_size() &&
                         plan.predicted_step_finish_size() == plan.steps_size();
  auto& metrics = *result.mutable_metrics();
  int next = 0, fitted = 0;
  std::vector<double> bytes, times, model;
  ForEachPoint(*request, [&](const std::string& link_class,
                             const std::string& op, size_t i) {
    std::vector<double> runs, model_runs;
    for (int r = 0; r < request->repeat && next < plan.steps_size(); ++r) {
      runs.push_back(measured[next]);
      if (predicted) {
        model_runs.push_back(plan.predicted_step_finish(next) -
                             plan.predicted_step_start(next));
      }
      if (r == 0) bytes.push_back(static_cast<double>(plan.steps(next).bytes()));
      ++next;
    }
    times.push_back(Median(runs));
    model.push_back(Median(model_runs));
    if (i + 1 < request->sizes.size()) return;
    // The last size of (op, class): fit.
    const absl::StatusOr<AlphaBeta> fit = FitAlphaBeta(bytes, times);
    const absl::StatusOr<AlphaBeta> own = FitAlphaBeta(bytes, model);
    if (fit.ok() && own.ok()) {
      const std::string prefix = Prefix(op, link_class);
      metrics[prefix + "alpha_seconds"] = fit->alpha_seconds;
      metrics[prefix + "beta_seconds_per_byte"] = fit->beta_seconds_per_byte;
      metrics[prefix + "model_alpha_seconds"] = own->alpha_seconds;
      metrics[prefix + "model_beta_seconds_per_byte"] =
          own->beta_seconds_per_byte;
      metrics[prefix + "ranks"] =
          link_class == kIntraHost ? request->devices() : request->hosts();
      ++fitted;
    }
    bytes.clear();
    times.clear();
    model.clear();
  });
  metrics["points_fitted"] = fitted;
}

std::vector<CollectiveCalibration> CalibrateKind::Calibration(
    const v1::JobSpec& spec, const v1::JobResult& result) const {
  std::vector<CollectiveCalibration> out;
  const auto& metrics = result.metrics();
  auto get = [&](const std::string& name, double* value) {
    const auto it = metrics.find(name);
    if (it == metrics.end()) return false;
    *value = it->second;
    return true;
  };
  for (const std::string& link_class : {std::string(kIntraHost),
                                        std::string(kInterHost)}) {
    for (const std::string& op : CalibratedOpNames()) {
      const std::string prefix = Prefix(op, link_class);
      CollectiveCalibration c;
      c.op = op;
      c.link_class = link_class;
      double ranks = 0;
      if (get(prefix + "alpha_seconds", &c.alpha_seconds) &&
          get(prefix + "beta_seconds_per_byte", &c.beta_seconds_per_byte) &&
          get(prefix + "model_alpha_seconds", &c.model_alpha_seconds) &&
          get(prefix + "model_beta_seconds_per_byte",
              &c.model_beta_seconds_per_byte) &&
          get(prefix + "ranks", &ranks)) {
        c.ranks = static_cast<int>(ranks);
        out.push_back(std::move(c));
      }
    }
  }
  return out;
}

}  // namespace meshcast
