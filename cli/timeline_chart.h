// RenderTimeline: `meshctl get JOB --timeline`, a text Gantt chart of a job
// that ran: one row per (worker, device), every step a bar over the job's
// time axis, from the StepResult start_seconds / end_seconds the workers
// report (relative to the job's start barrier on each worker).
//
//   std::cout << RenderTimeline(job, /*width=*/100);
//
//   timeline of job-000001: 4 steps on 2 rows, 0 to 20.400 ms
//   worker-0 dev 0  |AAAAAAAAAAAAAAAA                        AAAAAAAAAAAAAAAA|
//   worker-1 dev 4  |   AAAAAAAAAAAAAAAAA                       AAAAAAAAAAAAA|
//                   0          5.100 ms         10.200 ms      ...  20.400 ms
//   A all_reduce; '+' where steps overlap on a row; 1 column = 0.510 ms
//
// Contract: every line is at most `width` columns (width >= 40; smaller is
// read as 40). A step is drawn on the row of its worker and its
// StepResult.device, from round(start / scale) to round(end / scale) columns,
// at least one column wide, so no step that ran is invisible. The bar's
// letter is the step's op (from the job's plan, when it has the step; '#'
// otherwise); a column two different steps cover on one row shows '+'.
// Rows are sorted by worker name, then device. A job without step timings
// (queued, or from a controller that does not report them) gives one line
// saying so.
//
// Thread safety: pure function.
#ifndef MESHCAST_CLI_TIMELINE_CHART_H_
#define MESHCAST_CLI_TIMELINE_CHART_H_

#include <string>

#include "meshcast/v1/job.pb.h"

namespace meshcast::cli {

inline constexpr int kTimelineWidth = 100;

std::string RenderTimeline(const v1::Job& job, int width = kTimelineWidth);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_TIMELINE_CHART_H_
