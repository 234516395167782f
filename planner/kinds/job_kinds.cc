// The registry of job kinds: one line per kind.
#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/kinds/attention/attention_kind.h"
#include "planner/kinds/calibrate/calibrate_kind.h"
#include "planner/kinds/collective/collective_kind.h"
#include "planner/kinds/job_kind.h"
#include "planner/kinds/moe/moe_kind.h"
#include "planner/kinds/pipeline/pipeline_kind.h"
#include "planner/kinds/reshard/reshard_kind.h"
#include "planner/kinds/reshard_model/reshard_model_kind.h"
#include "planner/kinds/tp_overlap/tp_overlap_kind.h"
#include "util/text_safety.h"

namespace meshcast {
namespace {

const ReshardKind kReshard;
const CollectiveKind kCollective;
const TpOverlapKind kTpOverlap;
const MoeKind kMoe;
const CalibrateKind kCalibrate;
const AttentionKind kAttention;
const PipelineKind kPipeline;
const ReshardModelKind kReshardModel;
const std::array<const JobKind*, 8> kKinds = {
    &kReshard,   &kCollective, &kTpOverlap, &kMoe,
    &kCalibrate, &kAttention,  &kPipeline,  &kReshardModel};

std::string KindNames() {
  std::vector<std::string> names;
  for (const JobKind* kind : kKinds) names.push_back(kind->name());
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::Status CheckSpecRange(absl::string_view field, int64_t value,
                            int64_t low, int64_t high) {
  if (value < low || value > high) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is ", value, "; allowed: ", low, "..", high));
  }
  return absl::OkStatus();
}

v1::StrategyRow AlternativeToRow(const PlanAlternative& alternative) {
  v1::StrategyRow row;
  row.set_strategy(alternative.name);
  row.set_predicted_seconds(alternative.predicted_seconds);
  row.set_lower_bound_seconds(alternative.lower_bound_seconds);
  row.set_transfers(alternative.steps);
  row.set_bytes(alternative.bytes);
  row.set_chosen(alternative.chosen);
  row.set_peak_memory_bytes(alternative.peak_memory_bytes);
  row.set_note(alternative.note);
  return row;
}

int64_t PlanStepBytes(const v1::Plan& plan) {
  int64_t bytes = 0;
  for (const v1::Step& step : plan.steps()) bytes += step.bytes();
  return bytes;
}

absl::StatusOr<const JobKind*> FindJobKind(const v1::JobSpec& spec) {
  switch (spec.kind_case()) {
    case v1::JobSpec::kReshard:
      return &kReshard;
    case v1::JobSpec::kCollective:
      return &kCollective;
    case v1::JobSpec::kTpOverlap:
      return &kTpOverlap;
    case v1::JobSpec::kMoe:
      return &kMoe;
    case v1::JobSpec::kCalibrate:
      return &kCalibrate;
    case v1::JobSpec::kAttention:
      return &kAttention;
    case v1::JobSpec::kPipeline:
      return &kPipeline;
    case v1::JobSpec::kReshardModel:
      return &kReshardModel;
    case v1::JobSpec::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the job spec names no kind; set one of: ", KindNames()));
}

absl::StatusOr<const JobKind*> FindJobKindByName(absl::string_view name) {
  for (const JobKind* kind : kKinds) {
    if (kind->name() == name) return kind;
  }
  return absl::NotFoundError(absl::StrCat(
      "unknown job kind ", QuotePrefix(name), "; known kinds: ", KindNames()));
}

std::vector<const JobKind*> AllJobKinds() {
  return std::vector<const JobKind*>(kKinds.begin(), kKinds.end());
}

}  // namespace meshcast
