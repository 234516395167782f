#include "planner/kinds/step_spans.h"

namespace meshcast {

std::vector<StepSpan> StepSpansOf(const v1::Plan& plan,
                                  const v1::JobResult& result) {
  std::vector<StepSpan> spans;
  for (const v1::StepResult& step : result.steps()) {
    if (step.step() < 0 || step.step() >= plan.steps_size()) continue;
    StepSpan span{step.step(),          step.worker(),      step.device(),
                  step.start_seconds(), step.end_seconds(), step.cpu_seconds()};
    if (span.end <= span.start) span.end = span.start + step.seconds();
    spans.push_back(std::move(span));
  }
  if (!spans.empty() || plan.predicted_step_start_size() != plan.steps_size() ||
      plan.predicted_step_finish_size() != plan.steps_size()) {
    return spans;
  }
  for (int i = 0; i < plan.steps_size(); ++i) {
    spans.push_back({i, "", plan.steps(i).device(),
                     plan.predicted_step_start(i),
                     plan.predicted_step_finish(i)});
  }
  return spans;
}

}  // namespace meshcast
