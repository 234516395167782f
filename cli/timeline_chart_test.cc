#include "cli/timeline_chart.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::HasSubstr;
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

TEST(TimelineChartTest, NoTimings) {
  v1::Job job;
  job.set_id("j");
  EXPECT_THAT(RenderTimeline(job), StartsWith("job j: no step timings"));
}

}  // namespace
}  // namespace meshcast::cli
