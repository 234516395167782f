#include "cli/trace_events.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace meshcast::cli {
namespace {

constexpr int kPredictedPid = 0;
constexpr double kMicros = 1e6;

OrderedJson Metadata(const char* name, int pid, int tid,
                     OrderedJson args) {
  return OrderedJson{{"name", name}, {"ph", "M"},  {"pid", pid},
                     {"tid", tid},   {"args", std::move(args)}};
}

OrderedJson Complete(const std::string& name, const char* category,
                     double start_seconds, double end_seconds, int pid,
                     int tid, OrderedJson args) {
  // Clamped so that a clock hiccup never yields a negative time, which
  // trace viewers reject.
  const double ts = std::max(0.0, start_seconds) * kMicros;
  const double dur = std::max(0.0, end_seconds - start_seconds) * kMicros;
  return OrderedJson{{"name", name}, {"cat", category}, {"ph", "X"},
                     {"ts", ts},     {"dur", dur},      {"pid", pid},
                     {"tid", tid},   {"args", std::move(args)}};
}

// The event name: the step's label where the kind set one (it names the
// unit of work, e.g. "F3", which reads better in a viewer than the op),
// else its op; then the step id, which keeps names unique.
std::string EventName(const v1::Step* step, int id) {
  if (step == nullptr) return absl::StrCat("step #", id);
  return absl::StrCat(step->label().empty() ? StepOpName(step->op())
                                            : step->label(),
                      " #", id);
}

// The args every step event carries, plus "label" when the step has one.
OrderedJson StepArgs(const v1::Step* step, int id, int64_t bytes) {
  OrderedJson args{
      {"step", id},
      {"op", step == nullptr ? std::string("step") : StepOpName(step->op())}};
  if (step != nullptr && !step->label().empty()) {
    args["label"] = step->label();
  }
  args["bytes"] = bytes;
  return args;
}

// The devices a step runs on: its group's, or its own for compute.
std::vector<int> StepDevices(const v1::Step& step,
                             const std::map<int, const v1::CommGroup*>& groups) {
  if (step.op() == v1::Step::OP_COMPUTE) return {step.device()};
  const auto group = groups.find(step.group());
  if (group == groups.end()) return {};
  return std::vector<int>(group->second->devices().begin(),
                          group->second->devices().end());
}

}  // namespace

OrderedJson JobToTraceEvents(const v1::Job& job) {
  const v1::Plan& plan = job.plan();
  std::map<int, const v1::Step*> steps;
  for (const v1::Step& step : plan.steps()) steps[step.id()] = &step;
  std::map<int, const v1::CommGroup*> groups;
  for (const v1::CommGroup& group : plan.groups()) groups[group.id()] = &group;
  const auto find_step = [&](int id) -> const v1::Step* {
    const auto it = steps.find(id);
    return it == steps.end() ? nullptr : it->second;
  };

  OrderedJson events = OrderedJson::array();
  // Predicted: one process, a thread per device.
  const int predicted = std::min(plan.predicted_step_start_size(),
                                 plan.predicted_step_finish_size());
  if (predicted > 0) {
    events.push_back(Metadata("process_name", kPredictedPid, 0,
                              OrderedJson{{"name", "predicted"}}));
    events.push_back(Metadata("process_sort_index", kPredictedPid, 0,
                              OrderedJson{{"sort_index", 0}}));
    std::set<int> devices;
    for (const v1::Step& step : plan.steps()) {
      if (step.id() < 0 || step.id() >= predicted) continue;
      for (int device : StepDevices(step, groups)) {
        devices.insert(device);
        events.push_back(Complete(
            EventName(&step, step.id()), "predicted",
            plan.predicted_step_start(step.id()),
            plan.predicted_step_finish(step.id()), kPredictedPid, device,
            StepArgs(&step, step.id(), step.bytes())));
      }
    }
    for (int device : devices) {
      events.push_back(Metadata("thread_name", kPredictedPid, device,
                                OrderedJson{{"name", absl::StrCat(
                                                         "device ", device)}}));
    }
  }

  // Measured: a process per worker (sorted by name), a thread per device.
  std::map<std::string, int> pid_of;
  for (const v1::StepResult& step : job.result().steps()) {
    pid_of.emplace(step.worker(), 0);
  }
  int next_pid = kPredictedPid + 1;
  for (auto& [worker, pid] : pid_of) {
    pid = next_pid++;
    events.push_back(Metadata("process_name", pid, 0,
                              OrderedJson{{"name", worker}}));
    events.push_back(Metadata("process_sort_index", pid, 0,
                              OrderedJson{{"sort_index", pid}}));
  }
  std::set<std::pair<int, int>> threads;
  double measured_end = 0;
  for (const v1::StepResult& step : job.result().steps()) {
    const int pid = pid_of.at(step.worker());
    threads.insert({pid, step.device()});
    measured_end = std::max(measured_end, step.end_seconds());
    const v1::Step* planned = find_step(step.step());
    OrderedJson args = StepArgs(planned, step.step(), step.bytes());
    args["worker"] = step.worker();
    args["device"] = step.device();
    events.push_back(Complete(EventName(planned, step.step()), "measured",
                              step.start_seconds(), step.end_seconds(), pid,
                              step.device(), std::move(args)));
  }
  for (const auto& [pid, device] : threads) {
    events.push_back(Metadata("thread_name", pid, device,
                              OrderedJson{{"name", absl::StrCat(
                                                       "device ", device)}}));
  }

  return OrderedJson{
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"otherData",
       OrderedJson{{"job_id", job.id()},
                   {"kind", plan.kind().empty() ? SpecKindName(job.spec())
                                                : plan.kind()},
                   {"strategy", plan.strategy()},
                   {"predicted_seconds", plan.predicted_seconds()},
                   {"measured_seconds", measured_end}}}};
}

}  // namespace meshcast::cli
