#include "cli/text_table.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

TEST(TextTableTest, AlignsColumns) {
  TextTable table({"name", "value"}, {TextTable::kLeft, TextTable::kRight});
  table.AddRow({"a", "1.5"});
  table.AddRow({"longer", "10"});
  EXPECT_EQ(table.num_rows(), 2);
  EXPECT_EQ(table.Render("  "),
            "  name    value\n"
            "  ------  -----\n"
            "  a         1.5\n"
            "  longer     10\n");
}

TEST(TextTableTest, ShortRowsArePaddedAndNoTrailingSpaces) {
  TextTable table({"a", "b"}, {TextTable::kLeft, TextTable::kLeft});
  table.AddRow({"x"});
  EXPECT_EQ(table.Render(), "a  b\n-  -\nx\n");
}

TEST(TextTableTest, CellsAreEscapedAndLongOnesCut) {
  TextTable table({"name", "n"}, {TextTable::kLeft, TextTable::kRight});
  table.AddRow({"a\x1b[31mb", "1"});
  table.AddRow({std::string(200, 'x'), "2"});
  table.AddRow({"caf\xC3\xA9", "3"});
  const std::string out = table.Render();
  EXPECT_THAT(out, ::testing::HasSubstr("a\\x1B[31mb"));
  EXPECT_THAT(out, ::testing::Not(::testing::HasSubstr(std::string(200, 'x'))));
  const std::string cut =
      std::string(TextTable::kMaxCellWidth - 1, 'x') + "\xE2\x80\xA6";
  // Widths count columns: the cut cell and the UTF-8 one align.
  EXPECT_THAT(out, ::testing::HasSubstr(cut + "  2\n"));
  EXPECT_THAT(
      out, ::testing::HasSubstr("caf\xC3\xA9" +
                                std::string(TextTable::kMaxCellWidth - 4, ' ') +
                                "  3\n"));
}

TEST(FormatTest, Seconds) {
  EXPECT_EQ(FormatSeconds(1.71799), "1.718 s");
  EXPECT_EQ(FormatSeconds(0.859), "859.000 ms");
  EXPECT_EQ(FormatSeconds(12.3e-6), "12.300 us");
  EXPECT_EQ(FormatSeconds(0), "0.000 us");
}

TEST(FormatTest, Bytes) {
  EXPECT_EQ(FormatBytes(100), "100 B");
  EXPECT_EQ(FormatBytes(512 * 1024), "512 KiB");
  EXPECT_EQ(FormatBytes(2.0 * (1 << 30)), "2 GiB");
  EXPECT_EQ(FormatBytes(1.5 * (1 << 20)), "1.50 MiB");
}

TEST(FormatTest, DeviceRanges) {
  EXPECT_EQ(FormatDeviceRanges({0, 1, 2, 3, 8, 9, 10, 11}), "0-3,8-11");
  EXPECT_EQ(FormatDeviceRanges({5}), "5");
  EXPECT_EQ(FormatDeviceRanges({0, 4, 5, 9}), "0,4-5,9");
  EXPECT_EQ(FormatDeviceRanges({}), "");
}

}  // namespace
}  // namespace meshcast::cli
