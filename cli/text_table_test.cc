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
