#include "cli/timeline_chart.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

void AddStep(v1::Job& job, int id, const std::string& worker, int device,
             double start, double end) {
  v1::StepResult* step = job.mutable_result()->add_steps();
  step->set_step(id);
  step->set_worker(worker);
  step->set_device(device);
  step->set_start_seconds(start);
  step->set_end_seconds(end);
  step->set_seconds(end - start);
}

// Two all-reduce steps, back to back, on two workers; the second worker
// starts its first step a little late.
v1::Job TwoWorkers() {
  v1::Job job;
  job.set_id("job-7");
  for (int id : {0, 1}) {
    v1::Step* step = job.mutable_plan()->add_steps();
    step->set_id(id);
    step->set_op(v1::Step::OP_ALL_REDUCE);
  }
  AddStep(job, 0, "worker-0", 0, 0.0, 0.010);
  AddStep(job, 1, "worker-0", 0, 0.010, 0.020);
  AddStep(job, 0, "worker-1", 4, 0.002, 0.010);
  AddStep(job, 1, "worker-1", 4, 0.010, 0.020);
  return job;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(TimelineChartTest, OneRowPerWorkerDeviceWithinTheWidth) {
  const std::string chart = RenderTimeline(TwoWorkers());
  const std::vector<std::string> lines = Lines(chart);
  ASSERT_GE(lines.size(), 4u) << chart;
  EXPECT_THAT(lines[0], StartsWith("timeline of job-7: 4 steps on 2 rows, 0 "
                                   "to 20.000 ms"));
  EXPECT_THAT(lines[1], StartsWith("worker-0 dev 0 |"));
  EXPECT_THAT(lines[2], StartsWith("worker-1 dev 4 |"));
  for (const std::string& line : lines) {
    EXPECT_LE(line.size(), 100u) << line;
  }
  // Both bars end at the right rule (the job's end), fully drawn with the
  // all-reduce letter; worker-0's starts at column 0.
  const std::string row0 = lines[1].substr(lines[1].find('|') + 1);
  ASSERT_EQ(row0.back(), '|');
  const std::string bars0 = row0.substr(0, row0.size() - 1);
  EXPECT_EQ(bars0.size(), 100u - 17u);
  EXPECT_EQ(bars0.find_first_not_of('A'), std::string::npos) << bars0;
  // worker-1 starts 2 ms late: 10% of the axis, so about 8 columns blank.
  const std::string row1 = lines[2].substr(lines[2].find('|') + 1);
  const size_t first = row1.find('A');
  EXPECT_GE(first, 7u);
  EXPECT_LE(first, 9u);
  // Scale line: 0 under the first column, the total at the right end.
  EXPECT_THAT(lines[3], StartsWith(std::string(16, ' ') + "0"));
  EXPECT_THAT(lines[3], testing::EndsWith("20.000 ms"));
  EXPECT_EQ(lines[3].size(), lines[1].size());
  EXPECT_THAT(chart, HasSubstr("A all_reduce"));
  EXPECT_THAT(chart, HasSubstr("1 column = "));
}

TEST(TimelineChartTest, ShortStepsStayVisibleAndOverlapIsMarked) {
  v1::Job job;
  job.set_id("j");
  AddStep(job, 0, "w", 0, 0.0, 1.0);
  AddStep(job, 1, "w", 0, 0.5, 0.5000001);  // far below one column
  AddStep(job, 2, "w", 1, 0.0, 1e-9);
  const std::string chart = RenderTimeline(job, 60);
  const std::vector<std::string> lines = Lines(chart);
  ASSERT_GE(lines.size(), 3u);
  for (const std::string& line : lines) EXPECT_LE(line.size(), 60u) << line;
  EXPECT_NE(lines[1].find('+'), std::string::npos) << chart;  // overlap
  EXPECT_NE(lines[2].find('#'), std::string::npos) << chart;  // 1 ns step
  EXPECT_THAT(chart, HasSubstr("# a step the plan does not list"));
  EXPECT_THAT(chart, HasSubstr("+ steps overlap"));
}

// A two-stage pipeline of two micro-batches, one stage per row, with the
// labels the pipeline kind sets: compute blocks "F<m>" / "B<m>", the forward
// sends "F<m>>" and the gradient sends "<B<m>" (one send_recv step, drawn on
// both stages' rows). 40 ms over 40 columns: 1 column = 1 ms.
v1::Job TwoStagePipeline() {
  v1::Job job;
  job.set_id("job-p");
  struct Planned {
    const char* label;
    v1::Step::Op op;
    double start, end;     // ms
    std::vector<int> rows;  // stages that run it
  };
  const Planned planned[] = {
      {"F0", v1::Step::OP_COMPUTE, 0, 6, {0}},
      {"F0>", v1::Step::OP_SEND_RECV, 6, 7, {0, 1}},  // narrower than label
      {"F0", v1::Step::OP_COMPUTE, 7, 13, {1}},
      {"F1", v1::Step::OP_COMPUTE, 7, 13, {0}},
      {"F1>", v1::Step::OP_SEND_RECV, 13, 16, {0, 1}},  // exactly as wide
      {"F1", v1::Step::OP_COMPUTE, 16, 22, {1}},
      {"B1", v1::Step::OP_COMPUTE, 22, 28, {1}},
      {"<B1", v1::Step::OP_SEND_RECV, 28, 29, {0, 1}},
      {"B1", v1::Step::OP_COMPUTE, 29, 35, {0}},
      {"B0", v1::Step::OP_COMPUTE, 29, 35, {1}},
      {"<B0", v1::Step::OP_SEND_RECV, 35, 36, {0, 1}},
      {"B0", v1::Step::OP_COMPUTE, 36, 40, {0}},
  };
  int id = 0;
  for (const Planned& p : planned) {
    v1::Step* step = job.mutable_plan()->add_steps();
    step->set_id(id);
    step->set_op(p.op);
    step->set_label(p.label);
    for (int stage : p.rows) {
      AddStep(job, id, "worker-" + std::to_string(stage), stage,
              p.start / 1000, p.end / 1000);
    }
    ++id;
  }
  return job;
}

// The chart with its lines joined by spaces: the legend wraps at the width,
// so a legend entry may span two lines.
std::string Unwrapped(const std::string& chart) {
  return absl::StrJoin(Lines(chart), " ");
}

// The bars of a chart row, between the rules.
std::string Bars(const std::string& line) {
  const size_t open = line.find('|');
  return line.substr(open + 1, line.rfind('|') - open - 1);
}

TEST(TimelineChartTest, LabelsInsideWideBarsFirstLetterInNarrowOnes) {
  // "worker-0 dev 0 |" + 40 columns + "|".
  const int width = 14 + 3 + 40;
  const std::string chart = RenderTimeline(TwoStagePipeline(), width);
  const std::vector<std::string> lines = Lines(chart);
  ASSERT_GE(lines.size(), 4u) << chart;
  for (const std::string& line : lines) {
    EXPECT_LE(line.size(), static_cast<size_t>(width)) << line;
  }
  // A bar as wide as its label or wider shows the label then '='; a
  // 1-column send shows its label's first letter.
  EXPECT_EQ(Bars(lines[1]), "F0====FF1====F1>            <B1====<B0==")
      << chart;
  EXPECT_EQ(Bars(lines[2]), "      FF0====F1>F1====B1====<B0====<    ")
      << chart;
  // Labelled bars are explained once, not by the op letters they replace.
  const std::string legend = Unwrapped(chart);
  EXPECT_THAT(legend, HasSubstr("F0== step label then '='"));
  EXPECT_THAT(legend, Not(HasSubstr("C compute")));
  EXPECT_THAT(legend, Not(HasSubstr("S send_recv")));
  EXPECT_THAT(legend, Not(HasSubstr("+ steps overlap")));
}

TEST(TimelineChartTest, LabelsAndOpLettersOnOneRow) {
  // An unlabelled step keeps its op letter (and legend entry) beside
  // labelled ones; overlap still shows '+', and does not hide a label.
  v1::Job job;
  job.set_id("j");
  const char* labels[] = {"F0", "", "B0"};
  for (int id : {0, 1, 2}) {
    v1::Step* step = job.mutable_plan()->add_steps();
    step->set_id(id);
    step->set_op(id == 1 ? v1::Step::OP_ALL_REDUCE : v1::Step::OP_COMPUTE);
    step->set_label(labels[id]);
  }
  AddStep(job, 0, "w", 0, 0.000, 0.010);
  AddStep(job, 1, "w", 0, 0.010, 0.020);
  AddStep(job, 2, "w", 0, 0.018, 0.040);  // overlaps step 1 by 2 ms
  const int width = 7 + 3 + 40;  // "w dev 0 |" + 40 columns + "|"
  const std::string chart = RenderTimeline(job, width);
  const std::vector<std::string> lines = Lines(chart);
  ASSERT_GE(lines.size(), 3u) << chart;
  for (const std::string& line : lines) {
    EXPECT_LE(line.size(), static_cast<size_t>(width)) << line;
  }
  // B0's label starts after the overlap, where the bar is its own.
  EXPECT_EQ(Bars(lines[1]),
            "F0========AAAAAAAA++B0==================")
      << chart;
  const std::string legend = Unwrapped(chart);
  EXPECT_THAT(legend, HasSubstr("A all_reduce"));
  EXPECT_THAT(legend, Not(HasSubstr("C compute")));
  EXPECT_THAT(legend, HasSubstr("F0== step label then '='"));
  EXPECT_THAT(legend, HasSubstr("+ steps overlap"));
}

TEST(TimelineChartTest, LabelBytesOtherThanPrintableAsciiAreEscaped) {
  // A label comes from the controller: no escape sequence reaches the
  // terminal, and every bar byte is one column.
  v1::Job job;
  job.set_id("j");
  v1::Step* step = job.mutable_plan()->add_steps();
  step->set_id(0);
  step->set_op(v1::Step::OP_COMPUTE);
  step->set_label("\x1b[2J \xc3\xa9");
  AddStep(job, 0, "w", 0, 0.0, 1.0);
  const std::string chart = RenderTimeline(job, 60);
  EXPECT_EQ(chart.find('\x1b'), std::string::npos) << chart;
  const std::vector<std::string> lines = Lines(chart);
  ASSERT_GE(lines.size(), 2u);
  // ESC, the space and the two bytes of U+00E9 each read as '?' (written
  // "\?" so that the literal spells no trigraph).
  EXPECT_THAT(Bars(lines[1]), StartsWith("?[2J\?\?\?=")) << chart;
  EXPECT_EQ(Bars(lines[1]).size(), 60u - 10u);
}

TEST(TimelineChartTest, NoTimings) {
  v1::Job job;
  job.set_id("j");
  EXPECT_THAT(RenderTimeline(job), StartsWith("job j: no step timings"));
}

}  // namespace
}  // namespace meshcast::cli
