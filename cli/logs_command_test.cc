#include "cli/logs_command.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/civil_time.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/log.h"

namespace meshcast::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

absl::Time At(int second) {
  return absl::FromCivil(absl::CivilSecond(2026, 11, 27, 6, 0, second),
                         absl::UTCTimeZone());
}

std::string Line(int second, const std::string& component,
                 const std::string& job, const std::string& message) {
  return FormatLogLine(At(second), LogSeverity::kInfo, component, job,
                       message);
}

class LogsCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/logs_command_test_", getpid(),
                        "_", ::testing::UnitTest::GetInstance()
                                 ->current_test_info()
                                 ->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/logs");
    // Interleaved in time across the files; banners and Prometheus's log in
    // another format stay out.
    Append("controller", {"=== starting controller",
                          Line(1, "controller", "", "listening"),
                          Line(4, "controller", "job-000041", "QUEUED"),
                          Line(7, "controller", "job-000042", "RUNNING"),
                          Line(9, "controller", "job-000042", "SUCCEEDED")});
    Append("worker-0", {"meshcast-worker listening on 127.0.0.1:1",
                        Line(2, "worker/worker-0", "", "registered"),
                        Line(8, "worker/worker-0", "job-000042", "started")});
    Append("worker-1", {Line(3, "worker/worker-1", "", "registered"),
                        Line(8, "worker/worker-1", "job-000042", "started"),
                        Line(5, "worker/worker-1", "job-000041", "late")});
    Append("prometheus", {"ts=2026-11-27T06:00:00Z level=info msg=ready"});
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Append(const std::string& name, const std::vector<std::string>& lines,
              bool end_with_newline = true) {
    std::ofstream out(dir_ + "/logs/" + name + ".log", std::ios::app);
    for (size_t i = 0; i < lines.size(); ++i) {
      out << lines[i];
      if (i + 1 < lines.size() || end_with_newline) out << "\n";
    }
  }

  CommandResult Run(std::vector<std::string> args) {
    args.push_back("--dir");
    args.push_back(dir_);
    return RunLogsCommand(args, ContextWithEnv({}));
  }

  // The message of every line of `text`, in order.
  static std::vector<std::string> Messages(const std::string& text) {
    std::vector<std::string> messages;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      const std::optional<LogLine> parsed = ParseLogLine(line);
      messages.push_back(parsed.has_value()
                             ? absl::StrCat(parsed->component, " ",
                                            parsed->message)
                             : absl::StrCat("UNPARSED ", line));
    }
    return messages;
  }

  std::string dir_;
};

TEST_F(LogsCommandTest, MergesEveryDaemonInTimeOrder) {
  const CommandResult result = Run({});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(Messages(result.out),
              ElementsAre("controller listening", "worker/worker-0 registered",
                          "worker/worker-1 registered", "controller QUEUED",
                          "worker/worker-1 late", "controller RUNNING",
                          "worker/worker-0 started", "worker/worker-1 started",
                          "controller SUCCEEDED"));
}

TEST_F(LogsCommandTest, OneJobByNumberIdOrPrefix) {
  for (const std::string job : {"42", "job-42", "job-000042", "job-0000042"}) {
    const CommandResult result = Run({job});
    ASSERT_EQ(result.exit_code, kExitOk) << job << ": " << result.err;
    EXPECT_THAT(Messages(result.out),
                ElementsAre("controller RUNNING", "worker/worker-0 started",
                            "worker/worker-1 started", "controller SUCCEEDED"))
        << job;
  }
  const CommandResult earlier = Run({"41"});
  ASSERT_EQ(earlier.exit_code, kExitOk) << earlier.err;
  EXPECT_THAT(Messages(earlier.out),
              ElementsAre("controller QUEUED", "worker/worker-1 late"));
}

TEST_F(LogsCommandTest, UnknownOrAmbiguousJobIsBadInput) {
  CommandResult result = Run({"7"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("no log line names job '7'"));
  EXPECT_THAT(result.err, HasSubstr("job-000041 .. job-000042"));
  EXPECT_THAT(result.out, IsEmpty());
  result = Run({"job-00004"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("job-000041"));
  EXPECT_THAT(result.err, HasSubstr("job-000042"));
}

TEST_F(LogsCommandTest, OneWorker) {
  CommandResult result = Run({"--worker", "worker-1"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(Messages(result.out),
              ElementsAre("worker/worker-1 registered", "worker/worker-1 late",
                          "worker/worker-1 started"));
  result = Run({"42", "--worker", "controller"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(Messages(result.out),
              ElementsAre("controller RUNNING", "controller SUCCEEDED"));
  result = Run({"--worker", "worker-7"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--worker: no log of 'worker-7'"));
  EXPECT_THAT(result.err, HasSubstr("did you mean"));
}

TEST_F(LogsCommandTest, NoLogsOrBadFlags) {
  std::filesystem::remove_all(dir_ + "/logs");
  CommandResult result = Run({});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("no daemon logs in"));
  EXPECT_THAT(result.err, HasSubstr("meshctl up"));
  result = Run({"--for", "2"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--for: needs --follow"));
  result = Run({"1", "2"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("unexpected argument '2'"));
}

// A context that collects what --follow streams.
struct Streamed {
  absl::Mutex mu;
  std::string text ABSL_GUARDED_BY(mu);
  std::string Get() {
    absl::MutexLock lock(&mu);
    return text;
  }
};

TEST_F(LogsCommandTest, FollowPrintsNewLinesOfTheJobOnly) {
  Streamed streamed;
  CommandContext context = ContextWithEnv({});
  context.stream_out = [&](absl::string_view text) {
    absl::MutexLock lock(&streamed.mu);
    absl::StrAppend(&streamed.text, text);
  };
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(400));
    Append("worker-0", {Line(10, "worker/worker-0", "job-000042", "more"),
                        Line(11, "worker/worker-0", "job-000041", "other")});
    // Half a line: printed only once it is complete.
    Append("worker-1", {Line(12, "worker/worker-1", "job-000042", "ha")},
           /*end_with_newline=*/false);
    absl::SleepFor(absl::Milliseconds(400));
    EXPECT_THAT(Messages(streamed.Get()), Not(::testing::Contains(
                                              "worker/worker-1 ha")));
    Append("worker-1", {"lf done"});
  });
  const CommandResult result = RunLogsCommand(
      {"42", "--follow", "--for", "1.5", "--dir", dir_}, context);
  writer.join();
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(Messages(streamed.Get()),
              ElementsAre("controller RUNNING", "worker/worker-0 started",
                          "worker/worker-1 started", "controller SUCCEEDED",
                          "worker/worker-0 more", "worker/worker-1 half done"));
}

TEST_F(LogsCommandTest, FollowEndsWhenTheClusterStops) {
  { std::ofstream(dir_ + "/cluster.json") << "{}"; }
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(300));
    std::filesystem::remove(dir_ + "/cluster.json");
  });
  const absl::Time start = absl::Now();
  const CommandResult result = Run({"--follow", "--for", "20"});
  stopper.join();
  EXPECT_EQ(result.exit_code, kExitOk);
  EXPECT_THAT(result.err, HasSubstr("the cluster stopped"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace meshcast::cli
