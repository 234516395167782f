#include "planner/kinds/moe/moe_kind.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/ir/spec_convert.h"
#include "planner/kinds/step_spans.h"
#include "planner/sim/plan_simulator.h"
#include "util/status_macros.h"
#include "util/text_safety.h"

namespace meshcast {
namespace {

constexpr int64_t kMaxTokens = int64_t{1} << 20;
constexpr int64_t kMaxWidth = int64_t{1} << 16;
constexpr int kMaxExperts = 1024;
constexpr int kMaxTopK = 8;
constexpr double kMaxCapacityFactor = 64;

// mp / ep / esp: 0 takes the mesh's extent; anything else must match it.
absl::Status CheckDegree(absl::string_view field, int value, int from_mesh,
                         absl::string_view axis) {
  if (value != 0 && value != from_mesh) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe.", field, " is ", value, " but moe.mesh's ", axis, " is ",
        from_mesh, "; allowed: 0 (take the mesh's) or ", from_mesh));
  }
  return absl::OkStatus();
}

struct Candidate {
  std::string name;
  MoeSchedule schedule;
  int chunks;
  v1::Plan plan;
  double seconds = 0;
};

// No schedule beats the expert GEMMs of the busiest device at full rate,
// nor moving each kept choice's row across hosts and back once. The
// backward doubles the rows moved (dYE out, dXE back) and triples the
// expert FLOPs (dH, dXE, dW1 and dW2 for fc1 and fc2).
double MoeLowerBound(const MoeShape& shape, const std::vector<int>& devices,
                     const Topology& topology) {
  const double rows = static_cast<double>(shape.ep) * shape.mp *
                      shape.local_experts() * shape.capacity();
  const double flops = (shape.backward ? 3 : 1) * 4.0 * rows * shape.hidden *
                       static_cast<double>(shape.ffn) / shape.mp;
  const double compute = flops / topology.device_flops;
  // s1's dispatch is the fewest bytes any schedule moves between EP ranks.
  const int world = static_cast<int>(devices.size());
  const int64_t block = static_cast<int64_t>(shape.local_experts()) *
                        shape.capacity() * shape.hidden *
                        DTypeSize(shape.dtype);
  std::vector<int64_t> pairs(int64_t{world} * world, 0);
  for (int r = 0; r < world; ++r) {
    for (int s = 0; s < world; ++s) {
      if (r % shape.mp == s % shape.mp) pairs[r * world + s] = block;
    }
  }
  const double exchange = AllToAllLowerBoundSeconds(devices, pairs, topology);
  return std::max(compute, (shape.backward ? 4 : 2) * exchange);
}

}  // namespace

std::vector<int> MoeCandidateChunks(const MoeShape& shape) {
  std::vector<int> chunks;
  const int64_t capacity = shape.capacity();
  for (int c = 2; c <= 16 && c <= capacity; c *= 2) chunks.push_back(c);
  if (chunks.empty()) chunks.push_back(1);
  return chunks;
}

absl::StatusOr<MoeRequest> MoeRequestOf(const v1::JobSpec& spec) {
  if (!spec.has_moe()) return absl::InvalidArgumentError("spec.moe is not set");
  const v1::MoeSpec& m = spec.moe();
  MoeRequest request;
  MoeShape& shape = request.shape;
  RETURN_IF_ERROR(CheckSpecRange("moe.tokens", m.tokens(), 1, kMaxTokens));
  RETURN_IF_ERROR(CheckSpecRange("moe.hidden", m.hidden(), 1, kMaxWidth));
  RETURN_IF_ERROR(CheckSpecRange("moe.ffn", m.ffn(), 1, kMaxWidth));
  RETURN_IF_ERROR(CheckSpecRange("moe.experts", m.experts(), 1, kMaxExperts));
  shape.tokens = m.tokens();
  shape.hidden = m.hidden();
  shape.ffn = m.ffn();
  shape.experts = m.experts();
  shape.top_k = m.top_k() == 0 ? std::min(2, shape.experts) : m.top_k();
  RETURN_IF_ERROR(
      CheckSpecRange("moe.top_k", shape.top_k, 1, std::min(kMaxTopK, shape.experts)));
  shape.capacity_factor = m.capacity_factor() == 0 ? 1.0 : m.capacity_factor();
  if (!(shape.capacity_factor > 0 &&
        shape.capacity_factor <= kMaxCapacityFactor)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe.capacity_factor is ", m.capacity_factor(), "; allowed: (0, ",
        kMaxCapacityFactor, "] (0 reads as 1.0)"));
  }
  if (m.dtype() != v1::DTYPE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(shape.dtype, DTypeFromProto(m.dtype(), "moe.dtype"));
  }
  if (shape.dtype != DType::kFloat32 && shape.dtype != DType::kFloat64 &&
      shape.dtype != DType::kFloat16 && shape.dtype != DType::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe.dtype ", DTypeName(shape.dtype),
                     " is not one of float32, float64, float16, bfloat16"));
  }
  if (!m.pass().empty() && m.pass() != "forward" &&
      m.pass() != "forward_backward") {
    return absl::InvalidArgumentError(
        absl::StrCat("moe.pass ", QuotePrefix(m.pass()),
                     " is not one of forward, forward_backward"));
  }
  shape.backward = m.pass() == "forward_backward";
  ASSIGN_OR_RETURN(request.schedule, MoeScheduleFromName(m.schedule()));
  if (m.chunks() < 0 || m.chunks() > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe.chunks is ", m.chunks(), "; allowed: 0 (chosen) .. 1024"));
  }
  request.chunks = m.chunks();
  if (request.chunks > 0 && (request.schedule == MoeSchedule::kBaseline ||
                             request.schedule == MoeSchedule::kS1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe.chunks is ", m.chunks(), " but moe.schedule is ",
        MoeScheduleName(request.schedule),
        "; chunks applies to s2 (and auto's s2); allowed here: 0"));
  }
  // The mesh: given, or [ep, mp].
  if (m.has_mesh()) {
    ASSIGN_OR_RETURN(request.mesh, MeshRequestFromProto(m.mesh(), "moe.mesh"));
  } else {
    if (m.ep() < 1 || m.mp() < 1) {
      return absl::InvalidArgumentError(
          "moe.mesh is not set; give it (e.g. shape [2, 4]: ep hosts x mp "
          "devices) or both moe.ep and moe.mp");
    }
    v1::DeviceMesh mesh;
    mesh.add_shape(m.ep());
    mesh.add_shape(m.mp());
    ASSIGN_OR_RETURN(request.mesh, MeshRequestFromProto(mesh, "moe.mesh"));
  }
  if (request.mesh.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe.mesh ", request.mesh.ToString(),
                     " must have 2 axes: ep (hosts) x mp (devices in a host)"));
  }
  shape.ep = request.mesh.shape[0];
  shape.mp = request.mesh.shape[1];
  RETURN_IF_ERROR(CheckDegree("ep", m.ep(), shape.ep, "axis 0"));
  RETURN_IF_ERROR(CheckDegree("mp", m.mp(), shape.mp, "axis 1"));
  RETURN_IF_ERROR(CheckDegree("esp", m.esp(), shape.mp, "axis 1 (esp = mp)"));
  if (shape.experts % shape.ep != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe.experts ", shape.experts, " is not a multiple of ep ",
                     shape.ep, " (each EP rank holds experts / ep experts)"));
  }
  if (shape.tokens % shape.mp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe.tokens ", shape.tokens, " is not divisible by mp ",
                     shape.mp, " (the MP split gives each rank tokens / mp)"));
  }
  if (shape.ffn % shape.mp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe.ffn ", shape.ffn, " is not divisible by esp ",
                     shape.mp, " (each ESP rank holds ffn / esp columns)"));
  }
  shape.seed = m.seed() == 0 ? 1 : m.seed();
  if (!(m.expert_skew() >= 0 && m.expert_skew() <= 8)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe.expert_skew is ", m.expert_skew(), "; allowed: 0 (uniform) .. 8"));
  }
  shape.expert_skew = m.expert_skew();
  // Bound the plan's size: the routing and the order / combine index lists
  // grow with tokens x top_k and experts x capacity per device.
  const double slots = static_cast<double>(shape.ep) * shape.mp *
                       shape.experts * shape.capacity() * shape.mp;
  const double choices =
      static_cast<double>(shape.tokens) * shape.ep * shape.top_k * shape.mp;
  if (slots + choices > 64e6) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe: tokens x top_k x capacity_factor over the mesh make a plan of ",
        static_cast<int64_t>(slots + choices),
        " routing entries; allowed: at most 64000000"));
  }
  return request;
}

absl::Status MoeKind::Validate(const v1::JobSpec& spec) const {
  return MoeRequestOf(spec).status();
}

absl::StatusOr<PlacementRequest> MoeKind::Meshes(
    const v1::JobSpec& spec) const {
  ASSIGN_OR_RETURN(const MoeRequest request, MoeRequestOf(spec));
  return PlacementRequest::One(request.mesh, "moe.mesh");
}

absl::StatusOr<PlannedJob> MoeKind::Plan(const v1::JobSpec& spec,
                                         const std::vector<DeviceMesh>& meshes,
                                         const Topology& topology,
                                         const PlanOptions& options) const {
  ASSIGN_OR_RETURN(const MoeRequest request, MoeRequestOf(spec));
  if (meshes.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a moe job places 1 mesh; got ", meshes.size()));
  }
  RETURN_IF_ERROR(meshes[0].Validate(topology));
  const std::vector<int>& devices = meshes[0].devices;
  const MoeShape& shape = request.shape;
  const MoeRouting routing = RouteTokens(shape);

  // The schedules to plan: the one asked for, or every candidate.
  std::vector<Candidate> candidates;
  const bool all =
      request.schedule == MoeSchedule::kAuto || options.compare_all;
  auto want = [&](MoeSchedule s) { return all || request.schedule == s; };
  if (want(MoeSchedule::kBaseline)) {
    candidates.push_back({"baseline", MoeSchedule::kBaseline, 1, {}, 0});
  }
  if (want(MoeSchedule::kS1)) {
    candidates.push_back({"s1", MoeSchedule::kS1, 1, {}, 0});
  }
  if (want(MoeSchedule::kS2)) {
    const std::vector<int> pieces = request.chunks > 0
                                        ? std::vector<int>{request.chunks}
                                        : MoeCandidateChunks(shape);
    for (int c : pieces) {
      candidates.push_back(
          {absl::StrCat("s2/", c), MoeSchedule::kS2, c, {}, 0});
    }
  }
  int best = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = candidates[i];
    ASSIGN_OR_RETURN(c.plan,
                     LowerMoe(shape, routing, c.schedule, c.chunks, devices));
    ASSIGN_OR_RETURN(const PlanSimulation sim, PredictPlan(c.plan, topology));
    c.seconds = sim.seconds;
    const bool eligible = request.schedule == MoeSchedule::kAuto ||
                          request.schedule == c.schedule;
    if (eligible && (best < 0 || c.seconds < candidates[best].seconds)) {
      best = static_cast<int>(i);
    }
  }
  const double bound = MoeLowerBound(shape, devices, topology);
  PlannedJob job;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    job.alternatives.push_back({c.name, c.seconds, bound, c.plan.steps_size(),
                                PlanStepBytes(c.plan),
                                static_cast<int>(i) == best});
  }
  job.plan = std::move(candidates[best].plan);
  job.plan.set_strategy(candidates[best].name);
  job.plan.set_lower_bound_seconds(bound);
  if (!all) job.alternatives.clear();
  return job;
}

double MoeKind::PredictedSpanSeconds(const v1::JobResult& result) const {
  const auto total = result.metrics().find("total_seconds");
  return total != result.metrics().end() ? total->second : result.seconds();
}

void MoeKind::Summarize(const v1::JobSpec& spec, const v1::Plan& plan,
                        v1::JobResult& result) const {
  const std::vector<StepSpan> spans = StepSpansOf(plan, result);
  auto& metrics = *result.mutable_metrics();
  const auto by_device = [](const StepSpan& s) {
    return absl::StrCat(s.worker, "/", s.device);
  };
  for (int phase = 0; phase < kMoePhases; ++phase) {
    const double seconds = SlowestSpan(
        spans,
        [&](const StepSpan& s) { return plan.steps(s.index).stage() == phase; },
        by_device);
    if (seconds > 0) {
      metrics[absl::StrCat(MoePhaseName(phase), "_seconds")] = seconds;
    }
  }
  const double total = SlowestSpan(
      spans, [](const StepSpan&) { return true; },
      [](const StepSpan&) { return std::string(); });
  if (total > 0) metrics["total_seconds"] = total;
  if (plan.predicted_seconds() > 0) {
    metrics["predicted_total_seconds"] = plan.predicted_seconds();
  }
  const absl::StatusOr<MoeRequest> request = MoeRequestOf(spec);
  if (request.ok()) {
    const MoeRouting routing = RouteTokens(request->shape);
    const double choices = static_cast<double>(routing.expert.size());
    if (choices > 0) {
      metrics["dropped_tokens_fraction"] = routing.dropped / choices;
      const int64_t busiest =
          *std::max_element(routing.load.begin(), routing.load.end());
      metrics["expert_load_imbalance"] =
          busiest / (choices / request->shape.experts);
    }
  }
}

}  // namespace meshcast
