#include "cli/timeline_chart.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/job_format.h"
#include "cli/text_table.h"
#include "util/text_safety.h"

namespace meshcast::cli {
namespace {

constexpr int kMinWidth = 40;
// Labels longer than this are cut so the bars keep most of the width.
constexpr size_t kMaxLabel = 24;

// The bar letter of each op; the legend lists the ones used.
char OpLetter(v1::Step::Op op) {
  switch (op) {
    case v1::Step::OP_BROADCAST:
      return 'B';
    case v1::Step::OP_SEND_RECV:
      return 'S';
    case v1::Step::OP_ALL_GATHER:
      return 'G';
    case v1::Step::OP_REDUCE_SCATTER:
      return 'R';
    case v1::Step::OP_ALL_REDUCE:
      return 'A';
    case v1::Step::OP_ALL_TO_ALL:
      return 'T';
    case v1::Step::OP_LOCAL_COPY:
      return 'L';
    case v1::Step::OP_COMPUTE:
      return 'C';
    default:
      return '#';
  }
}

struct Cell {
  char letter = ' ';
  int step = -1;  // the step drawn there; -1 empty
};

}  // namespace

std::string RenderTimeline(const v1::Job& job, int width) {
  width = std::max(width, kMinWidth);
  const v1::JobResult& result = job.result();
  double end = 0;
  for (const v1::StepResult& step : result.steps()) {
    end = std::max(end, step.end_seconds());
  }
  if (result.steps_size() == 0 || end <= 0) {
    return absl::StrCat("job ", job.id(),
                        ": no step timings (the job has not run yet, or its "
                        "controller does not report them)\n");
  }
  std::map<int, v1::Step::Op> op_of;
  for (const v1::Step& step : job.plan().steps()) op_of[step.id()] = step.op();

  // Rows by (worker, device), sorted by worker name then device.
  std::map<std::pair<std::string, int>, std::vector<const v1::StepResult*>>
      rows;
  for (const v1::StepResult& step : result.steps()) {
    rows[{step.worker(), step.device()}].push_back(&step);
  }
  std::vector<std::string> labels;
  size_t label_width = 0;
  for (const auto& [key, steps] : rows) {
    // Worker names come from the network: escaped, cut by columns.
    std::string label = TruncateForColumn(
        absl::StrCat(key.first, " dev ", key.second), kMaxLabel);
    label_width = std::max(label_width, DisplayWidth(label));
    labels.push_back(std::move(label));
  }
  // "label |bars|": the bars take what the label and the two rules leave.
  const int columns =
      std::max(10, width - static_cast<int>(label_width) - 3);
  const double scale = end / columns;  // seconds per column

  std::set<v1::Step::Op> used_ops;
  bool unknown = false;  // a step the plan does not list
  bool overlap = false;
  std::string out = absl::StrCat("timeline of ", job.id(), ": ",
                                 result.steps_size(), " steps on ",
                                 rows.size(), " rows, 0 to ",
                                 FormatSeconds(end), "\n");
  size_t row_index = 0;
  for (const auto& [key, steps] : rows) {
    std::vector<Cell> cells(columns);
    for (const v1::StepResult* step : steps) {
      const auto op = op_of.find(step->step());
      const char letter = op == op_of.end() ? '#' : OpLetter(op->second);
      if (op != op_of.end()) {
        used_ops.insert(op->second);
      } else {
        unknown = true;
      }
      const double start = std::clamp(step->start_seconds(), 0.0, end);
      const double stop = std::clamp(step->end_seconds(), start, end);
      // Rounded, not floored and ceiled, so that back-to-back steps meet at
      // one column boundary instead of sharing a column (read as overlap).
      int first = static_cast<int>(std::lround(start / scale));
      int last = static_cast<int>(std::lround(stop / scale));  // exclusive
      first = std::clamp(first, 0, columns - 1);
      last = std::clamp(last, first + 1, columns);
      for (int c = first; c < last; ++c) {
        Cell& cell = cells[c];
        if (cell.step >= 0 && cell.step != step->step()) {
          cell.letter = '+';
          overlap = true;
        } else {
          cell.letter = letter;
        }
        cell.step = step->step();
      }
    }
    std::string bars;
    for (const Cell& cell : cells) bars.push_back(cell.letter);
    const std::string& label = labels[row_index++];
    absl::StrAppend(&out, label,
                    std::string(label_width - DisplayWidth(label), ' '),
                    " |", bars, "|\n");
  }

  // Scale line: tick labels at evenly spaced columns, each placed so that it
  // starts at its column (the last one ends at the right rule).
  std::string scale_line(label_width + 2 + columns + 1, ' ');
  const int ticks = std::max(2, columns / 20);
  int next_free = 0;  // first column a label may use
  for (int t = 0; t <= ticks; ++t) {
    const int column = columns * t / ticks;
    std::string text = t == 0 ? "0" : FormatSeconds(end * t / ticks);
    int at = static_cast<int>(label_width) + 2 + column;
    if (t == ticks) {
      at = static_cast<int>(scale_line.size() - text.size());
    }
    if (at < next_free) continue;  // would overwrite the previous label
    scale_line.replace(at, text.size(), text);
    next_free = at + static_cast<int>(text.size()) + 1;
  }
  while (!scale_line.empty() && scale_line.back() == ' ') scale_line.pop_back();
  absl::StrAppend(&out, scale_line, "\n");

  std::vector<std::string> legend;
  for (v1::Step::Op op : used_ops) {
    legend.push_back(absl::StrCat(std::string(1, OpLetter(op)), " ",
                                  StepOpName(op)));
  }
  if (unknown) legend.push_back("# a step the plan does not list");
  std::string footer = absl::StrJoin(legend, ", ");
  if (overlap) {
    absl::StrAppend(&footer, footer.empty() ? "" : "; ",
                    "+ steps overlap");
  }
  absl::StrAppend(&footer, footer.empty() ? "" : "; ", "1 column = ",
                  FormatSeconds(scale));
  // The legend wraps at `width` so that the chart's contract holds.
  std::string line;
  for (absl::string_view word : absl::StrSplit(footer, ' ')) {
    if (!line.empty() &&
        line.size() + 1 + word.size() > static_cast<size_t>(width)) {
      absl::StrAppend(&out, line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(&out, line, "\n");
  return out;
}

}  // namespace meshcast::cli
