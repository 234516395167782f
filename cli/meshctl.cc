#include "cli/meshctl.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/calibrate_command.h"
#include "cli/cluster_commands.h"
#include "cli/command_errors.h"
#include "cli/completion_command.h"
#include "cli/job_commands.h"
#include "cli/logs_command.h"
#include "cli/plan_command.h"
#include "cli/suggest.h"
#include "cli/version_command.h"

namespace meshcast::cli {
namespace {

std::string TopLevelUsage() {
  std::string out =
      "usage: meshctl COMMAND [flags]   (or meshctl [flags] COMMAND)\n"
      "\n"
      "meshctl is the client of meshcast, the control plane and data plane\n"
      "for the communication of model-parallel deep learning.\n"
      "\n"
      "commands:\n";
  for (const Command& command : MeshctlCommands()) {
    std::string name = absl::StrCat("  ", command.name);
    name.resize(std::max<size_t>(name.size() + 2, 12), ' ');
    absl::StrAppend(&out, name, command.summary, "\n");
  }
  absl::StrAppend(
      &out,
      "\n"
      "quick start:\n"
      "  meshctl up --workers 4 --devices-per-worker 4\n"
      "  meshctl submit reshard --shape 64x64x256 --dtype int32 \\\n"
      "    --src-mesh 2x4 --src-spec S0RR --dst-mesh 2x4 --dst-spec RS0R "
      "--wait\n"
      "  meshctl submit collective --op all_reduce --mesh 2x4 --bytes 256MiB "
      "\\\n"
      "    --dtype float32 --wait             # busbw next to the link bound\n"
      "  meshctl get job-000002 --timeline    # a Gantt chart of its steps\n"
      "  meshctl trace job-000002 -o trace.json   # for ui.perfetto.dev\n"
      "  meshctl down\n"
      "\n"
      "Commands that talk to the controller take --controller HOST:PORT;\n"
      "without it they use $MESHCAST_CONTROLLER, else the local cluster that\n"
      "'meshctl up' recorded in --dir ($MESHCAST_HOME, else ./.meshcast;\n"
      "a named directory must hold a cluster), else 127.0.0.1:50051. Human\n"
      "tables by default; -o wide adds columns, -o json (--output json) and\n"
      "-o yaml print the same data for scripts.\n"
      "\n"
      "A JOB (get, trace, watch, cancel) is its id (job-000042), its number\n"
      "(42, job-42) or a prefix of its id that only one job has. A mistyped\n"
      "command, flag or value gets a 'did you mean ...?' hint.\n"
      "\n",
      kExitCodesHelp,
      "\n\n"
      "Run 'meshctl COMMAND --help' for a command's flags.\n"
      "  -h, --help  show this help\n"
      "  --version   print meshctl's version and the controller's\n"
      "              (the same as 'meshctl version')\n"
      "Shell completion: source <(meshctl completion bash)   (or zsh)\n");
  return out;
}

const Command* FindCommand(const std::string& name) {
  for (const Command& command : MeshctlCommands()) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

std::vector<std::string> CommandNameList() {
  std::vector<std::string> names;
  for (const Command& command : MeshctlCommands()) {
    names.push_back(command.name);
  }
  return names;
}

std::string CommandNames() { return absl::StrJoin(CommandNameList(), ", "); }

CommandResult UnknownCommand(const std::string& name) {
  std::string hint = DidYouMean(name, CommandNameList());
  if (!hint.empty()) hint = absl::StrCat("; ", hint);
  return CommandResult{kExitUsage, "",
                       absl::StrCat("meshctl: unknown command '", name,
                                    "'; allowed: ", CommandNames(), hint,
                                    " (see 'meshctl --help')\n")};
}

}  // namespace

const std::vector<Command>& MeshctlCommands() {
  static const auto* const commands = new std::vector<Command>{
      {"up", kUpCommandSummary, RunUpCommand},
      {"down", kDownCommandSummary, RunDownCommand},
      {"cluster", kClusterCommandSummary, RunClusterCommand},
      {"submit", kSubmitCommandSummary, RunSubmitCommand, FlagKinds()},
      {"get", kGetCommandSummary, RunGetCommand, {}, /*takes_job=*/true},
      {"trace", kTraceCommandSummary, RunTraceCommand, {}, /*takes_job=*/true},
      {"list", kListCommandSummary, RunListCommand},
      {"watch", kWatchCommandSummary, RunWatchCommand, {}, /*takes_job=*/true},
      {"cancel", kCancelCommandSummary, RunCancelCommand, {},
       /*takes_job=*/true},
      {"plan", kPlanCommandSummary,
       [](const std::vector<std::string>& args, const CommandContext& context) {
         return RunPlanCommand(args, context);
       },
       FlagKinds()},
      {"calibrate", kCalibrateCommandSummary, RunCalibrateCommand},
      {"logs", kLogsCommandSummary, RunLogsCommand, {}, /*takes_job=*/true},
      {"completion", kCompletionCommandSummary, RunCompletionCommand,
       {"bash", "zsh"}},
      {"version", kVersionCommandSummary, RunVersionCommand},
  };
  return *commands;
}

const std::vector<std::string>& LeadingValueFlags() {
  static const auto* const flags = new std::vector<std::string>{
      "--controller", "--dir", "--output", "-o", "--connect-timeout"};
  return *flags;
}

CommandResult RunMeshctl(const std::vector<std::string>& args) {
  return RunMeshctl(args, ProcessContext());
}

CommandResult RunMeshctl(const std::vector<std::string>& args,
                         const CommandContext& context) {
  if (args.empty()) {
    return CommandResult{
        kExitUsage, "",
        absl::StrCat("meshctl: missing COMMAND; one of: ", CommandNames(),
                     " (see 'meshctl --help')\n")};
  }
  const std::string& first = args[0];
  if (absl::StartsWith(first, "-") && first != "-h" && first != "--help" &&
      first != "-help" && first != "--version") {
    // Flags before the command (`meshctl --controller H:P cluster`): they
    // belong to the command, which takes them after its name. The client
    // flags every command shares take a value; skip it, so that
    // `--dir cluster down` runs `down` with --dir cluster. --version among
    // them is the version command.
    const std::vector<std::string>& value_flags = LeadingValueFlags();
    for (size_t i = 0; i < args.size(); ++i) {
      if (std::find(value_flags.begin(), value_flags.end(), args[i]) !=
          value_flags.end()) {
        ++i;
        continue;
      }
      // Other flags' values cannot be told apart from a command here.
      if (args[i] != "--version" && FindCommand(args[i]) == nullptr) continue;
      std::vector<std::string> reordered = {args[i]};
      reordered.insert(reordered.end(), args.begin(), args.begin() + i);
      reordered.insert(reordered.end(), args.begin() + i + 1, args.end());
      return RunMeshctl(reordered, context);
    }
  }
  if (first == "-h" || first == "--help" || first == "-help") {
    return CommandResult{kExitOk, TopLevelUsage(), ""};
  }
  if (first == "--version") {
    return RunVersionCommand(
        std::vector<std::string>(args.begin() + 1, args.end()), context);
  }
  if (first == "help") {
    if (args.size() == 1) return CommandResult{kExitOk, TopLevelUsage(), ""};
    const Command* command = FindCommand(args[1]);
    if (command != nullptr) return command->run({"--help"}, context);
  }
  const std::string& name = first == "help" ? args[1] : first;
  const Command* command = FindCommand(name);
  if (command == nullptr) return UnknownCommand(name);
  return command->run(std::vector<std::string>(args.begin() + 1, args.end()),
                      context);
}

}  // namespace meshcast::cli
