#include "util/text_safety.h"

#include <string>

#include "gtest/gtest.h"

namespace meshcast {
namespace {

TEST(TextSafetyTest, PrintableTextIsKept) {
  EXPECT_EQ(EscapeForTerminal("worker-1 127.0.0.1:5000"),
            "worker-1 127.0.0.1:5000");
  // Valid UTF-8 of printable characters stays: é, €, 😀.
  const std::string text = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";
  EXPECT_EQ(EscapeForTerminal(text), text);
  EXPECT_EQ(EscapeForTerminal(""), "");
  EXPECT_EQ(EscapeForTerminal("a\\b"), "a\\b");
}

TEST(TextSafetyTest, ControlsAndAnsiEscapesAreHexEscaped) {
  EXPECT_EQ(EscapeForTerminal("evil\x1b[2J\x1b]0;title\x07"),
            "evil\\x1B[2J\\x1B]0;title\\x07");
  EXPECT_EQ(EscapeForTerminal("a\rb\nc\td\x7F"), "a\\x0Db\\x0Ac\\x09d\\x7F");
  EXPECT_EQ(EscapeForTerminal(std::string("a\0b", 3)), "a\\x00b");
  // C1 CSI (U+009B) and a right-to-left override (U+202E).
  EXPECT_EQ(EscapeForTerminal("x\xC2\x9B"
                              "31m"),
            "x\\xC2\\x9B31m");
  EXPECT_EQ(EscapeForTerminal("a\xE2\x80\xAE"
                              "b"),
            "a\\xE2\\x80\\xAEb");
}

TEST(TextSafetyTest, InvalidUtf8IsHexEscaped) {
  EXPECT_EQ(EscapeForTerminal("a\xFF"
                              "b"),
            "a\\xFFb");
  EXPECT_EQ(EscapeForTerminal("\x80"), "\\x80");
  // Truncated 3-byte sequence, overlong '/', a surrogate, past U+10FFFF.
  EXPECT_EQ(EscapeForTerminal("\xE2\x82"), "\\xE2\\x82");
  EXPECT_EQ(EscapeForTerminal("\xC0\xAF"), "\\xC0\\xAF");
  EXPECT_EQ(EscapeForTerminal("\xED\xA0\x80"), "\\xED\\xA0\\x80");
  EXPECT_EQ(EscapeForTerminal("\xF4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");
  for (const char* bad : {"a\xFF", "\x80", "\xE2\x82", "\xC0\xAF",
                          "\xED\xA0\x80", "\xF4\x90\x80\x80"}) {
    EXPECT_FALSE(IsValidUtf8(bad)) << EscapeForTerminal(bad);
    EXPECT_TRUE(IsValidUtf8(EscapeForTerminal(bad)));
  }
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9 \xF0\x9F\x98\x80"));
  EXPECT_TRUE(IsValidUtf8(""));
}

TEST(TextSafetyTest, TruncateForColumnCutsWithAnEllipsis) {
  EXPECT_EQ(TruncateForColumn("short", 10), "short");
  EXPECT_EQ(TruncateForColumn("exactly10!", 10), "exactly10!");
  EXPECT_EQ(TruncateForColumn("abcdefghijkl", 5), "abcd\xE2\x80\xA6");
  EXPECT_EQ(DisplayWidth(TruncateForColumn(std::string(500, 'x'), 40)), 40u);
  EXPECT_EQ(TruncateForColumn(std::string(500, 'x'), 0), std::string(500, 'x'));
  // An escape is one unit: it is kept whole or dropped whole.
  EXPECT_EQ(TruncateForColumn("ab\x1b"
                              "cdef",
                              5),
            "ab\xE2\x80\xA6");
  EXPECT_EQ(TruncateForColumn("ab\x1b"
                              "cdef",
                              7),
            "ab\\x1B\xE2\x80\xA6");
  // Code points count one column each.
  EXPECT_EQ(TruncateForColumn("\xC3\xA9\xC3\xA9\xC3\xA9", 3),
            "\xC3\xA9\xC3\xA9\xC3\xA9");
}

TEST(TextSafetyTest, QuotePrefixQuotesAShortEscapedPrefix) {
  EXPECT_EQ(QuotePrefix("all_shuffle"), "\"all_shuffle\"");
  EXPECT_EQ(QuotePrefix("a\x1b[31m"), "\"a\\x1B[31m\"");
  EXPECT_EQ(QuotePrefix(std::string(300, 'a'), 4),
            "\"aaaa\xE2\x80\xA6\" (300 bytes)");
  // The default keeps 64 bytes of a 1 MiB value.
  const std::string quoted = QuotePrefix(std::string(1 << 20, 'z'));
  EXPECT_EQ(quoted,
            "\"" + std::string(64, 'z') + "\xE2\x80\xA6\" (1048576 bytes)");
  // A cut never splits a code point: "é" is 2 bytes, 3 bytes keep one.
  EXPECT_EQ(QuotePrefix("\xC3\xA9\xC3\xA9\xC3\xA9", 3),
            "\"\xC3\xA9\xE2\x80\xA6\" (6 bytes)");
}

}  // namespace
}  // namespace meshcast
