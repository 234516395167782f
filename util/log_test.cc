#include "util/log.h"

#include <cstdio>
#include <string>

#include "absl/time/civil_time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

absl::Time At(int hour, int minute, int second, int millis) {
  return absl::FromCivil(absl::CivilSecond(2026, 11, 27, hour, minute, second),
                         absl::UTCTimeZone()) +
         absl::Milliseconds(millis);
}

TEST(LogTest, LineShape) {
  EXPECT_EQ(FormatLogLine(At(5, 40, 1, 123), LogSeverity::kInfo, "controller",
                          "job-000042", "RUNNING on 2 workers"),
            "2026-11-27T05:40:01.123Z INFO controller job=job-000042 "
            "RUNNING on 2 workers");
  EXPECT_EQ(FormatLogLine(At(23, 0, 0, 0), LogSeverity::kWarning,
                          "worker/node-1", "", "controller unreachable"),
            "2026-11-27T23:00:00.000Z WARN worker/node-1 controller "
            "unreachable");
  // A message's line breaks do not start a new record.
  EXPECT_EQ(FormatLogLine(At(0, 0, 0, 5), LogSeverity::kError, "c", "",
                          "two\nlines"),
            "2026-11-27T00:00:00.005Z ERROR c two lines");
}

TEST(LogTest, ParseReadsWhatFormatWrote) {
  for (const LogSeverity severity :
       {LogSeverity::kInfo, LogSeverity::kWarning, LogSeverity::kError}) {
    for (const std::string job : {"", "job-000007"}) {
      const std::string text = FormatLogLine(
          At(12, 34, 56, 789), severity, "worker/w0", job, "a message: x=1");
      const std::optional<LogLine> line = ParseLogLine(text);
      ASSERT_TRUE(line.has_value()) << text;
      EXPECT_EQ(line->time, At(12, 34, 56, 789));
      EXPECT_EQ(line->severity, severity);
      EXPECT_EQ(line->component, "worker/w0");
      EXPECT_EQ(line->job_id, job);
      EXPECT_EQ(line->message, "a message: x=1");
    }
  }
  const std::optional<LogLine> bare =
      ParseLogLine("2026-11-27T00:00:00.000Z INFO controller job=job-1\n");
  ASSERT_TRUE(bare.has_value());
  EXPECT_EQ(bare->job_id, "job-1");
  EXPECT_EQ(bare->message, "");
}

TEST(LogTest, ParseRefusesOtherText) {
  for (const char* text :
       {"", "meshcast-worker listening on 127.0.0.1:5000",
        "=== starting controller", "2026-11-27T00:00:00.000Z",
        "2026-11-27T00:00:00.000Z DEBUG controller x",
        "yesterday INFO controller x"}) {
    EXPECT_EQ(ParseLogLine(text), std::nullopt) << text;
  }
}

TEST(LogTest, LogWritesOneLineToStderrWithTheComponent) {
  SetLogComponent("worker/test");
  ::testing::internal::CaptureStderr();
  JobLogWarning("job-000009", "aborting: ", "cancelled");
  LogInfo("ready");
  SetLogQuiet(true);
  LogInfo("hidden");
  LogError("shown");
  SetLogQuiet(false);
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(out, MatchesRegex(
                       "[0-9T:.Z-]+ WARN worker/test job=job-000009 aborting: "
                       "cancelled\n"
                       "[0-9T:.Z-]+ INFO worker/test ready\n"
                       "[0-9T:.Z-]+ ERROR worker/test shown\n"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("hidden")));
  SetLogComponent("meshcast");
}

}  // namespace
}  // namespace meshcast
