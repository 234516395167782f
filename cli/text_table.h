// TextTable: aligned plain-text tables for meshctl and the benchmarks, in the
// spirit of nccl-tests output (left-aligned text, right-aligned numbers).
//
//   TextTable table({"strategy", "time (s)"}, {TextTable::kLeft,
//                                              TextTable::kRight});
//   table.AddRow({"meshcast", "0.859"});
//   std::cout << table.Render("  ");
//
// Thread safety: not thread-safe; a plain value type.
#ifndef MESHCAST_CLI_TEXT_TABLE_H_
#define MESHCAST_CLI_TEXT_TABLE_H_

#include <string>
#include <vector>

namespace meshcast::cli {

class TextTable {
 public:
  enum Align { kLeft, kRight };

  // Columns not given an alignment are right-aligned.
  explicit TextTable(std::vector<std::string> header,
                     std::vector<Align> align = {});

  // A cell longer than this many columns is cut with an ellipsis.
  static constexpr size_t kMaxCellWidth = 80;

  // Rows shorter than the header are padded with empty cells. Every cell is
  // escaped for the terminal (util/text_safety.h: cells often hold names
  // and messages from the network) and cut to kMaxCellWidth.
  void AddRow(std::vector<std::string> cells);
  int num_rows() const { return static_cast<int>(rows_.size()); }

  // Header, a rule of dashes, then the rows; every line starts with `indent`
  // and ends with '\n' (no trailing spaces).
  std::string Render(const std::string& indent = "") const;

 private:
  std::vector<std::string> header_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

// Human-readable helpers shared by meshctl and the benchmarks.
// "859.0 ms", "1.718 s", "12.3 us".
std::string FormatSeconds(double seconds);
// "2.00 GiB", "512 KiB", "100 B".
std::string FormatBytes(double bytes);
// A compact device list: "0-3,8-11" for {0,1,2,3,8,9,10,11}.
std::string FormatDeviceRanges(const std::vector<int>& devices);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_TEXT_TABLE_H_
