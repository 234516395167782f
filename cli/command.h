// CommandResult, CommandContext and Command: the shape every meshctl
// subcommand shares.
//
// A subcommand is a plain function from its arguments (after the subcommand
// name) and a CommandContext to a CommandResult, so tests can run it
// in-process with a fake environment, and main() only prints the result and
// exits with its code:
//
//   CommandResult result = RunPlanCommand({"--cluster", "5x4", ...});
//   std::cout << result.out; std::cerr << result.err;
//   return result.exit_code;
//
// Long-running commands (watch, submit --wait, up) also stream lines through
// the context while they run; what they return in `out` comes after.
//
// Exit codes (the same for every subcommand, listed in `meshctl --help`):
//   0 success; 1 failure while running (a job that did not succeed, a daemon
//   that died, an internal error); 2 bad input (flags, specs, unknown job
//   id, a mesh the cluster cannot hold); 3 the controller is unreachable.
//
// Thread safety: plain value types.
#ifndef MESHCAST_CLI_COMMAND_H_
#define MESHCAST_CLI_COMMAND_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace meshcast::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;

struct CommandResult {
  int exit_code = kExitOk;
  std::string out;  // for stdout
  std::string err;  // for stderr, one line per problem
};

// What a command may learn from or send to the world besides its arguments;
// tests replace each member.
struct CommandContext {
  // Looks up an environment variable; nullopt when unset.
  std::function<std::optional<std::string>(const std::string& name)> getenv;
  // Absolute path of the running meshctl binary; `up` looks for the daemons
  // next to it. Empty when unknown.
  std::string program_path;
  // Streams progress to stdout while a command runs.
  std::function<void(absl::string_view text)> stream_out;

  std::optional<std::string> Env(const std::string& name) const {
    return getenv ? getenv(name) : std::nullopt;
  }
  void Stream(absl::string_view text) const {
    if (stream_out) stream_out(text);
  }
};

// The context of a real process: its environment, /proc/self/exe and
// stdout (flushed after every write).
CommandContext ProcessContext();

// A context whose environment is exactly `env` and nothing else (tests, or
// a program that runs meshctl commands in-process).
CommandContext ContextWithEnv(std::map<std::string, std::string> env);

struct Command {
  std::string name;     // e.g. "plan"
  std::string summary;  // one line for `meshctl --help`
  std::function<CommandResult(const std::vector<std::string>& args,
                              const CommandContext& context)>
      run;
  // The words the command takes as its argument (submit's kinds), for
  // `meshctl completion`; its flags come from `run({"--help=flags"})`.
  std::vector<std::string> words = {};
  // Whether its argument is a JOB (completed with the listed job ids).
  bool takes_job = false;
};

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_COMMAND_H_
