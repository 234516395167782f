#include "planner/kinds/attention/attention_kind.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/ir/spec_convert.h"
#include "planner/kinds/step_spans.h"
#include "planner/sim/plan_simulator.h"
#include "util/status_macros.h"
#include "util/text_safety.h"

namespace meshcast {
namespace {

constexpr int64_t kMaxSeqLen = int64_t{1} << 22;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxBatch = 1024;

}  // namespace

absl::StatusOr<AttentionRequest> AttentionRequestOf(const v1::JobSpec& spec) {
  if (!spec.has_attention()) {
    return absl::InvalidArgumentError("spec.attention is not set");
  }
  const v1::AttentionSpec& a = spec.attention();
  AttentionRequest request;
  AttentionShape& s = request.shape;
  s.batch = a.batch() == 0 ? 1 : a.batch();
  RETURN_IF_ERROR(CheckSpecRange("attention.batch", s.batch, 1, kMaxBatch));
  RETURN_IF_ERROR(CheckSpecRange("attention.heads", a.heads(), 1, kMaxHeads));
  s.heads = a.heads();
  s.kv_heads = a.kv_heads() == 0 ? s.heads : a.kv_heads();
  RETURN_IF_ERROR(CheckSpecRange("attention.kv_heads", s.kv_heads, 1, s.heads));
  if (s.heads % s.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention.kv_heads ", s.kv_heads, " does not divide heads ", s.heads,
        " (grouped-query attention shares each kv head among heads / "
        "kv_heads query heads)"));
  }
  RETURN_IF_ERROR(CheckSpecRange("attention.seq_len", a.seq_len(), 1, kMaxSeqLen));
  s.seq_len = a.seq_len();
  RETURN_IF_ERROR(CheckSpecRange("attention.head_dim", a.head_dim(), 1, kMaxHeadDim));
  s.head_dim = a.head_dim();
  if (!a.has_mesh()) {
    return absl::InvalidArgumentError(
        "attention.mesh is required: the sequence-parallel group (e.g. shape "
        "[1, 4]: 4 devices of one host, or [2, 4])");
  }
  ASSIGN_OR_RETURN(request.mesh,
                   MeshRequestFromProto(a.mesh(), "attention.mesh"));
  int ranks = 1;
  for (int extent : request.mesh.shape) ranks *= extent;
  s.ranks = ranks;
  s.causal = a.causal();
  ASSIGN_OR_RETURN(s.layout, AttentionLayoutFromName(a.layout()));
  ASSIGN_OR_RETURN(request.algorithm, AttentionAlgorithmFromName(a.algorithm()));
  const int64_t unit = s.layout == AttentionLayout::kZigzag ? 2 * ranks : ranks;
  if (s.seq_len % unit != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention.seq_len ", s.seq_len, " is not divisible by ", unit,
        s.layout == AttentionLayout::kZigzag
            ? " (zigzag cuts the sequence in 2 x the group size chunks)"
            : " (the group size: every rank holds seq_len / ranks rows)"));
  }
  if (request.algorithm == AttentionAlgorithm::kUlysses &&
      (s.heads % ranks != 0 || s.kv_heads % ranks != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention.algorithm ulysses needs heads (", s.heads,
        ") and kv_heads (", s.kv_heads, ") divisible by the group size ",
        ranks, "; allowed here: rsa, ring, auto"));
  }
  if (a.dtype() != v1::DTYPE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(s.dtype, DTypeFromProto(a.dtype(), "attention.dtype"));
  }
  if (s.dtype != DType::kFloat32 && s.dtype != DType::kFloat64 &&
      s.dtype != DType::kFloat16 && s.dtype != DType::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention.dtype ", DTypeName(s.dtype),
                     " is not one of float32, float64, float16, bfloat16"));
  }
  if (!a.pass().empty() && a.pass() != "forward" &&
      a.pass() != "forward_backward") {
    return absl::InvalidArgumentError(
        absl::StrCat("attention.pass ", QuotePrefix(a.pass()),
                     " is not one of forward, forward_backward"));
  }
  s.backward = a.pass() == "forward_backward";
  s.seed = a.seed() == 0 ? 1 : a.seed();
  // Bound the plan: the layout copies list every row of every head.
  const double rows = static_cast<double>(s.batch) * (s.heads + 2 * s.kv_heads) *
                      s.seq_len * 2;
  if (rows > 64e6) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention: batch x heads x seq_len make a plan of ",
        static_cast<int64_t>(rows), " row entries; allowed: at most 64000000"));
  }
  return request;
}

double AttentionFlops(const AttentionShape& shape) {
  const double pairs = static_cast<double>(shape.seq_len) * shape.seq_len *
                       (shape.causal ? 0.5 : 1.0);
  // Forward: QK^T and PV (4 per pair and head_dim); backward: the scores
  // again, dP, dQ, dK and dV (10).
  const double per_pair = shape.backward ? 14.0 : 4.0;
  return per_pair * shape.batch * shape.heads * pairs * shape.head_dim;
}

std::vector<int64_t> PlanMemoryPerDevice(const v1::Plan& plan) {
  std::map<int, int64_t> bytes;
  int top = -1;
  for (const v1::Buffer& b : plan.buffers()) {
    int64_t elements = 1;
    for (const v1::Interval& i : b.box()) elements *= i.end() - i.begin();
    const absl::StatusOr<DType> dtype =
        DTypeFromProto(plan.tensors(b.tensor()).dtype(), "dtype");
    bytes[b.device()] += elements * (dtype.ok() ? DTypeSize(*dtype) : 4);
    top = std::max(top, b.device());
  }
  std::vector<int64_t> out(top + 1, 0);
  for (const auto& [device, n] : bytes) out[device] = n;
  return out;
}

absl::Status AttentionKind::Validate(const v1::JobSpec& spec) const {
  return AttentionRequestOf(spec).status();
}

absl::StatusOr<PlacementRequest> AttentionKind::Meshes(
    const v1::JobSpec& spec) const {
  ASSIGN_OR_RETURN(const AttentionRequest request, AttentionRequestOf(spec));
  return PlacementRequest::One(request.mesh, "attention.mesh");
}

absl::StatusOr<PlannedJob> AttentionKind::Plan(
    const v1::JobSpec& spec, const std::vector<DeviceMesh>& meshes,
    const Topology& topology, const PlanOptions& options) const {
  ASSIGN_OR_RETURN(const AttentionRequest request, AttentionRequestOf(spec));
  if (meshes.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("an attention job places 1 mesh; got ", meshes.size()));
  }
  RETURN_IF_ERROR(meshes[0].Validate(topology));
  const AttentionShape& shape = request.shape;
  const bool all =
      request.algorithm == AttentionAlgorithm::kAuto || options.compare_all;
  const bool ulysses_fits =
      shape.heads % shape.ranks == 0 && shape.kv_heads % shape.ranks == 0;
  struct Candidate {
    AttentionAlgorithm algorithm;
    v1::Plan plan;
    double seconds = 0;
  };
  std::vector<Candidate> candidates;
  for (AttentionAlgorithm a : {AttentionAlgorithm::kRing,
                               AttentionAlgorithm::kRsa,
                               AttentionAlgorithm::kUlysses}) {
    if (a == AttentionAlgorithm::kUlysses && !ulysses_fits) continue;
    if (all || request.algorithm == a) candidates.push_back({a, {}, 0});
  }
  const double bound =
      AttentionFlops(shape) / (shape.ranks * topology.device_flops);
  int best = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = candidates[i];
    ASSIGN_OR_RETURN(c.plan,
                     LowerAttention(shape, c.algorithm, meshes[0].devices));
    ASSIGN_OR_RETURN(const PlanSimulation sim, PredictPlan(c.plan, topology));
    c.seconds = sim.seconds;
    const bool eligible = request.algorithm == AttentionAlgorithm::kAuto ||
                          request.algorithm == c.algorithm;
    if (eligible && (best < 0 || c.seconds < candidates[best].seconds)) {
      best = static_cast<int>(i);
    }
  }
  PlannedJob job;
  for (size_t i = 0; i < candidates.size() && all; ++i) {
    const Candidate& c = candidates[i];
    job.alternatives.push_back({AttentionAlgorithmName(c.algorithm),
                                c.seconds, bound, c.plan.steps_size(),
                                PlanStepBytes(c.plan),
                                static_cast<int>(i) == best});
  }
  job.plan = std::move(candidates[best].plan);
  job.plan.set_lower_bound_seconds(bound);
  return job;
}

double AttentionKind::PredictedSpanSeconds(const v1::JobResult& result) const {
  const auto total = result.metrics().find("total_seconds");
  return total != result.metrics().end() ? total->second : result.seconds();
}

namespace {

bool IsAttentionCompute(const v1::Step& step) {
  return step.op() == v1::Step::OP_COMPUTE &&
         (step.compute().has_attention_block() ||
          step.compute().has_attention_finish() ||
          step.compute().has_attention_backward());
}

// The largest and the mean of per-rank values, and their ratio (0 when
// empty or the mean is not positive).
struct MaxMean {
  double max = 0;
  double mean = 0;
  double Balance() const { return mean > 0 ? max / mean : 0; }
};

MaxMean MaxAndMean(const std::map<int, double>& per_rank) {
  MaxMean result;
  if (per_rank.empty()) return result;
  double sum = 0;
  for (const auto& [rank, value] : per_rank) {
    result.max = std::max(result.max, value);
    sum += value;
  }
  result.mean = sum / per_rank.size();
  return result;
}

}  // namespace

void AttentionKind::Summarize(const v1::JobSpec& /*spec*/,
                              const v1::Plan& plan,
                              v1::JobResult& result) const {
  auto& metrics = *result.mutable_metrics();
  const std::vector<StepSpan> spans = StepSpansOf(plan, result);
  const double total = SlowestSpan(
      spans, [](const StepSpan&) { return true; },
      [](const StepSpan&) { return std::string(); });
  if (total > 0) metrics["total_seconds"] = total;
  if (plan.predicted_seconds() > 0) {
    metrics["predicted_total_seconds"] = plan.predicted_seconds();
  }
  if (plan.lower_bound_seconds() > 0) {
    metrics["compute_only_ideal_seconds"] = plan.lower_bound_seconds();
    if (total > 0) {
      metrics["ideal_fraction"] = plan.lower_bound_seconds() / total;
    }
  }
  // Per rank: the FLOPs the plan gives its attention steps, the balance
  // its layout promises, whatever the machine makes of it.
  std::map<int, double> work;
  for (const v1::Step& step : plan.steps()) {
    if (IsAttentionCompute(step)) work[step.device()] += step.flops();
  }
  if (const double balance = MaxAndMean(work).Balance(); balance > 0) {
    metrics["work_balance"] = balance;
  }
  // Per rank: the summed spans of its attention steps, and the CPU time
  // their threads used. Where every step's CPU time was measured (the CPU
  // engine), causal_balance is theirs: a span also holds the time the core
  // ran another process (workers sharing a machine, the kernel's network),
  // which says nothing of the work the layout gave the rank.
  std::map<int, double> compute, cpu;
  bool cpu_measured = true;
  for (const StepSpan& span : spans) {
    const v1::Step& step = plan.steps(span.index);
    if (!IsAttentionCompute(step)) continue;
    compute[step.device()] += span.end - span.start;
    cpu[step.device()] += span.cpu;
    cpu_measured = cpu_measured && span.cpu > 0;
  }
  if (!compute.empty()) {
    const MaxMean wall = MaxAndMean(compute);
    metrics["compute_max_seconds"] = wall.max;
    metrics["compute_mean_seconds"] = wall.mean;
    if (wall.Balance() > 0) metrics["causal_balance_wall"] = wall.Balance();
    const MaxMean used = cpu_measured ? MaxAndMean(cpu) : MaxMean{};
    if (used.Balance() > 0) {
      metrics["compute_cpu_max_seconds"] = used.max;
      metrics["compute_cpu_mean_seconds"] = used.mean;
    }
    const double balance = used.Balance() > 0 ? used.Balance() : wall.Balance();
    if (balance > 0) metrics["causal_balance"] = balance;
  }
  // What the plan makes each rank send: send/recv by its sender, an
  // all-to-all's off-diagonal blocks by theirs.
  std::map<int, int64_t> sent;
  for (const v1::Step& step : plan.steps()) {
    if (step.group() < 0 || step.group() >= plan.groups_size()) continue;
    const v1::CommGroup& group = plan.groups(step.group());
    if (step.op() == v1::Step::OP_SEND_RECV && group.devices_size() == 2) {
      sent[group.devices(0)] += step.bytes();
    } else if (step.op() == v1::Step::OP_ALL_TO_ALL) {
      const int n = group.devices_size();
      if (step.counts_size() != n * n || n == 0) continue;
      const int64_t per_block = step.bytes() / std::max(1, n);
      for (int r = 0; r < n; ++r) sent[group.devices(r)] += per_block * (n - 1);
    }
  }
  int64_t most = 0;
  for (const auto& [device, bytes] : sent) most = std::max(most, bytes);
  if (most > 0) metrics["bytes_sent_per_rank_max"] = static_cast<double>(most);
  const std::vector<int64_t> memory = PlanMemoryPerDevice(plan);
  if (!memory.empty()) {
    metrics["memory_bytes_per_rank_max"] =
        static_cast<double>(*std::max_element(memory.begin(), memory.end()));
  }
}

}  // namespace meshcast
