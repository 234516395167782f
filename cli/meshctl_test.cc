#include "cli/meshctl.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace meshcast::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(MeshctlTest, HelpListsCommands) {
  const CommandResult result = RunMeshctl({"--help"});
  EXPECT_EQ(result.exit_code, kExitOk);
  EXPECT_THAT(result.out, HasSubstr("usage: meshctl COMMAND"));
  for (const Command& command : MeshctlCommands()) {
    EXPECT_THAT(result.out, HasSubstr(command.name));
    EXPECT_THAT(result.out, HasSubstr(command.summary));
  }
  EXPECT_THAT(result.out, HasSubstr("plan"));
}

// The top-level help names the habits every command shares.
TEST(MeshctlTest, HelpNamesTheSharedHabits) {
  const CommandResult result = RunMeshctl({"--help"});
  EXPECT_THAT(result.out, HasSubstr("-o wide"));
  EXPECT_THAT(result.out, HasSubstr("-o yaml"));
  EXPECT_THAT(result.out, HasSubstr("its number\n(42, job-42)"));
  EXPECT_THAT(result.out, HasSubstr("did you mean"));
  EXPECT_THAT(result.out, HasSubstr("source <(meshctl completion bash)"));
  EXPECT_THAT(result.out, HasSubstr("  version "));
  EXPECT_THAT(result.out, HasSubstr("  completion "));
}

TEST(MeshctlTest, DispatchesAndHelpPerCommand) {
  CommandResult result = RunMeshctl({"help", "plan"});
  EXPECT_EQ(result.exit_code, kExitOk);
  EXPECT_THAT(result.out, HasSubstr("usage: meshctl plan"));
  result = RunMeshctl({"plan", "--help"});
  EXPECT_EQ(result.exit_code, kExitOk);
  EXPECT_THAT(result.out, HasSubstr("--src-spec"));
  result = RunMeshctl({"plan", "--cluster", "5x4"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("meshctl plan: --shape: required"));
  result = RunMeshctl({"--version"});
  EXPECT_EQ(result.exit_code, kExitOk);
  EXPECT_THAT(result.out, StartsWith("meshctl "));
}

// `meshctl --controller H:P cluster` is how other CLIs take global flags:
// flags before the command go to the command.
TEST(MeshctlTest, FlagsBeforeTheCommandGoToIt) {
  CommandResult result = RunMeshctl({"--cluster", "5x4", "plan"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("meshctl plan: --shape: required"));
  const std::vector<std::string> tail = {
      "--shape",    "64x64", "--dtype",    "int32", "--src-mesh", "1x2@0",
      "--src-spec", "S0R",   "--dst-mesh", "1x2@1", "--dst-spec", "RS0"};
  std::vector<std::string> before = {"--output", "json", "--cluster", "2x2",
                                     "plan"};
  before.insert(before.end(), tail.begin(), tail.end());
  std::vector<std::string> after = {"plan", "--output", "json", "--cluster",
                                    "2x2"};
  after.insert(after.end(), tail.begin(), tail.end());
  result = RunMeshctl(before);
  EXPECT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_EQ(result.out, RunMeshctl(after).out);
  // The shared client flags' values are never taken for the command.
  result = RunMeshctl({"--dir", "cluster", "down"});
  EXPECT_THAT(result.err, HasSubstr("meshctl down: "));
  EXPECT_THAT(result.err, HasSubstr("no local cluster recorded in cluster"));
  // Without any command it is still an unknown command.
  result = RunMeshctl({"--controller", "localhost:1"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("unknown command '--controller'"));
}

TEST(MeshctlTest, UnknownOrMissingCommand) {
  CommandResult result = RunMeshctl({"plna"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("unknown command 'plna'; allowed: up, "
                                    "down, cluster, submit, get, trace, list, "
                                    "watch, cancel, plan, calibrate"));
  EXPECT_THAT(result.err, HasSubstr("; did you mean plan? (see 'meshctl "
                                    "--help')\n"));
  result = RunMeshctl({"sbumit"});
  EXPECT_THAT(result.err, HasSubstr("did you mean submit?"));
  result = RunMeshctl({"frobnicate"});
  EXPECT_THAT(result.err, Not(HasSubstr("did you mean")));
  result = RunMeshctl({});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("missing COMMAND"));
  result = RunMeshctl({"help", "nope"});
  EXPECT_EQ(result.exit_code, kExitUsage);
}

// Runs the real binary; returns its exit code and fills `out` with stdout
// (stderr is kept in `err`).
int RunBinary(const std::string& args, std::string* out, std::string* err) {
  const std::string err_file = ::testing::TempDir() + "/meshctl_test_stderr_" +
                               std::to_string(getpid()) + ".txt";
  const std::string command =
      std::string(MESHCTL_PATH) + " " + args + " 2>" + err_file;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  out->clear();
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    out->append(buffer, n);
  }
  const int status = pclose(pipe);
  err->clear();
  if (FILE* file = fopen(err_file.c_str(), "r")) {
    while ((n = fread(buffer, 1, sizeof(buffer), file)) > 0) {
      err->append(buffer, n);
    }
    fclose(file);
  }
  std::remove(err_file.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(MeshctlBinaryTest, ExitCodesAndJsonShape) {
  std::string out, err;
  EXPECT_EQ(RunBinary("--help", &out, &err), 0);
  EXPECT_THAT(out, HasSubstr("plan"));
  EXPECT_EQ(RunBinary("plan --help", &out, &err), 0);
  EXPECT_THAT(out, HasSubstr("--dst-spec"));
  EXPECT_EQ(RunBinary("bogus", &out, &err), 2);

  const std::string base =
      "plan --cluster 5x4 --inter-gbps 10 --intra-gbps 1200 "
      "--shape 1024x1024x512 --dtype int32 --src-mesh 2x4@0 "
      "--dst-mesh 2x4@2 --dst-spec S0RR ";
  EXPECT_EQ(RunBinary(base + "--src-spec S0XR", &out, &err), 2);
  EXPECT_TRUE(out.empty());
  EXPECT_THAT(err, StartsWith("meshctl plan: --src-spec: unknown token 'X'"));

  ASSERT_EQ(RunBinary(base + "--src-spec S0RR --output json", &out, &err), 0)
      << err;
  const nlohmann::json plan =
      nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(plan.is_object()) << out;
  EXPECT_TRUE(plan["strategy"].is_string());
  EXPECT_TRUE(plan["predicted_seconds"].is_number());
  EXPECT_TRUE(plan["lower_bound_seconds"].is_number());
  ASSERT_TRUE(plan["transfers"].is_array());
  ASSERT_FALSE(plan["transfers"].empty());
  const auto& transfer = plan["transfers"][0];
  EXPECT_TRUE(transfer["slice"].is_array());
  EXPECT_TRUE(transfer["src_device"].is_number_integer());
  EXPECT_TRUE(transfer["dst_devices"].is_array());
  EXPECT_TRUE(transfer["bytes"].is_number_integer());
  EXPECT_TRUE(transfer["stage"].is_number_integer());
}

}  // namespace
}  // namespace meshcast::cli
