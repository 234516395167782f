// `meshctl up` / `down` with stand-in daemons (shell scripts): startup
// failures and bookkeeping. The real daemons are exercised by
// tests/cluster.
#include "cli/cluster_commands.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/cluster_file.h"
#include "cli/daemon_process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class ClusterCommandsTest : public ::testing::Test {
 protected:
  ClusterCommandsTest() {
    root_ = ::testing::TempDir() + "/cluster_commands_test_" +
            std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ + "/bin");
    context_.getenv = [](const std::string&) { return std::nullopt; };
  }

  void Script(const std::string& name, const std::string& body) {
    const std::string path = root_ + "/bin/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    chmod(path.c_str(), 0755);
  }

  CommandResult Up(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "--dir", root_ + "/cluster", "--bin-dir", root_ + "/bin", "--timeout",
        "3",     "--workers",        "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunUpCommand(args, context_);
  }

  std::string root_;
  CommandContext context_;
};

TEST_F(ClusterCommandsTest, ControllerThatDiesPointsAtItsLog) {
  Script("meshcast-controller",
         "echo \"meshcast-controller: cannot open database\" >&2; exit 1");
  Script("meshcast-worker", "exec sleep 30");
  const CommandResult result = Up();
  EXPECT_EQ(result.exit_code, kExitFailure);
  EXPECT_THAT(result.err, StartsWith("meshctl up: meshcast-controller "
                                     "controller exited with status 1 during "
                                     "startup; see "));
  EXPECT_THAT(result.err, HasSubstr("/cluster/logs/controller.log"));
  EXPECT_THAT(result.err, HasSubstr("cannot open database"));
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1);
  // Nothing is left recorded.
  EXPECT_FALSE(ReadClusterFile(root_ + "/cluster").ok());
}

TEST_F(ClusterCommandsTest, WorkerThatDiesIsNamedAndEverythingStops) {
  // A controller that writes its port file and then idles (it never answers
  // gRPC, so the workers never register).
  Script("meshcast-controller",
         "for a in \"$@\"; do case $a in --port_file=*) "
         "echo 4242 > \"${a#--port_file=}\";; esac; done; exec sleep 30");
  Script("meshcast-worker",
         "case \"$*\" in *worker-1*) echo 'bad --devices' >&2; exit 2;; esac; "
         "exec sleep 30");
  const CommandResult result = Up();
  EXPECT_EQ(result.exit_code, kExitFailure);
  EXPECT_THAT(result.err, StartsWith("meshctl up: meshcast-worker worker-1 "
                                     "exited with status 2 during startup"));
  EXPECT_THAT(result.err, HasSubstr("worker-1.log (last line: bad --devices)"));
  EXPECT_FALSE(ReadClusterFile(root_ + "/cluster").ok());
}

TEST_F(ClusterCommandsTest, RegistrationTimeoutListsMissingWorkers) {
  Script("meshcast-controller",
         "for a in \"$@\"; do case $a in --port_file=*) "
         "echo 4242 > \"${a#--port_file=}\";; esac; done; exec sleep 30");
  Script("meshcast-worker", "exec sleep 30");
  const CommandResult result = Up({"--timeout", "1"});
  EXPECT_EQ(result.exit_code, kExitFailure);
  EXPECT_THAT(result.err,
              HasSubstr("timed out waiting for workers to register (missing: "
                        "worker-0, worker-1)"));
}

TEST_F(ClusterCommandsTest, BadFlags) {
  CommandResult result = Up({"--workers", "0"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_EQ(result.err, "meshctl up: --workers: must be 1..256, got 0\n");
  result = Up({"--inter-gbps", "-1"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("meshctl up: --inter-gbps: must be > 0"));
  result = Up();  // no binaries in --bin-dir
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err,
              HasSubstr("--bin-dir: no executable meshcast-controller"));
}

TEST_F(ClusterCommandsTest, DownWithoutAClusterAndWithStaleRecord) {
  CommandResult result =
      RunDownCommand({"--dir", root_ + "/nothing"}, context_);
  EXPECT_EQ(result.exit_code, kExitFailure);
  EXPECT_THAT(result.err, HasSubstr("no local cluster recorded in"));

  // A record whose processes are gone (or are other programs) is cleaned
  // up without signalling anything.
  std::filesystem::create_directories(root_ + "/stale");
  ClusterFile file;
  file.controller = "127.0.0.1:1";
  absl::StatusOr<int> bystander =
      SpawnDetached("/bin/sh", {"-c", "exec sleep 30"}, root_ + "/by.log");
  ASSERT_TRUE(bystander.ok());
  file.processes.push_back(ClusterProcess{
      "controller", "controller", *bystander, "", "/bin/other", {}});
  ASSERT_TRUE(WriteClusterFile(root_ + "/stale", file).ok());
  result = RunDownCommand({"--dir", root_ + "/stale"}, context_);
  EXPECT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("1 had already exited"));
  EXPECT_TRUE(CheckProcess(*bystander).alive);
  EXPECT_FALSE(ReadClusterFile(root_ + "/stale").ok());
  StopProcesses({*bystander}, absl::Seconds(2));
}

TEST_F(ClusterCommandsTest, DownStopsWhatUpRecorded) {
  std::filesystem::create_directories(root_ + "/run");
  ClusterFile file;
  file.controller = "127.0.0.1:1";
  file.dir = root_ + "/run";
  for (const char* name : {"controller", "worker-0"}) {
    absl::StatusOr<int> pid =
        SpawnDetached("/bin/sh", {"-c", "exec sleep 30"}, root_ + "/x.log");
    ASSERT_TRUE(pid.ok());
    file.processes.push_back(ClusterProcess{
        name == std::string("controller") ? "controller" : "worker",
        name,
        *pid,
        "",
        "/bin/sh",
        {}});
  }
  // `sleep` replaces the shell, so argv[0] becomes "sleep": record that,
  // once both have got there.
  for (ClusterProcess& process : file.processes) {
    process.binary = "sleep";
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (!IsProcessOf(process.pid, "sleep") && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  ASSERT_TRUE(WriteClusterFile(root_ + "/run", file).ok());
  const CommandResult result =
      RunDownCommand({"--dir", root_ + "/run"}, context_);
  EXPECT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("1 controller and 1 worker process(es)"));
  for (const ClusterProcess& process : file.processes) {
    EXPECT_FALSE(CheckProcess(process.pid).alive);
  }
}

}  // namespace
}  // namespace meshcast::cli
