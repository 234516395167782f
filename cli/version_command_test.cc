#include "cli/version_command.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/fake_controller.h"
#include "cli/meshctl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace meshcast::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A port on 127.0.0.1 that nothing listens on.
int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

class VersionCommandTest : public ::testing::Test {
 protected:
  VersionCommandTest() {
    context_.getenv = [](const std::string&) { return std::nullopt; };
  }
  FakeController fake_;
  CommandContext context_;
};

TEST_F(VersionCommandTest, ClientAndControllerVersions) {
  EXPECT_STREQ(MeshctlVersion(), MESHCAST_TEST_VERSION);
  fake_.SetVersion("9.8.7");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"version", "--controller", fake_.address()},
           {"--version", "--controller", fake_.address()},
           {"--controller", fake_.address(), "--version"}}) {
    const CommandResult result = RunMeshctl(args, context_);
    ASSERT_EQ(result.exit_code, kExitOk) << result.err;
    EXPECT_EQ(result.out,
              absl::StrCat("meshctl ", MESHCAST_TEST_VERSION,
                           "\ncontroller 9.8.7 at ", fake_.address(), "\n"));
    EXPECT_EQ(result.err, "");
  }
  const CommandResult json = RunVersionCommand(
      {"-o", "json", "--controller", fake_.address()}, context_);
  ASSERT_EQ(json.exit_code, kExitOk) << json.err;
  const nlohmann::json parsed = nlohmann::json::parse(json.out);
  EXPECT_EQ(parsed["client"]["version"], MESHCAST_TEST_VERSION);
  EXPECT_EQ(parsed["controller"]["version"], "9.8.7");
  EXPECT_EQ(parsed["controller"]["reachable"], true);
  EXPECT_EQ(parsed["controller"]["address"], fake_.address());
  const CommandResult yaml = RunVersionCommand(
      {"-o", "yaml", "--controller", fake_.address()}, context_);
  EXPECT_THAT(yaml.out, HasSubstr("controller:\n  address: "));
  EXPECT_THAT(yaml.out, HasSubstr("  version: 9.8.7\n"));
}

TEST_F(VersionCommandTest, AUserTokenGetsTheVersionThroughItsJobList) {
  fake_.SetVersion("9.8.7");
  fake_.SetClusterAdminOnly(true);
  const CommandResult result =
      RunVersionCommand({"--controller", fake_.address()}, context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_EQ(result.out,
            absl::StrCat("meshctl ", MESHCAST_TEST_VERSION,
                         "\ncontroller 9.8.7 at ", fake_.address(), "\n"));
}

TEST_F(VersionCommandTest, OlderController) {
  const CommandResult result =
      RunVersionCommand({"--controller", fake_.address()}, context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out,
              HasSubstr(absl::StrCat("controller at ", fake_.address(),
                                     ": version unknown")));
}

TEST_F(VersionCommandTest, UnreachableControllerIsNotAnError) {
  const std::string address = absl::StrCat("127.0.0.1:", ClosedPort());
  const CommandResult result = RunMeshctl(
      {"--version", "--controller", address, "--connect-timeout", "0.2"},
      context_);
  EXPECT_EQ(result.exit_code, kExitOk);
  EXPECT_THAT(result.out, StartsWith(absl::StrCat(
                              "meshctl ", MESHCAST_TEST_VERSION, "\n")));
  EXPECT_THAT(result.out, HasSubstr("controller: unreachable ("));
  EXPECT_THAT(result.out, HasSubstr(address));
  const CommandResult json = RunVersionCommand(
      {"-o", "json", "--controller", address, "--connect-timeout", "0.2"},
      context_);
  EXPECT_EQ(json.exit_code, kExitOk);
  const nlohmann::json parsed = nlohmann::json::parse(json.out);
  EXPECT_EQ(parsed["controller"]["reachable"], false);
  EXPECT_TRUE(parsed["controller"]["error"].is_string());
  EXPECT_FALSE(parsed["controller"].contains("version"));
  // Bad flags are still bad input.
  EXPECT_EQ(RunVersionCommand({"--bogus"}, context_).exit_code, kExitUsage);
  EXPECT_EQ(RunVersionCommand({"extra"}, context_).exit_code, kExitUsage);
}

}  // namespace
}  // namespace meshcast::cli
