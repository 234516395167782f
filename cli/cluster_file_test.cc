#include "cli/cluster_file.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "cli/command_errors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;


std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/cluster_file_test_" +
                          std::to_string(getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

ClusterFile Sample(const std::string& dir) {
  ClusterFile file;
  file.controller = "127.0.0.1:4321";
  file.dir = dir;
  file.database = dir + "/meshcast.db";
  file.workers = 2;
  file.devices_per_worker = 4;
  file.started_unix = 1.5e9;
  file.processes.push_back(ClusterProcess{"controller",
                                          "controller",
                                          11,
                                          dir + "/logs/controller.log",
                                          "/bin/meshcast-controller",
                                          {"--listen=127.0.0.1:4321"}});
  file.processes.push_back(ClusterProcess{"worker",
                                          "worker-0",
                                          12,
                                          dir + "/logs/worker-0.log",
                                          "/bin/meshcast-worker",
                                          {"--name=worker-0"}});
  return file;
}

TEST(ClusterFileTest, RoundTrip) {
  const std::string dir = FreshDir("roundtrip");
  EXPECT_TRUE(absl::IsNotFound(ReadClusterFile(dir).status()));
  ASSERT_TRUE(WriteClusterFile(dir, Sample(dir)).ok());
  absl::StatusOr<ClusterFile> file = ReadClusterFile(dir);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->controller, "127.0.0.1:4321");
  EXPECT_EQ(file->workers, 2);
  EXPECT_EQ(file->devices_per_worker, 4);
  ASSERT_EQ(file->processes.size(), 2u);
  EXPECT_EQ(file->processes[1].name, "worker-0");
  EXPECT_EQ(file->processes[1].pid, 12);
  EXPECT_THAT(file->processes[0].args, ElementsAre("--listen=127.0.0.1:4321"));
  ASSERT_TRUE(RemoveClusterFile(dir).ok());
  EXPECT_TRUE(absl::IsNotFound(ReadClusterFile(dir).status()));
}

TEST(ClusterFileTest, MonitoringFieldsRoundTrip) {
  const std::string dir = FreshDir("monitoring");
  ClusterFile sample = Sample(dir);
  sample.devices = "cuda:0x4";
  sample.prometheus = "http://127.0.0.1:9090";
  sample.processes[0].metrics = "127.0.0.1:40001";
  sample.processes.push_back(ClusterProcess{"prometheus",
                                            "prometheus",
                                            13,
                                            dir + "/logs/prometheus.log",
                                            "/usr/bin/prometheus",
                                            {"--config.file=x"}});
  const std::string json = ClusterFileToJson(sample);
  absl::StatusOr<ClusterFile> file = ClusterFileFromJson(json);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->devices, "cuda:0x4");
  EXPECT_EQ(file->prometheus, "http://127.0.0.1:9090");
  ASSERT_EQ(file->processes.size(), 3u);
  EXPECT_EQ(file->processes[0].metrics, "127.0.0.1:40001");
  EXPECT_EQ(file->processes[1].metrics, "");
  EXPECT_EQ(file->processes[2].role, "prometheus");

  // Without monitoring the keys are left out, and a record written before
  // they existed still reads.
  const std::string plain = ClusterFileToJson(Sample(dir));
  EXPECT_THAT(plain, Not(HasSubstr("prometheus")));
  EXPECT_THAT(plain, Not(HasSubstr("metrics")));
  file = ClusterFileFromJson(
      R"({"controller": "h:1", "workers": 2, "devices_per_worker": 4,
          "processes": [{"role": "worker", "name": "worker-0", "pid": 5}]})");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->devices, "");
  EXPECT_EQ(file->prometheus, "");
  EXPECT_EQ(file->processes[0].metrics, "");
}

TEST(ClusterFileTest, BadFilesAreErrorsNotCrashes) {
  EXPECT_FALSE(ClusterFileFromJson("not json").ok());
  EXPECT_FALSE(ClusterFileFromJson("{\"workers\": 2}").ok());
  // Wrong types are ignored rather than thrown.
  absl::StatusOr<ClusterFile> file = ClusterFileFromJson(
      R"({"controller": "h:1", "workers": "two", "processes": [3, {"pid": "x"}]})");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->workers, 0);
  ASSERT_EQ(file->processes.size(), 1u);
  EXPECT_EQ(file->processes[0].pid, 0);
}

TEST(ClusterFileTest, LocalClusterDirPrecedence) {
  EXPECT_EQ(LocalClusterDir("/flag", ContextWithEnv({{"MESHCAST_HOME", "/home"}})),
            "/flag");
  EXPECT_EQ(LocalClusterDir("", ContextWithEnv({{"MESHCAST_HOME", "/home"}})),
            "/home");
  EXPECT_EQ(LocalClusterDir("", ContextWithEnv({})), ".meshcast");
}

TEST(ClusterFileTest, ControllerAddressPrecedence) {
  const std::string dir = FreshDir("address");
  ASSERT_TRUE(WriteClusterFile(dir, Sample(dir)).ok());
  const CommandContext env =
      ContextWithEnv({{"MESHCAST_CONTROLLER", "env:1"}, {"MESHCAST_HOME", dir}});
  // --controller wins.
  EXPECT_EQ(ResolveControllerAddress("flag:1", dir, env).value_or(""),
            "flag:1");
  // Then the environment's controller.
  EXPECT_EQ(ResolveControllerAddress("", "", env).value_or(""), "env:1");
  // An explicit --dir names the cluster meant, over the environment.
  EXPECT_EQ(ResolveControllerAddress("", dir, env).value_or(""),
            "127.0.0.1:4321");
  // MESHCAST_HOME's cluster.json.
  EXPECT_EQ(ResolveControllerAddress("", "", ContextWithEnv({{"MESHCAST_HOME", dir}}))
                .value_or(""),
            "127.0.0.1:4321");
}

// A directory the user named without a cluster in it is an error, never
// the default address (where another cluster's controller may listen).
TEST(ClusterFileTest, NamedDirectoryWithoutClusterIsAnError) {
  const std::string empty_dir = FreshDir("address_empty");
  const std::string missing = empty_dir + "/does-not-exist";
  const std::string not_a_dir = empty_dir + "/plain-file";
  { std::ofstream(not_a_dir) << "x"; }
  const CommandContext env = ContextWithEnv({{"MESHCAST_CONTROLLER", "env:1"}});
  for (const std::string& dir : {empty_dir, missing, not_a_dir}) {
    SCOPED_TRACE(dir);
    absl::StatusOr<std::string> address =
        ResolveControllerAddress("", dir, env);
    ASSERT_FALSE(address.ok()) << *address;
    EXPECT_TRUE(absl::IsNotFound(address.status())) << address.status();
    EXPECT_EQ(ExitCodeForStatus(address.status()), kExitUsage);
    EXPECT_THAT(address.status().message(),
                HasSubstr("no local cluster recorded in " + dir));
    EXPECT_THAT(address.status().message(),
                HasSubstr("'meshctl up --dir " + dir + "'"));
    // The same through $MESHCAST_HOME.
    EXPECT_FALSE(
        ResolveControllerAddress("", "", ContextWithEnv({{"MESHCAST_HOME", dir}}))
            .ok());
  }
  // A stopped cluster: `down` removed cluster.json.
  const std::string stopped = FreshDir("address_stopped");
  ASSERT_TRUE(WriteClusterFile(stopped, Sample(stopped)).ok());
  ASSERT_TRUE(RemoveClusterFile(stopped).ok());
  EXPECT_FALSE(ResolveControllerAddress("", stopped, ContextWithEnv({})).ok());
  // --controller still needs no directory.
  EXPECT_EQ(ResolveControllerAddress("h:1", missing, ContextWithEnv({})).value_or(""),
            "h:1");
}

TEST(ClusterFileTest, ImplicitDirectoryFallsBackToDefaultAddress) {
  // ./.meshcast, relative to the working directory: run in an empty one.
  const std::string cwd = FreshDir("address_cwd");
  const std::filesystem::path previous = std::filesystem::current_path();
  std::filesystem::current_path(cwd);
  const absl::StatusOr<std::string> fallback =
      ResolveControllerAddress("", "", ContextWithEnv({}));
  // A record that cannot be read is reported, not skipped.
  std::filesystem::create_directories(std::string(kDefaultClusterDir));
  { std::ofstream(ClusterFilePath(kDefaultClusterDir)) << "not json"; }
  const absl::StatusOr<std::string> corrupt =
      ResolveControllerAddress("", "", ContextWithEnv({}));
  std::filesystem::current_path(previous);
  EXPECT_EQ(fallback.value_or(""), kDefaultControllerAddress);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_THAT(corrupt.status().message(), HasSubstr("cluster.json"));
}

TEST(CommandErrorsTest, ExitCodesAndOneLine) {
  EXPECT_EQ(ExitCodeForStatus(absl::OkStatus()), kExitOk);
  EXPECT_EQ(ExitCodeForStatus(absl::InvalidArgumentError("x")), kExitUsage);
  EXPECT_EQ(ExitCodeForStatus(absl::NotFoundError("x")), kExitUsage);
  EXPECT_EQ(ExitCodeForStatus(absl::UnavailableError("x")), kExitUnreachable);
  EXPECT_EQ(ExitCodeForStatus(absl::FailedPreconditionError("x")),
            kExitFailure);
  EXPECT_EQ(ExitCodeForStatus(absl::InternalError("x")), kExitFailure);
  const CommandResult result =
      FailWithStatus("meshctl get", absl::NotFoundError("job j not\nfound"));
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_EQ(result.err, "meshctl get: job j not; found\n");
  EXPECT_TRUE(result.out.empty());
}

}  // namespace
}  // namespace meshcast::cli
