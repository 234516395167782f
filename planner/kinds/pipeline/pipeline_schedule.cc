#include "planner/kinds/pipeline/pipeline_schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace meshcast {

std::string PipelineScheduleName(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::kGpipe:
      return "gpipe";
    case PipelineSchedule::k1F1B:
      return "1f1b";
    case PipelineSchedule::kEager1F1B:
      return "eager_1f1b";
    case PipelineSchedule::kAuto:
      return "auto";
  }
  return "auto";
}

absl::StatusOr<PipelineSchedule> PipelineScheduleFromName(
    absl::string_view name) {
  if (name.empty()) return PipelineSchedule::kAuto;
  for (PipelineSchedule s :
       {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B,
        PipelineSchedule::kEager1F1B, PipelineSchedule::kAuto}) {
    if (name == PipelineScheduleName(s)) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("pipeline.schedule '", name,
                   "' is not one of gpipe, 1f1b, eager_1f1b, auto"));
}

std::vector<PipelineSchedule> ConcretePipelineSchedules() {
  return {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B,
          PipelineSchedule::kEager1F1B};
}

std::string PipelineBlock::Name() const {
  return absl::StrCat(backward ? "B" : "F", microbatch);
}

std::vector<std::vector<PipelineBlock>> PipelineOrder(
    PipelineSchedule schedule, int stages, int microbatches) {
  std::vector<std::vector<PipelineBlock>> order(stages);
  for (int i = 0; i < stages; ++i) {
    std::vector<PipelineBlock>& blocks = order[i];
    if (schedule == PipelineSchedule::kGpipe) {
      for (int m = 0; m < microbatches; ++m) blocks.push_back({false, m});
      for (int m = microbatches - 1; m >= 0; --m) blocks.push_back({true, m});
      continue;
    }
    const int warmup =
        std::min(microbatches, schedule == PipelineSchedule::kEager1F1B
                                   ? 2 * (stages - i) - 1
                                   : stages - i);
    int forward = 0, backward = 0;
    while (forward < warmup) blocks.push_back({false, forward++});
    while (backward < microbatches) {
      blocks.push_back({true, backward++});
      if (forward < microbatches) blocks.push_back({false, forward++});
    }
  }
  return order;
}

int PeakInFlight(const std::vector<PipelineBlock>& order) {
  int live = 0, peak = 0;
  for (const PipelineBlock& block : order) {
    live += block.backward ? -1 : 1;
    peak = std::max(peak, live);
  }
  return peak;
}

std::string OrderString(const std::vector<PipelineBlock>& order) {
  return absl::StrJoin(order, " ",
                       [](std::string* out, const PipelineBlock& block) {
                         out->append(block.Name());
                       });
}

}  // namespace meshcast
