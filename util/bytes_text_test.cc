#include "util/bytes_text.h"

#include "gtest/gtest.h"

namespace meshcast {
namespace {

TEST(FormatBytesTest, BinaryUnitsWithOneDecimal) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(int64_t{32} << 30), "32.0 GiB");
  EXPECT_EQ(FormatBytes(int64_t{1} << 40), "1.0 TiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 59), "1.5 EiB");
}

}  // namespace
}  // namespace meshcast
