#include "planner/kinds/pipeline/pipeline_kind.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/cost_model.h"
#include "planner/ir/spec_convert.h"
#include "planner/kinds/step_spans.h"
#include "planner/sim/plan_simulator.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

constexpr int kMaxStages = 64;
constexpr int kMaxMicrobatches = 1024;
constexpr int64_t kMaxRows = int64_t{1} << 20;
constexpr int64_t kMaxWidth = int64_t{1} << 17;
constexpr int kMaxLayers = 256;
// Steps a plan may hold: each (stage, micro-batch, block) makes about 10
// per device.
constexpr double kMaxSteps = 2e6;

// The activation of one micro-batch.
TensorSpec ActivationOf(const PipelineShape& shape) {
  return TensorSpec{{shape.microbatch_size, shape.hidden}, shape.dtype};
}

absl::StatusOr<ShardingSpec> LayoutOf(const v1::PipelineStage& stage,
                                      bool input, const std::string& field,
                                      const PipelineShape& shape,
                                      const DeviceMesh& mesh) {
  const v1::ShardingSpec& proto =
      input ? stage.input_spec() : stage.output_spec();
  ShardingSpec spec;
  if (proto.text().empty() && proto.dims_size() == 0) {
    ASSIGN_OR_RETURN(spec, ShardingSpec::Parse("R,R"));  // whole everywhere
  } else {
    ASSIGN_OR_RETURN(spec, ShardingFromProto(proto, field));
  }
  const TensorSpec activation = ActivationOf(shape);
  absl::Status valid = spec.Validate(activation, mesh);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " ", spec.ToString(), ": ", valid.message(),
        " (the activation is [microbatch_size, hidden]: two dimensions, "
        "e.g. \"S0,R\", \"R,S1\", \"R,R\")"));
  }
  for (int r = 0; r < mesh.num_devices(); ++r) {
    if (IsEmpty(DeviceBox(activation, mesh, spec, r))) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " ", spec.ToString(), " gives device ", r, " of mesh ",
          absl::StrJoin(mesh.shape, "x"), " no part of the [",
          shape.microbatch_size, ", ", shape.hidden,
          "] activation; allowed: layouts whose shards are at least one row "
          "and column (raise microbatch_size or hidden)"));
    }
  }
  return spec;
}

// The concrete schedules to plan and which of them may be chosen.
struct Candidate {
  PipelineSchedule schedule;
  bool overlap;
  LoweredPipeline lowered;
  double seconds = 0;
  int64_t peak_bytes = 0;
  std::string Name() const {
    return absl::StrCat(PipelineScheduleName(schedule),
                        overlap ? "" : " (no overlap)");
  }
};

// The busiest stage's GEMM FLOPs per device at the device rate.
double ComputeLowerBound(const PipelineRequest& request,
                         const Topology& topology) {
  const PipelineShape& s = request.shape;
  double worst = 0;
  for (size_t i = 0; i < request.stages.size(); ++i) {
    const int tp = request.stages[i].devices();
    const double per_block = 2.0 * s.microbatch_size * s.hidden *
                             (static_cast<double>(s.ffn) / tp);
    // Forward: 2 GEMMs; backward: 4 (3 for stage 0's first block).
    const double gemms = 6.0 * s.layers - (i == 0 ? 1 : 0);
    worst = std::max(worst, gemms * per_block * s.microbatches);
  }
  return worst / topology.device_flops;
}

// What no schedule beats: the busiest stage's GEMM FLOPs per device at the
// device rate (no bubble), or every micro-batch's activations (or
// gradients) across one stage boundary through its busiest link.
double PipelineLowerBound(const PipelineRequest& request,
                          const std::vector<PipelineHop>& hops,
                          const Topology& topology) {
  double bound = 0;
  for (const PipelineHop& hop : hops) {
    for (const ReshardPlan* plan : {&hop.forward, &hop.backward}) {
      if (plan->problems.empty()) continue;
      absl::StatusOr<std::vector<UnitTask>> one =
          ComputeUnitTasks(plan->problems[0]);
      if (!one.ok()) continue;
      std::vector<UnitTask> all;
      for (int m = 0; m < request.shape.microbatches; ++m) {
        all.insert(all.end(), one->begin(), one->end());
      }
      bound = std::max(bound, LowerBoundSeconds(all, topology));
    }
  }
  return std::max(bound, ComputeLowerBound(request, topology));
}

// Sorted, merged intervals' total length.
double UnionLength(std::vector<std::pair<double, double>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0, start = 0, end = -1;
  bool open = false;
  for (const auto& [a, b] : intervals) {
    if (!open || a > end) {
      if (open) total += end - start;
      start = a;
      end = b;
      open = true;
    } else {
      end = std::max(end, b);
    }
  }
  if (open) total += end - start;
  return total;
}

bool IsSend(const std::string& label) {
  return !label.empty() && (label.back() == '>' || label.front() == '<');
}

}  // namespace

int PipelineStageRequest::devices() const {
  int n = 1;
  for (int extent : mesh.shape) n *= extent;
  return n;
}

absl::StatusOr<PipelineRequest> PipelineRequestOf(const v1::JobSpec& spec) {
  if (!spec.has_pipeline()) {
    return absl::InvalidArgumentError("spec.pipeline is not set");
  }
  const v1::PipelineSpec& p = spec.pipeline();
  PipelineRequest request;
  PipelineShape& shape = request.shape;
  RETURN_IF_ERROR(
      CheckSpecRange("pipeline.stages (count)", p.stages_size(), 2, kMaxStages));
  RETURN_IF_ERROR(CheckSpecRange("pipeline.microbatches", p.microbatches(), 1,
                                 kMaxMicrobatches));
  shape.microbatches = p.microbatches();
  RETURN_IF_ERROR(CheckSpecRange("pipeline.microbatch_size",
                                 p.microbatch_size(), 1, kMaxRows));
  shape.microbatch_size = p.microbatch_size();
  RETURN_IF_ERROR(CheckSpecRange("pipeline.hidden", p.hidden(), 1, kMaxWidth));
  shape.hidden = p.hidden();
  shape.ffn = p.ffn() == 0 ? 4 * shape.hidden : p.ffn();
  RETURN_IF_ERROR(CheckSpecRange("pipeline.ffn", shape.ffn, 1, 4 * kMaxWidth));
  shape.layers = p.layers_per_stage() == 0 ? 1 : p.layers_per_stage();
  RETURN_IF_ERROR(CheckSpecRange("pipeline.layers_per_stage", shape.layers, 1,
                                 kMaxLayers));
  if (p.dtype() != v1::DTYPE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(shape.dtype, DTypeFromProto(p.dtype(), "pipeline.dtype"));
  }
  if (shape.dtype != DType::kFloat32 && shape.dtype != DType::kFloat64 &&
      shape.dtype != DType::kFloat16 && shape.dtype != DType::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.dtype ", DTypeName(shape.dtype),
                     " is not one of float32, float64, float16, bfloat16"));
  }
  shape.seed = p.seed() == 0 ? 1 : p.seed();
  shape.overlap = !p.no_overlap();
  ASSIGN_OR_RETURN(request.schedule, PipelineScheduleFromName(p.schedule()));
  if (p.memory_limit_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.memory_limit_bytes is ", p.memory_limit_bytes(),
        "; allowed: 0 (no limit) or a positive byte count"));
  }
  request.memory_limit_bytes = p.memory_limit_bytes();
  if (!p.reshard_strategy().empty()) {
    absl::StatusOr<Strategy> strategy = ParseStrategy(p.reshard_strategy());
    if (!strategy.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.reshard_strategy: ", strategy.status().message()));
    }
    request.strategy = *strategy;
  }
  double steps = 0;
  for (int i = 0; i < p.stages_size(); ++i) {
    const std::string field = absl::StrCat("pipeline.stages[", i, "]");
    const v1::PipelineStage& stage = p.stages(i);
    if (!stage.has_mesh()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".mesh is required (e.g. \"1x2\": 2 devices of one host)"));
    }
    PipelineStageRequest out;
    ASSIGN_OR_RETURN(out.mesh,
                     MeshRequestFromProto(stage.mesh(), field + ".mesh"));
    const DeviceMesh mesh = UnplacedMesh(out.mesh.shape);
    ASSIGN_OR_RETURN(out.input_spec, LayoutOf(stage, true, field + ".input_spec",
                                              shape, mesh));
    ASSIGN_OR_RETURN(out.output_spec,
                     LayoutOf(stage, false, field + ".output_spec", shape, mesh));
    if (shape.ffn % out.devices() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.ffn ", shape.ffn, " is not divisible by the ",
          out.devices(), " devices of ", field,
          ".mesh (each stage splits the MLP width over all its devices)"));
    }
    steps += 12.0 * out.devices() * shape.layers * shape.microbatches;
    request.stages.push_back(std::move(out));
  }
  if (steps > kMaxSteps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline: stages x devices x layers_per_stage x microbatches make "
        "a plan of about ", static_cast<int64_t>(steps),
        " steps; allowed: at most ", static_cast<int64_t>(kMaxSteps)));
  }
  return request;
}

int64_t PredictedPeakActivationBytes(const PipelineRequest& request,
                                     PipelineSchedule schedule) {
  const int count = static_cast<int>(request.stages.size());
  const auto order =
      PipelineOrder(schedule, count, request.shape.microbatches);
  int64_t peak = 0;
  for (int s = 0; s < count; ++s) {
    peak = std::max(peak, PeakInFlight(order[s]) *
                              PipelineActivationBytes(
                                  request.shape, request.stages[s].devices()));
  }
  return peak;
}

namespace {

// OK when some schedule the request allows keeps its activations within
// memory_limit_bytes; else INVALID_ARGUMENT with each schedule's need. The
// need is known before placing, so submit refuses what no placement runs.
absl::Status CheckMemoryLimit(const PipelineRequest& request) {
  if (request.memory_limit_bytes == 0) return absl::OkStatus();
  std::vector<std::string> needs;
  for (PipelineSchedule schedule : ConcretePipelineSchedules()) {
    if (request.schedule != PipelineSchedule::kAuto &&
        request.schedule != schedule) {
      continue;
    }
    const int64_t peak = PredictedPeakActivationBytes(request, schedule);
    if (peak <= request.memory_limit_bytes) return absl::OkStatus();
    needs.push_back(absl::StrCat(PipelineScheduleName(schedule), " ", peak));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "pipeline.memory_limit_bytes ", request.memory_limit_bytes,
      " is below the activation bytes a device keeps under ",
      request.schedule == PipelineSchedule::kAuto ? "every schedule"
                                                  : "this schedule",
      " (", absl::StrJoin(needs, ", "),
      "); allowed: at least the smallest of those, or 0 for no limit"));
}

}  // namespace

absl::Status PipelineKind::Validate(const v1::JobSpec& spec) const {
  ASSIGN_OR_RETURN(const PipelineRequest request, PipelineRequestOf(spec));
  return CheckMemoryLimit(request);
}

absl::StatusOr<PlacementRequest> PipelineKind::Meshes(
    const v1::JobSpec& spec) const {
  ASSIGN_OR_RETURN(const PipelineRequest request, PipelineRequestOf(spec));
  PlacementRequest placement;
  for (size_t i = 0; i < request.stages.size(); ++i) {
    placement.meshes.push_back(request.stages[i].mesh);
    placement.names.push_back(absl::StrCat("pipeline.stages[", i, "].mesh"));
  }
  // Stages on hosts of their own where the cluster has them, else side by
  // side on one host's free devices; never on the same device.
  placement.share_hosts = true;
  return placement;
}

absl::StatusOr<PlannedJob> PipelineKind::Plan(
    const v1::JobSpec& spec, const std::vector<DeviceMesh>& meshes,
    const Topology& topology, const PlanOptions& options) const {
  ASSIGN_OR_RETURN(const PipelineRequest request, PipelineRequestOf(spec));
  RETURN_IF_ERROR(CheckMemoryLimit(request));
  if (meshes.size() != request.stages.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a pipeline job of ", request.stages.size(),
                     " stages places as many meshes; got ", meshes.size()));
  }
  std::vector<PipelineStageLayout> layouts;
  std::map<int, size_t> stage_of_device;
  for (size_t i = 0; i < meshes.size(); ++i) {
    RETURN_IF_ERROR(meshes[i].Validate(topology));
    for (int device : meshes[i].devices) {
      auto [it, fresh] = stage_of_device.try_emplace(device, i);
      if (!fresh) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pipeline.stages[", it->second, "].mesh and pipeline.stages[", i,
            "].mesh share device ", device,
            "; allowed: stages on separate devices"));
      }
    }
    layouts.push_back({meshes[i], request.stages[i].input_spec,
                       request.stages[i].output_spec});
  }
  ASSIGN_OR_RETURN(
      const std::vector<PipelineHop> hops,
      PlanPipelineHops(request.shape, layouts, topology, request.strategy));

  const bool all =
      request.schedule == PipelineSchedule::kAuto || options.compare_all;
  std::vector<Candidate> candidates;
  for (PipelineSchedule schedule : ConcretePipelineSchedules()) {
    if (!all && schedule != request.schedule) continue;
    candidates.push_back({schedule, request.shape.overlap, {}, 0, 0});
    // The table also shows what overlapping the sends is worth.
    if (options.compare_all && request.shape.overlap) {
      candidates.push_back({schedule, false, {}, 0, 0});
    }
  }
  // What the spec lets auto (or the forced schedule) run.
  const auto eligible = [&](const Candidate& c) {
    return c.overlap == request.shape.overlap &&
           (request.memory_limit_bytes == 0 ||
            c.peak_bytes <= request.memory_limit_bytes) &&
           (request.schedule == PipelineSchedule::kAuto ||
            request.schedule == c.schedule);
  };
  int best = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = candidates[i];
    PipelineShape shape = request.shape;
    shape.overlap = c.overlap;
    ASSIGN_OR_RETURN(c.lowered,
                     LowerPipeline(shape, layouts, hops, c.schedule));
    ASSIGN_OR_RETURN(const PlanSimulation sim,
                     PredictPlan(c.lowered.plan, topology));
    c.seconds = sim.seconds;
    c.peak_bytes = PredictedPeakActivationBytes(request, c.schedule);
    if (eligible(c) && (best < 0 || c.seconds < candidates[best].seconds)) {
      best = static_cast<int>(i);
    }
  }
  // Schedules predicted within 1% of the fastest are a tie: the one that
  // keeps fewer activations wins it (1f1b over gpipe when nothing waits on
  // the network).
  const double fastest = best >= 0 ? candidates[best].seconds : 0;
  for (size_t i = 0; best >= 0 && i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    if (eligible(c) && c.seconds <= fastest * 1.01 &&
        c.peak_bytes < candidates[best].peak_bytes) {
      best = static_cast<int>(i);
    }
  }
  if (best < 0) {
    return absl::InternalError("no pipeline schedule fits (a planner bug)");
  }
  const double bound = PipelineLowerBound(request, hops, topology);
  PlannedJob job;
  if (all) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      const Candidate& c = candidates[i];
      PlanAlternative row{c.Name(),
                          c.seconds,
                          bound,
                          c.lowered.plan.steps_size(),
                          PlanStepBytes(c.lowered.plan),
                          static_cast<int>(i) == best};
      row.peak_memory_bytes = c.peak_bytes;
      job.alternatives.push_back(std::move(row));
    }
  }
  job.plan = std::move(candidates[best].lowered.plan);
  job.plan.set_strategy(candidates[best].Name());
  job.plan.set_lower_bound_seconds(bound);
  return job;
}

void PipelineKind::Summarize(const v1::JobSpec& spec, const v1::Plan& plan,
                             v1::JobResult& result) const {
  const absl::StatusOr<PipelineRequest> request = PipelineRequestOf(spec);
  if (!request.ok()) return;
  const int count = static_cast<int>(request->stages.size());
  const std::vector<StepSpan> spans = StepSpansOf(plan, result);
  auto& metrics = *result.mutable_metrics();
  const double total = SlowestSpan(
      spans, [](const StepSpan&) { return true; },
      [](const StepSpan&) { return std::string(); });
  if (total <= 0) return;
  metrics["step_seconds"] = total;
  if (plan.predicted_seconds() > 0) {
    metrics["predicted_step_seconds"] = plan.predicted_seconds();
  }
  // Per stage: busy intervals per device, and each micro-batch's span from
  // its forward's first step to its backward's last.
  std::vector<std::vector<std::pair<double, double>>> busy(count);
  std::vector<std::map<int, std::pair<double, double>>> live(count);
  for (const StepSpan& span : spans) {
    const v1::Step& step = plan.steps(span.index);
    const std::string& label = step.label();
    const int s = step.stage();
    if (s < 0 || s >= count || label.size() < 2 || IsSend(label)) continue;
    busy[s].push_back({span.start, span.end});
    int m = 0;
    if (!absl::SimpleAtoi(label.substr(1), &m)) continue;
    auto [it, fresh] = live[s].try_emplace(m, span.start, span.end);
    if (!fresh) {
      if (label[0] == 'F') it->second.first = std::min(it->second.first, span.start);
      it->second.second = std::max(it->second.second, span.end);
    }
  }
  double busy_sum = 0;
  int64_t peak_all = 0;
  for (int s = 0; s < count; ++s) {
    // The stage's devices work in step (tensor parallelism), so the stage
    // is busy while any of them runs one of its blocks.
    const double seconds = UnionLength(std::move(busy[s]));
    metrics[absl::StrCat("stage", s, "_busy_seconds")] = seconds;
    busy_sum += seconds;
    // The most micro-batches live at once: a sweep over their spans.
    std::vector<std::pair<double, int>> events;
    for (const auto& [m, interval] : live[s]) {
      events.push_back({interval.first, +1});
      events.push_back({interval.second, -1});
    }
    std::sort(events.begin(), events.end());  // ends before starts on ties
    int now = 0, peak = 0;
    for (const auto& [at, delta] : events) {
      now += delta;
      peak = std::max(peak, now);
    }
    const int64_t bytes =
        peak * PipelineActivationBytes(request->shape,
                                       request->stages[s].devices());
    metrics[absl::StrCat("stage", s, "_peak_activation_bytes")] =
        static_cast<double>(bytes);
    peak_all = std::max(peak_all, bytes);
  }
  metrics["bubble_fraction"] = std::max(0.0, 1.0 - busy_sum / count / total);
  metrics["peak_activation_bytes"] = static_cast<double>(peak_all);
  // The schedule the plan ran: its name is the plan's strategy.
  const std::string name = plan.strategy().substr(0, plan.strategy().find(' '));
  const absl::StatusOr<PipelineSchedule> schedule =
      PipelineScheduleFromName(name);
  if (schedule.ok() && *schedule != PipelineSchedule::kAuto) {
    metrics["predicted_peak_activation_bytes"] = static_cast<double>(
        PredictedPeakActivationBytes(*request, *schedule));
  }
}

}  // namespace meshcast
