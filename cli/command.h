// CommandResult and Command: the shape every meshctl subcommand shares.
//
// A subcommand is a plain function from its arguments (after the subcommand
// name) to a CommandResult, so tests can run it in-process and main() only
// prints the result and exits with its code:
//
//   CommandResult result = RunPlanCommand({"--cluster", "5x4", ...});
//   std::cout << result.out; std::cerr << result.err;
//   return result.exit_code;
//
// Exit codes: 0 success, 1 failure while running, 2 bad input (usage).
//
// Thread safety: plain value types.
#ifndef MESHCAST_CLI_COMMAND_H_
#define MESHCAST_CLI_COMMAND_H_

#include <functional>
#include <string>
#include <vector>

namespace meshcast::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

struct CommandResult {
  int exit_code = kExitOk;
  std::string out;  // for stdout
  std::string err;  // for stderr, one line per problem
};

struct Command {
  std::string name;     // e.g. "plan"
  std::string summary;  // one line for `meshctl --help`
  std::function<CommandResult(const std::vector<std::string>& args)> run;
};

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_COMMAND_H_
