#include "cli/meshctl.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/calibrate_command.h"
#include "cli/cluster_commands.h"
#include "cli/command_errors.h"
#include "cli/job_commands.h"
#include "cli/plan_command.h"

namespace meshcast::cli {
namespace {

constexpr char kVersion[] = "0.1.0";

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
      "tables by default; --output json for scripts.\n"
      "\n",
      kExitCodesHelp,
      "\n\n"
      "Run 'meshctl COMMAND --help' for a command's flags.\n"
      "  -h, --help  show this help\n"
      "  --version   print the version\n");
  return out;
}

const Command* FindCommand(const std::string& name) {
  for (const Command& command : MeshctlCommands()) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

std::string CommandNames() {
  std::string names;
  for (const Command& command : MeshctlCommands()) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", command.name);
  }
  return names;
}

}  // namespace

const std::vector<Command>& MeshctlCommands() {
  static const auto* const commands = new std::vector<Command>{
      {"up", kUpCommandSummary, RunUpCommand},
      {"down", kDownCommandSummary, RunDownCommand},
      {"cluster", kClusterCommandSummary, RunClusterCommand},
      {"submit", kSubmitCommandSummary, RunSubmitCommand},
      {"get", kGetCommandSummary, RunGetCommand},
      {"trace", kTraceCommandSummary, RunTraceCommand},
      {"list", kListCommandSummary, RunListCommand},
      {"watch", kWatchCommandSummary, RunWatchCommand},
      {"cancel", kCancelCommandSummary, RunCancelCommand},
      {"plan", kPlanCommandSummary,
       [](const std::vector<std::string>& args, const CommandContext& context) {
         return RunPlanCommand(args, context);
       }},
      {"calibrate", kCalibrateCommandSummary, RunCalibrateCommand},
  };
  return *commands;
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
    // `--dir cluster down` runs `down` with --dir cluster.
    static constexpr const char* kValueFlags[] = {
        "--controller", "--dir", "--output", "--connect-timeout"};
    for (size_t i = 0; i < args.size(); ++i) {
      if (std::find(std::begin(kValueFlags), std::end(kValueFlags), args[i]) !=
          std::end(kValueFlags)) {
        ++i;
        continue;
      }
      // Other flags' values cannot be told apart from a command here.
      if (FindCommand(args[i]) == nullptr) continue;
      std::vector<std::string> reordered = {args[i]};
      reordered.insert(reordered.end(), args.begin(), args.begin() + i);
      reordered.insert(reordered.end(), args.begin() + i + 1, args.end());
      return RunMeshctl(reordered, context);
    }
  }
  if (first == "-h" || first == "--help" || first == "-help") {
    return CommandResult{kExitOk, TopLevelUsage(), ""};
  }
  if (first == "--version" || first == "version") {
    return CommandResult{kExitOk, absl::StrCat("meshctl ", kVersion, "\n"), ""};
  }
  if (first == "help") {
    if (args.size() == 1) return CommandResult{kExitOk, TopLevelUsage(), ""};
    const Command* command = FindCommand(args[1]);
    if (command != nullptr) return command->run({"--help"}, context);
  }
  const std::string& name = first == "help" ? args[1] : first;
  const Command* command = FindCommand(name);
  if (command == nullptr) {
    return CommandResult{kExitUsage, "",
                         absl::StrCat("meshctl: unknown command '", name,
                                      "'; allowed: ", CommandNames(),
                                      " (see 'meshctl --help')\n")};
  }
  return command->run(std::vector<std::string>(args.begin() + 1, args.end()),
                      context);
}

}  // namespace meshcast::cli
