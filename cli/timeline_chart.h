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
// A kind that labels its steps (Step.label; the pipeline kind's "F3" / "B3"
// blocks of micro-batch 3, "F3>" / "<B3" the sends between stages) gets its
// labels in the bars, the classic pipeline chart:
//
//   timeline of job-000002: 16 steps on 2 rows, 0 to 40.000 ms
//   worker-0 dev 0 |F0====FF1====F1>            <B1====<B0==|
//   worker-1 dev 1 |      FF0====F1>F1====B1====<B0====<    |
//                   0                   20.000 ms   40.000 ms
//   F0== step label then '=' (its first letter where the bar
//   is narrower); 1 column = 1.000 ms
//
// Contract: every line is at most `width` columns (width >= 40; smaller is
// read as 40). A step is drawn on the row of its worker and its
// StepResult.device, from round(start / scale) to round(end / scale) columns,
// at least one column wide, so no step that ran is invisible. A column two
// different steps cover on one row shows '+'. A step whose plan Step has no
// label is drawn in its op's letter ('#' when the job's plan does not list
// the step). A labelled step is drawn, in each stretch of its bar that no
// other step covers, as its label then '=' to the stretch's end where the
// stretch is at least as wide as the label, else in the label's first
// letter throughout (a cut label would read as another one); label bytes
// other than printable ASCII, and spaces, are drawn as '?'. The legend
// names the op letters drawn and, once, the label notation. Rows are sorted
// by worker name, then device. A job without step timings (queued, or from
// a controller that does not report them) gives one line saying so.
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
