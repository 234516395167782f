// Pipeline schedules: the order in which each stage of a pipeline runs the
// forward (F) and backward (B) blocks of its micro-batches, and how many
// micro-batches' activations each stage holds at once under that order.
//
//   ASSIGN_OR_RETURN(PipelineSchedule schedule,
//                    PipelineScheduleFromName("eager_1f1b"));
//   const std::vector<std::vector<PipelineBlock>> order =
//       PipelineOrder(schedule, /*stages=*/3, /*microbatches=*/6);
//   // order[0]: F0 F1 F2 F3 F4 B0 F5 B1 B2 B3 B4 B5
//
// With S stages and M micro-batches, stage i from 0:
//  - gpipe: every forward, then every backward, the last micro-batch's
//    first (the order its activations were produced in, reversed);
//  - 1f1b: min(M, S - i) forwards, then one backward and one forward in
//    turn, then the remaining backwards;
//  - eager_1f1b: as 1f1b with min(M, 2 (S - i) - 1) forwards first, so that
//    each forward's output is ready a slot before the next stage needs it
//    and the send between the meshes overlaps compute; the last stage is
//    unchanged, stage 0 runs about twice 1f1b's warm-up forwards.
// Micro-batches within one direction always run in order (gpipe's
// backwards in reverse).
//
// Thread safety: pure functions.
#ifndef MESHCAST_PLANNER_KINDS_PIPELINE_PIPELINE_SCHEDULE_H_
#define MESHCAST_PLANNER_KINDS_PIPELINE_PIPELINE_SCHEDULE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshcast {

enum class PipelineSchedule { kGpipe, k1F1B, kEager1F1B, kAuto };

// "gpipe", "1f1b", "eager_1f1b", "auto".
std::string PipelineScheduleName(PipelineSchedule schedule);
// The names above (empty: auto); INVALID_ARGUMENT listing them otherwise.
absl::StatusOr<PipelineSchedule> PipelineScheduleFromName(
    absl::string_view name);
// The concrete schedules, in the order tables print them.
std::vector<PipelineSchedule> ConcretePipelineSchedules();

struct PipelineBlock {
  bool backward = false;
  int microbatch = 0;
  // "F3" / "B3".
  std::string Name() const;
  bool operator==(const PipelineBlock& other) const {
    return backward == other.backward && microbatch == other.microbatch;
  }
};

// Each stage's blocks in the order it runs them (`schedule` not kAuto):
// 2 M blocks per stage, every micro-batch's F before its B.
std::vector<std::vector<PipelineBlock>> PipelineOrder(
    PipelineSchedule schedule, int stages, int microbatches);

// The most micro-batches whose forward has run and whose backward has not,
// at any point of `order` (one stage's order).
int PeakInFlight(const std::vector<PipelineBlock>& order);

// "F0 F1 B0 ..." (tests, docs).
std::string OrderString(const std::vector<PipelineBlock>& order);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_PIPELINE_PIPELINE_SCHEDULE_H_
