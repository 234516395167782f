#include "cli/client_flags.h"

#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/cluster_file.h"
#include "security/tls_credentials.h"
#include "security/token_file.h"
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
  flags.String("tls_ca", &tls_ca, "FILE",
               "CA certificate that verifies the controller (default: the\n"
               "local cluster's, when talking to it)");
  flags.String("tls_cert", &tls_cert, "FILE",
               "client certificate (CN = user, OU = admin or user)");
  flags.String("tls_key", &tls_key, "FILE", "private key of --tls_cert");
  flags.String("token_file", &token_file, "FILE",
               "bearer token to authenticate with (mode 0600; default: the\n"
               "local cluster's admin token)");
  flags.Bool("insecure", &insecure,
             "plaintext, no credentials (a controller run with --insecure)");
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClusterCredentials(
    const ClusterFile& file) {
  if (file.insecure || file.tls_ca.empty()) {
    return std::shared_ptr<grpc::ChannelCredentials>();
  }
  std::string token;
  if (!file.token_file.empty()) {
    ASSIGN_OR_RETURN(token, security::ReadTokenFile(file.token_file));
  }
  return security::MakeChannelCredentials(
      security::TlsFiles{file.tls_cert, file.tls_key, file.tls_ca}, token);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
ClientFlags::Credentials(const std::string& address,
                         const CommandContext& context) const {
  security::TlsFiles files{tls_cert, tls_key, tls_ca};
  std::string token_path = token_file;
  const bool flags_given = files.any() || !token_path.empty();
  if (insecure) {
    if (flags_given) {
      return absl::InvalidArgumentError(
          "--insecure: do not give --tls_ca, --tls_cert, --tls_key or "
          "--token_file with it");
    }
    return std::shared_ptr<grpc::ChannelCredentials>();
  }
  if (!flags_given) {
    // The environment's, as for the controller's address.
    const auto env = [&context](const char* name) {
      std::optional<std::string> value = context.Env(name);
      return value.value_or("");
    };
    files = security::TlsFiles{env("MESHCAST_TLS_CERT"),
                               env("MESHCAST_TLS_KEY"), env("MESHCAST_TLS_CA")};
    token_path = env("MESHCAST_TOKEN_FILE");
  }
  if (!files.any() && token_path.empty()) {
    // The local cluster's own settings, when it is that cluster we reach.
    absl::StatusOr<ClusterFile> file =
        ReadClusterFile(LocalClusterDir(dir, context));
    if (!file.ok() || file->controller != address) {
      return std::shared_ptr<grpc::ChannelCredentials>();
    }
    return ClusterCredentials(*file);
  }
  std::string token;
  if (!token_path.empty()) {
    ASSIGN_OR_RETURN(token, security::ReadTokenFile(token_path));
  }
  if (files.ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls_ca is required with --tls_cert, --tls_key or --token_file: "
        "credentials are only sent over TLS");
  }
  return security::MakeChannelCredentials(files, token);
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
  ASSIGN_OR_RETURN(options.credentials, Credentials(address, context));
  absl::StatusOr<std::unique_ptr<ControllerClient>> client =
      ControllerClient::Connect(address, options);
  if (absl::IsInvalidArgument(client.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--controller: ", client.status().message()));
  }
  return client;
}

}  // namespace meshcast::cli
