#include "cli/meshctl.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/plan_command.h"

namespace meshcast::cli {
namespace {

constexpr char kVersion[] = "0.1.0";

std::string TopLevelUsage() {
  std::string out =
      "usage: meshctl COMMAND [flags]\n"
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
  absl::StrAppend(&out,
                  "\n"
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
      {"plan", kPlanCommandSummary, RunPlanCommand},
  };
  return *commands;
}

CommandResult RunMeshctl(const std::vector<std::string>& args) {
  if (args.empty()) {
    return CommandResult{
        kExitUsage, "",
        absl::StrCat("meshctl: missing COMMAND; one of: ", CommandNames(),
                     " (see 'meshctl --help')\n")};
  }
  const std::string& first = args[0];
  if (first == "-h" || first == "--help" || first == "-help") {
    return CommandResult{kExitOk, TopLevelUsage(), ""};
  }
  if (first == "--version" || first == "version") {
    return CommandResult{kExitOk, absl::StrCat("meshctl ", kVersion, "\n"), ""};
  }
  if (first == "help") {
    if (args.size() == 1) return CommandResult{kExitOk, TopLevelUsage(), ""};
    const Command* command = FindCommand(args[1]);
    if (command != nullptr) return command->run({"--help"});
  }
  const std::string& name = first == "help" ? args[1] : first;
  const Command* command = FindCommand(name);
  if (command == nullptr) {
    return CommandResult{kExitUsage, "",
                         absl::StrCat("meshctl: unknown command '", name,
                                      "'; allowed: ", CommandNames(),
                                      " (see 'meshctl --help')\n")};
  }
  return command->run(std::vector<std::string>(args.begin() + 1, args.end()));
}

}  // namespace meshcast::cli
