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

TEST(ParseBytesTest, UnitsAndNumbers) {
  EXPECT_EQ(*ParseBytes("4096"), 4096);
  EXPECT_EQ(*ParseBytes("256MiB"), int64_t{256} << 20);
  EXPECT_EQ(*ParseBytes("1.5 GiB"), int64_t{3} << 29);
  EXPECT_EQ(*ParseBytes("2k"), 2048);
  EXPECT_EQ(*ParseBytes("1GB"), 1000000000);
  EXPECT_EQ(*ParseBytes("8B"), 8);
}

TEST(ParseBytesTest, RejectsWithTheUnits) {
  for (const char* bad : {"", "MiB", "12 parsecs", "-1", "0.5", "1e30"}) {
    absl::StatusOr<int64_t> parsed = ParseBytes(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("MiB"), std::string::npos)
        << parsed.status();
  }
}

}  // namespace
}  // namespace meshcast
