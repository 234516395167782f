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
#include "absl/strings/string_view.h"
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

// What the chart draws for one plan step: its op letter, or its label.
struct StepMark {
  v1::Step::Op op = v1::Step::OP_UNSPECIFIED;
  std::string label;  // BarLabel(Step.label); empty: draw the op letter
};

// Step.label as bar text, one byte per column: the label comes from the
// controller, so anything but printable ASCII (a control byte, a UTF-8
// sequence, a space that would read as a gap) becomes '?'.
std::string BarLabel(absl::string_view label) {
  std::string text(label);
  for (char& c : text) {
    if (c <= ' ' || c > '~') c = '?';
  }
  return text;
}

// One stretch of a labelled bar: the label then '=' to its end, or the
// label's first letter throughout where it is narrower than the label (a
// cut label would read as a different one).
std::string StretchText(const std::string& label, int columns) {
  const size_t size = static_cast<size_t>(columns);
  if (size < label.size()) return std::string(size, label.front());
  return label + std::string(size - label.size(), '=');
}

// The legend entry for labelled bars, with the first label (by step id) as
// the example when it is short enough to read as one.
std::string LabelLegend(const std::string& example) {
  constexpr size_t kMaxExample = 8;
  const std::string shown =
      example.size() <= kMaxExample ? example : std::string("label");
  return absl::StrCat(shown,
                      "== step label then '=' (its first letter where the "
                      "bar is narrower)");
}

// What the legend explains: the op letters, labels and marks drawn.
struct Legend {
  std::set<v1::Step::Op> ops;           // of the steps drawn with op letters
  std::map<int, std::string> labels;    // step id -> label drawn
  bool unknown = false;                 // a step the plan does not list
  bool overlap = false;
};

struct Cell {
  char letter = ' ';
  int step = -1;  // the step drawn there; -1 empty
};

// A step's bar on a row: columns [first, last).
struct Bar {
  int step;
  int first;
  int last;
  const std::string* label;  // empty: drawn in its letter throughout
};

// Writes the label over every stretch of `bar` that no other step covers
// ('+' cells split it), so an overlapping send does not hide the label of
// the block it overlaps.
void DrawLabel(const Bar& bar, std::vector<Cell>& cells) {
  const auto own = [&](int c) {
    return cells[c].step == bar.step && cells[c].letter != '+';
  };
  for (int c = bar.first; c < bar.last;) {
    if (!own(c)) {
      ++c;
      continue;
    }
    int stop = c;
    while (stop < bar.last && own(stop)) ++stop;
    const std::string text = StretchText(*bar.label, stop - c);
    for (int i = c; i < stop; ++i) cells[i].letter = text[i - c];
    c = stop;
  }
}

// The `columns` characters of one row's bars. Overlap first, labels after:
// which stretches of a bar are its own is known only once all are placed.
std::string DrawRow(const std::vector<const v1::StepResult*>& steps,
                    const std::map<int, StepMark>& mark_of, int columns,
                    double scale, double end, Legend& legend) {
  std::vector<Cell> cells(columns);
  std::vector<Bar> labelled;
  for (const v1::StepResult* step : steps) {
    const auto found = mark_of.find(step->step());
    const bool listed = found != mark_of.end();
    const char letter = listed ? OpLetter(found->second.op) : '#';
    if (!listed) {
      legend.unknown = true;
    } else if (found->second.label.empty()) {
      legend.ops.insert(found->second.op);
    } else {
      legend.labels.emplace(step->step(), found->second.label);
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
        legend.overlap = true;
      } else {
        cell.letter = letter;
      }
      cell.step = step->step();
    }
    if (listed && !found->second.label.empty()) {
      labelled.push_back(Bar{step->step(), first, last, &found->second.label});
    }
  }
  for (const Bar& bar : labelled) DrawLabel(bar, cells);
  std::string bars;
  for (const Cell& cell : cells) bars.push_back(cell.letter);
  return bars;
}

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
  std::map<int, StepMark> mark_of;
  for (const v1::Step& step : job.plan().steps()) {
    mark_of[step.id()] = StepMark{step.op(), BarLabel(step.label())};
  }

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

  Legend drawn;
  std::string out = absl::StrCat("timeline of ", job.id(), ": ",
                                 result.steps_size(), " steps on ",
                                 rows.size(), " rows, 0 to ",
                                 FormatSeconds(end), "\n");
  size_t row_index = 0;
  for (const auto& [key, steps] : rows) {
    const std::string bars =
        DrawRow(steps, mark_of, columns, scale, end, drawn);
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
  for (v1::Step::Op op : drawn.ops) {
    legend.push_back(absl::StrCat(std::string(1, OpLetter(op)), " ",
                                  StepOpName(op)));
  }
  if (!drawn.labels.empty()) {
    legend.push_back(LabelLegend(drawn.labels.begin()->second));
  }
  if (drawn.unknown) legend.push_back("# a step the plan does not list");
  std::string footer = absl::StrJoin(legend, ", ");
  if (drawn.overlap) {
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
