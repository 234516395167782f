#include "cli/completion_command.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/meshctl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

CommandContext EmptyContext() {
  CommandContext context;
  context.getenv = [](const std::string&) { return std::nullopt; };
  return context;
}

TEST(CompletionCommandTest, ScriptComesFromTheTables) {
  const CommandResult result =
      RunMeshctl({"completion", "bash"}, EmptyContext());
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  const std::string& script = result.out;
  EXPECT_THAT(script, HasSubstr("complete -F _meshctl meshctl\n"));
  // Every command, with a flag its FlagSet registers.
  for (const Command& command : MeshctlCommands()) {
    EXPECT_THAT(script, HasSubstr(absl::StrCat("    ", command.name, ")\n")))
        << command.name;
  }
  EXPECT_THAT(script, HasSubstr("--src-spec"));
  EXPECT_THAT(script, HasSubstr("--tls_ca"));
  EXPECT_THAT(script, HasSubstr("\"get -o\") COMPREPLY=($(compgen -W "
                                "\"table wide json yaml\""));
  EXPECT_THAT(script, HasSubstr("\"submit -f\") COMPREPLY=($(compgen -f "));
  EXPECT_THAT(script, HasSubstr("\"submit --verify\") COMPREPLY=($(compgen "
                                "-W \"full sample off checksum\""));

  const CommandResult zsh = RunMeshctl({"completion", "zsh"}, EmptyContext());
  ASSERT_EQ(zsh.exit_code, kExitOk);
  EXPECT_THAT(zsh.out, StartsWith("#compdef meshctl\n"));
  EXPECT_THAT(zsh.out, HasSubstr("bashcompinit"));
  EXPECT_THAT(zsh.out, HasSubstr(script));

  CommandResult bad = RunMeshctl({"completion", "fish"}, EmptyContext());
  EXPECT_EQ(bad.exit_code, kExitUsage);
  EXPECT_EQ(bad.err,
            "meshctl completion: unknown shell 'fish'; allowed: bash, zsh\n");
  bad = RunMeshctl({"completion"}, EmptyContext());
  EXPECT_EQ(bad.exit_code, kExitUsage);
  EXPECT_THAT(bad.err, HasSubstr("missing shell"));
}

// What bash completes for `words` (the cursor on the last one), with the
// script of the real binary loaded as a user would.
std::string Complete(const std::vector<std::string>& words) {
  std::string array;
  for (const std::string& word : words) {
    absl::StrAppend(&array, " '", word, "'");
  }
  const std::string script = ::testing::TempDir() + "/meshctl_complete.sh";
  std::ofstream(script) << "set -e\n"
                        << "source <(\"" << MESHCTL_PATH
                        << "\" completion bash)\n"
                        << "complete -p meshctl >/dev/null\n"
                        << "COMP_WORDS=(" << array << ")\n"
                        << "COMP_CWORD=" << words.size() - 1 << "\n"
                        << "_meshctl\n"
                        << "echo \"${COMPREPLY[*]}\"\n";
  FILE* pipe = popen(absl::StrCat("bash ", script, " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    out.append(buffer, n);
  const int status = pclose(pipe);
  std::remove(script.c_str());
  if (status != 0) return absl::StrCat("bash failed: ", out);
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

TEST(CompletionCommandTest, BashCompletes) {
  EXPECT_EQ(Complete({"meshctl", "g"}), "get");
  EXPECT_EQ(Complete({"meshctl", "ca"}), "cancel calibrate");
  EXPECT_EQ(Complete({"meshctl", "comp"}), "completion");
  EXPECT_EQ(Complete({"meshctl", "--vers"}), "--version");
  EXPECT_EQ(Complete({"meshctl", "get", "--time"}), "--timeline");
  EXPECT_EQ(Complete({"meshctl", "list", "-o", ""}), "table wide json yaml");
  EXPECT_EQ(Complete({"meshctl", "list", "--output", "y"}), "yaml");
  EXPECT_EQ(Complete({"meshctl", "submit", "c"}), "collective");
  EXPECT_EQ(Complete({"meshctl", "submit", "--src-sp"}), "--src-spec");
  EXPECT_EQ(Complete({"meshctl", "plan", "--strat"}), "--strategy");
  EXPECT_EQ(Complete({"meshctl", "completion", ""}), "bash zsh");
  EXPECT_EQ(Complete({"meshctl", "help", "wa"}), "watch");
  // Flags before the command: their values are not taken for it.
  EXPECT_EQ(Complete({"meshctl", "-o", "json", "cluster", "--ou"}), "--output");
  // A free-form value gets nothing.
  EXPECT_EQ(Complete({"meshctl", "submit", "--shape", ""}), "");
}

}  // namespace
}  // namespace meshcast::cli
