// ClientFlags: the flags shared by every meshctl command that talks to the
// controller (--controller, --dir, --connect-timeout), and connecting with
// them.
//
//   ClientFlags client_flags;
//   client_flags.Register(flags);
//   ... flags.Parse(args) ...
//   ASSIGN_OR_RETURN(std::unique_ptr<ControllerClient> client,
//                    client_flags.Connect(context));
//
// Thread safety: plain value type.
#ifndef MESHCAST_CLI_CLIENT_FLAGS_H_
#define MESHCAST_CLI_CLIENT_FLAGS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cli/command.h"
#include "cli/controller_client.h"
#include "cli/flags.h"

namespace meshcast::cli {

struct ClientFlags {
  std::string controller;
  std::string dir;
  double connect_timeout_seconds = 3;

  void Register(FlagSet& flags);
  // The address ResolveControllerAddress picks from these flags; NOT_FOUND
  // when --dir (or $MESHCAST_HOME) names a directory without a cluster.
  absl::StatusOr<std::string> Address(const CommandContext& context) const;
  // Resolves the address and connects; errors name --controller.
  absl::StatusOr<std::unique_ptr<ControllerClient>> Connect(
      const CommandContext& context) const;
};

// Help text on how the controller is found, for command descriptions.
inline constexpr char kControllerHelp[] =
    "The controller is --controller if given, else $MESHCAST_CONTROLLER\n"
    "(unless --dir is given), else the one recorded by 'meshctl up' in\n"
    "--dir/cluster.json ($MESHCAST_HOME, else ./.meshcast). A --dir or\n"
    "$MESHCAST_HOME without a cluster.json is an error; only ./.meshcast\n"
    "without one falls back to 127.0.0.1:50051.";

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_CLIENT_FLAGS_H_
