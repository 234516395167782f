#include "cli/text_table.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/text_safety.h"

namespace meshcast::cli {

TextTable::TextTable(std::vector<std::string> header, std::vector<Align> align)
    : header_(std::move(header)), align_(std::move(align)) {
  align_.resize(header_.size(), kRight);
}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(std::max(cells.size(), header_.size()));
  for (std::string& cell : cells) cell = TruncateForColumn(cell, kMaxCellWidth);
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render(const std::string& indent) const {
  std::vector<size_t> width(header_.size(), 0);
  // Widths in columns, not bytes: an ellipsis or a UTF-8 name is one.
  for (size_t c = 0; c < header_.size(); ++c) {
    width[c] = DisplayWidth(header_[c]);
  }
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], DisplayWidth(row[c]));
    }
  }
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string out = indent;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string& cell = c < cells.size() ? cells[c] : std::string();
      const std::string pad(width[c] - std::min(width[c], DisplayWidth(cell)),
                            ' ');
      if (c > 0) out += "  ";
      out += align_[c] == kLeft ? cell + pad : pad + cell;
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(header_);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  out += line(rule);
  for (const auto& row : rows_) out += line(row);
  return out;
}

std::string FormatSeconds(double seconds) {
  if (!std::isfinite(seconds)) return absl::StrCat(seconds);
  const double magnitude = std::fabs(seconds);
  if (magnitude >= 1) return absl::StrFormat("%.3f s", seconds);
  if (magnitude >= 1e-3) return absl::StrFormat("%.3f ms", seconds * 1e3);
  if (magnitude >= 1e-6 || magnitude == 0) {
    return absl::StrFormat("%.3f us", seconds * 1e6);
  }
  return absl::StrFormat("%.3f ns", seconds * 1e9);
}

std::string FormatBytes(double bytes) {
  static constexpr const char* kUnits[] = {"B",   "KiB", "MiB",
                                           "GiB", "TiB", "PiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%.0f B", bytes);
  if (bytes == std::floor(bytes)) {
    return absl::StrFormat("%.0f %s", bytes, kUnits[unit]);
  }
  return absl::StrFormat("%.2f %s", bytes, kUnits[unit]);
}

std::string FormatDeviceRanges(const std::vector<int>& devices) {
  std::string out;
  size_t i = 0;
  while (i < devices.size()) {
    size_t j = i;
    while (j + 1 < devices.size() && devices[j + 1] == devices[j] + 1) ++j;
    if (!out.empty()) out += ",";
    if (j == i) {
      absl::StrAppend(&out, devices[i]);
    } else {
      absl::StrAppend(&out, devices[i], "-", devices[j]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace meshcast::cli
