// JobToTraceEvents: `meshctl trace JOB -o trace.json`, a job's measured
// timeline, and the planner's predicted one beside it, as Chrome
// trace-event JSON (the format chrome://tracing and Perfetto open).
//
//   OrderedJson trace = JobToTraceEvents(job);
//   std::ofstream("trace.json") << trace.dump() << "\n";
//
// Format ("JSON Object Format" of the Trace Event Format):
//   {"traceEvents": [...], "displayTimeUnit": "ms",
//    "otherData": {"job_id", "kind", "strategy", "predicted_seconds",
//                  "measured_seconds"}}
// Every step is a complete event {"name": "<label> #<step id>", "cat":
// "measured" | "predicted", "ph": "X", "ts", "dur" (microseconds, from the
// job's start barrier), "pid", "tid", "args": {"step", "op", "label",
// "bytes", ...}}. The name's <label> is the plan step's Step.label (the
// kind's unit of work, e.g. "F3" for a pipeline's forward of micro-batch 3)
// and args carry "label" when it is non-empty; a step without a label is
// named by its op ("all_reduce #0"), one the plan does not list "step #<id>".
//  - measured: pid = 1 + the worker's index among the job's workers sorted
//    by name, tid = StepResult.device; from StepResult start_seconds /
//    end_seconds.
//  - predicted: pid 0, one process named "predicted", tid = each device the
//    step runs on (its group's devices, or Step.device for compute), from
//    Plan.predicted_step_start / predicted_step_finish. Left out when the
//    plan carries no step predictions.
// Metadata events ("ph": "M") name each process ("process_name": "predicted",
// "worker-0", ...) and thread ("thread_name": "device 4") and order the
// processes ("process_sort_index": predicted first, then the workers).
// Integer pid/tid, non-negative ts/dur, and every event's keys as above are
// the contract the tests check with a schema.
//
// Thread safety: pure function.
#ifndef MESHCAST_CLI_TRACE_EVENTS_H_
#define MESHCAST_CLI_TRACE_EVENTS_H_

#include "cli/job_format.h"
#include "meshcast/v1/job.pb.h"

namespace meshcast::cli {

OrderedJson JobToTraceEvents(const v1::Job& job);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_TRACE_EVENTS_H_
