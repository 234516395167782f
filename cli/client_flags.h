// ClientFlags: the flags shared by every meshctl command that talks to the
// controller (--controller, --dir, --connect-timeout, and the security
// flags --tls_ca, --tls_cert, --tls_key, --token_file, --insecure), and
// connecting with them.
//
// Security (docs/security.md): when none of the security flags is given,
// they come from $MESHCAST_TLS_CA, $MESHCAST_TLS_CERT, $MESHCAST_TLS_KEY and
// $MESHCAST_TOKEN_FILE, else from the local cluster's cluster.json
// (`meshctl up` records its CA and admin token there) if that cluster's
// controller is the one being reached; otherwise the connection is
// plaintext. A token is only ever sent over TLS.
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
#include "cli/cluster_file.h"
#include "cli/command.h"
#include "cli/controller_client.h"
#include "cli/flags.h"

namespace meshcast::cli {

struct ClientFlags {
  std::string controller;
  std::string dir;
  double connect_timeout_seconds = 3;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string token_file;
  bool insecure = false;

  void Register(FlagSet& flags);
  // The address ResolveControllerAddress picks from these flags; NOT_FOUND
  // when --dir (or $MESHCAST_HOME) names a directory without a cluster.
  absl::StatusOr<std::string> Address(const CommandContext& context) const;
  // The credentials for `address` (see above); null for plaintext.
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
      const std::string& address, const CommandContext& context) const;
  // Resolves the address and connects; errors name --controller.
  absl::StatusOr<std::unique_ptr<ControllerClient>> Connect(
      const CommandContext& context) const;
};

// The credentials recorded for a local cluster (CA and admin token of
// `meshctl up`); null when it is a plaintext cluster.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClusterCredentials(
    const ClusterFile& file);

// Help text on how the controller is found, for command descriptions.
inline constexpr char kControllerHelp[] =
    "The controller is --controller if given, else $MESHCAST_CONTROLLER\n"
    "(unless --dir is given), else the one recorded by 'meshctl up' in\n"
    "--dir/cluster.json ($MESHCAST_HOME, else ./.meshcast). A --dir or\n"
    "$MESHCAST_HOME without a cluster.json is an error; only ./.meshcast\n"
    "without one falls back to 127.0.0.1:50051.";

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_CLIENT_FLAGS_H_
