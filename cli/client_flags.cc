#include "cli/client_flags.h"

#include <cmath>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/cluster_file.h"
#include "util/status_macros.h"

namespace meshcast::cli {

void ClientFlags::Register(FlagSet& flags) {
  flags.String("controller", &controller, "HOST:PORT",
               "controller address (default: $MESHCAST_CONTROLLER, else the\n"
               "local cluster of --dir, else 127.0.0.1:50051)");
  flags.String("dir", &dir, "DIR",
               "local cluster directory whose cluster.json names the\n"
               "controller (default: $MESHCAST_HOME, else ./.meshcast)");
  flags.Double("connect-timeout", &connect_timeout_seconds, "SECONDS",
               "how long to wait for the controller to answer");
}

absl::StatusOr<std::string> ClientFlags::Address(
    const CommandContext& context) const {
  return ResolveControllerAddress(controller, dir, context);
}

absl::StatusOr<std::unique_ptr<ControllerClient>> ClientFlags::Connect(
    const CommandContext& context) const {
  if (!(connect_timeout_seconds > 0) ||
      !std::isfinite(connect_timeout_seconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--connect-timeout: must be > 0 seconds, got ",
                     connect_timeout_seconds));
  }
  ASSIGN_OR_RETURN(const std::string address, Address(context));
  ControllerClient::Options options;
  options.connect_timeout = absl::Seconds(connect_timeout_seconds);
  absl::StatusOr<std::unique_ptr<ControllerClient>> client =
      ControllerClient::Connect(address, options);
  if (absl::IsInvalidArgument(client.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--controller: ", client.status().message()));
  }
  return client;
}

}  // namespace meshcast::cli
