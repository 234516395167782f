#include "cli/version_command.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cli/client_flags.h"
#include "cli/command_errors.h"
#include "cli/controller_client.h"
#include "cli/flags.h"
#include "cli/output_format.h"
#include "nlohmann/json.hpp"

#ifndef MESHCAST_VERSION
#define MESHCAST_VERSION "unknown"
#endif

namespace meshcast::cli {
namespace {

constexpr char kCommand[] = "meshctl version";

using OrderedJson = nlohmann::ordered_json;

// What the controller said, or why it said nothing.
struct ControllerAnswer {
  std::string address;  // empty when none could be resolved
  bool reachable = false;
  std::string version;  // "" from a controller that predates reporting it
  std::string error;    // why there is no version (unreachable, refused)
};

ControllerAnswer AskController(const ClientFlags& client_flags,
                               const CommandContext& context) {
  ControllerAnswer answer;
  if (absl::StatusOr<std::string> address = client_flags.Address(context);
      address.ok()) {
    answer.address = *address;
  }
  absl::StatusOr<std::unique_ptr<ControllerClient>> client =
      client_flags.Connect(context);
  if (!client.ok()) {
    answer.error = std::string(client.status().message());
    return answer;
  }
  absl::StatusOr<std::string> version = (*client)->ControllerVersion();
  // A controller that answers with an error (a token it refuses) is
  // reachable; only its version is unknown.
  answer.reachable = version.ok() || !absl::IsUnavailable(version.status());
  if (!version.ok()) {
    answer.error = version.status().ToString();
    return answer;
  }
  answer.version = *std::move(version);
  return answer;
}

OrderedJson AnswerToJson(const ControllerAnswer& answer) {
  OrderedJson controller = {{"address", answer.address},
                            {"reachable", answer.reachable}};
  if (answer.error.empty()) {
    controller["version"] = answer.version;
  } else {
    controller["error"] = answer.error;
  }
  return OrderedJson{{"client", {{"version", MeshctlVersion()}}},
                     {"controller", std::move(controller)}};
}

std::string AnswerToText(const ControllerAnswer& answer) {
  std::string out = absl::StrCat("meshctl ", MeshctlVersion(), "\n");
  if (!answer.reachable) {
    absl::StrAppend(&out, "controller: unreachable (", answer.error, ")\n");
  } else if (!answer.error.empty()) {
    absl::StrAppend(&out, "controller at ", answer.address,
                    ": version unknown (", answer.error, ")\n");
  } else if (answer.version.empty()) {
    absl::StrAppend(&out, "controller at ", answer.address,
                    ": version unknown (it predates version reporting)\n");
  } else {
    absl::StrAppend(&out, "controller ", answer.version, " at ", answer.address,
                    "\n");
  }
  return out;
}

}  // namespace

const char* MeshctlVersion() { return MESHCAST_VERSION; }

CommandResult RunVersionCommand(const std::vector<std::string>& args,
                                const CommandContext& context) {
  std::string output = "table";
  ClientFlags client_flags;
  client_flags.connect_timeout_seconds = 1;
  FlagSet flags(
      kCommand,
      absl::StrCat(
          "Prints meshctl's version and, when the controller answers, the\n"
          "controller's (the version it was built from). An unreachable\n"
          "controller is reported on its line; the exit code stays 0.\n"
          "'meshctl --version' is the same. --output json: {client:\n"
          "{version}, controller: {address, reachable, version | error}}.\n\n",
          kControllerHelp));
  AddOutputFlag(flags, &output,
                "table: two lines (wide: the same); json: one JSON object;\n"
                "yaml: the same data as YAML");
  client_flags.Register(flags);
  if (auto done = ParseCommandFlags(flags, args, kCommand, 0,
                                    "see 'meshctl version --help'")) {
    return *done;
  }
  const ControllerAnswer answer = AskController(client_flags, context);
  CommandResult result;
  result.out = IsStructuredOutput(output)
                   ? RenderStructured(AnswerToJson(answer), output)
                   : AnswerToText(answer);
  return result;
}

}  // namespace meshcast::cli
