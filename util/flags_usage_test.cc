#include "util/flags_usage.h"

#include "gtest/gtest.h"

namespace meshcast {
namespace {

TEST(IsMeshcastFlagsFileTest, AcceptsTheProjectsDirectories) {
  EXPECT_TRUE(IsMeshcastFlagsFile("/work/main/controller/main.cc"));
  EXPECT_TRUE(IsMeshcastFlagsFile("/src/worker/main.cc"));
  EXPECT_TRUE(IsMeshcastFlagsFile("security/tls_flags.cc"));
  EXPECT_TRUE(IsMeshcastFlagsFile("cli/flags.cc"));
}

TEST(IsMeshcastFlagsFileTest, RejectsLibrariesAndLookalikes) {
  EXPECT_FALSE(IsMeshcastFlagsFile("/usr/include/absl/flags/parse.cc"));
  EXPECT_FALSE(IsMeshcastFlagsFile("/build/absl/flags/internal/usage.cc"));
  // A component must match whole: "controllers" is not "controller".
  EXPECT_FALSE(IsMeshcastFlagsFile("/src/controllers/main.cc"));
  EXPECT_FALSE(IsMeshcastFlagsFile("main.cc"));
  EXPECT_FALSE(IsMeshcastFlagsFile(""));
}

}  // namespace
}  // namespace meshcast
