#include "cli/daemon_process.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/daemon_process_test_" +
                          std::to_string(getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return std::filesystem::canonical(dir).string();
}

void WriteScript(const std::string& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  chmod(path.c_str(), 0755);
}

CommandContext ContextFor(const std::string& program, const std::string& path) {
  CommandContext context;
  context.program_path = program;
  context.getenv =
      [path](const std::string& name) -> std::optional<std::string> {
    if (name == "PATH") return path;
    return std::nullopt;
  };
  return context;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

TEST(DaemonProcessTest, FindsBinariesInOrder) {
  const std::string root = FreshDir("find");
  std::filesystem::create_directories(root + "/build/cli");
  std::filesystem::create_directories(root + "/build/controller");
  std::filesystem::create_directories(root + "/bin");
  const std::string meshctl = root + "/build/cli/meshctl";
  const CommandContext context =
      ContextFor(meshctl, "/nonexistent:" + root + "/bin");

  EXPECT_TRUE(absl::IsNotFound(
      FindDaemonBinary("meshcast-controller", "controller", "", context)
          .status()));
  // $PATH.
  WriteScript(root + "/bin/meshcast-controller", "exit 0");
  EXPECT_EQ(*FindDaemonBinary("meshcast-controller", "controller", "", context),
            root + "/bin/meshcast-controller");
  // Beside meshctl beats $PATH.
  WriteScript(root + "/build/cli/meshcast-controller", "exit 0");
  EXPECT_EQ(*FindDaemonBinary("meshcast-controller", "controller", "", context),
            root + "/build/cli/meshcast-controller");
  // The build tree beats both.
  WriteScript(root + "/build/controller/meshcast-controller", "exit 0");
  EXPECT_EQ(*FindDaemonBinary("meshcast-controller", "controller", "", context),
            root + "/build/controller/meshcast-controller");
  // --bin-dir is the only place looked at when given.
  EXPECT_EQ(*FindDaemonBinary("meshcast-controller", "controller",
                              root + "/bin", context),
            root + "/bin/meshcast-controller");
  const absl::Status missing =
      FindDaemonBinary("meshcast-worker", "worker", root + "/bin", context)
          .status();
  EXPECT_THAT(missing.message(), HasSubstr("--bin-dir: no executable"));
  // A file that is not executable does not count.
  std::ofstream(root + "/bin/meshcast-worker") << "data";
  EXPECT_FALSE(
      FindDaemonBinary("meshcast-worker", "worker", root + "/bin", context)
          .ok());
}

TEST(DaemonProcessTest, SpawnCheckAndStop) {
  const std::string dir = FreshDir("spawn");
  const std::string log = dir + "/daemon.log";
  absl::StatusOr<int> pid =
      SpawnDetached("/bin/sh",
                    {"-c",
                     "trap 'exit 0' TERM; echo started $0; "
                     "while true; do sleep 0.05; done"},
                    log);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_TRUE(CheckProcess(*pid).alive);
  // The kernel fills in the new command line a moment after exec starts.
  const absl::Time exec_deadline = absl::Now() + absl::Seconds(5);
  while (!IsProcessOf(*pid, "/bin/sh") && absl::Now() < exec_deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_TRUE(IsProcessOf(*pid, "/bin/sh"));
  EXPECT_FALSE(IsProcessOf(*pid, "/bin/other"));
  // Its own session.
  EXPECT_EQ(getsid(*pid), *pid);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (LastLogLine(log).empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(LastLogLine(log), "started /bin/sh");
  EXPECT_TRUE(StopProcesses({*pid}, absl::Seconds(5)).empty());
  EXPECT_FALSE(CheckProcess(*pid).alive);
}

TEST(DaemonProcessTest, SigkillAfterGrace) {
  const std::string dir = FreshDir("stubborn");
  absl::StatusOr<int> pid = SpawnDetached(
      "/bin/sh",
      {"-c", "trap '' TERM; echo ready; while true; do sleep 0.05; done"},
      dir + "/log");
  ASSERT_TRUE(pid.ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (LastLogLine(dir + "/log") != "ready" && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const std::vector<int> killed =
      StopProcesses({*pid}, absl::Milliseconds(200));
  EXPECT_EQ(killed, std::vector<int>{*pid});
  EXPECT_FALSE(CheckProcess(*pid).alive);
}

TEST(DaemonProcessTest, ReportsHowAChildEnded) {
  const std::string dir = FreshDir("exit");
  absl::StatusOr<int> pid = SpawnDetached(
      "/bin/sh", {"-c", "echo bad flag >&2; exit 3"}, dir + "/log");
  ASSERT_TRUE(pid.ok());
  ProcessStatus status;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  do {
    status = CheckProcess(*pid);
  } while (status.alive && absl::Now() < deadline);
  EXPECT_FALSE(status.alive);
  EXPECT_EQ(status.exit, "exited with status 3");
  EXPECT_EQ(LastLogLine(dir + "/log"), "bad flag");
  EXPECT_THAT(ReadFile(dir + "/log"), HasSubstr("bad flag"));

  EXPECT_FALSE(SpawnDetached(dir + "/missing", {}, dir + "/log").ok());
  EXPECT_FALSE(SpawnDetached("/bin/sh", {}, dir + "/no/such/dir/log").ok());
}

}  // namespace
}  // namespace meshcast::cli
