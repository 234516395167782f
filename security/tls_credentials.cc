#include "security/tls_credentials.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "security/token_file.h"
#include "util/status_macros.h"

namespace meshcast::security {

absl::Status CheckTlsFlags(const TlsFiles& files, bool insecure,
                           absl::string_view program, bool cert_required) {
  if (insecure) {
    if (files.any()) {
      return absl::InvalidArgumentError(absl::StrCat(
          program,
          ": --insecure turns TLS off; do not give --tls_cert, --tls_key or "
          "--tls_ca with it"));
    }
    return absl::OkStatus();
  }
  std::vector<std::string> missing;
  if (cert_required && files.cert.empty()) missing.push_back("--tls_cert");
  if (cert_required && files.key.empty()) missing.push_back("--tls_key");
  if (files.ca.empty()) missing.push_back("--tls_ca");
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(program, ": --tls_cert and --tls_key go together"));
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        program, ": TLS needs --tls_cert, --tls_key and --tls_ca (missing: ",
        absl::StrJoin(missing, ", "),
        "); 'meshctl up' generates them. To run without TLS and without "
        "authentication, pass --insecure explicitly"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                        absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("--", flag, " ", path, ": cannot read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path, ": not a PEM file"));
  }
  return text.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, ClientCertificates client_certificates) {
  if (!files.any()) return grpc::InsecureServerCredentials();
  RETURN_IF_ERROR(CheckTlsFlags(files, false, "server", true));
  grpc::SslServerCredentialsOptions options(
      client_certificates == ClientCertificates::kRequireAndVerify
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  ASSIGN_OR_RETURN(options.pem_root_certs, ReadPemFile(files.ca, "tls_ca"));
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.private_key, ReadPemFile(files.key, "tls_key"));
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPemFile(files.cert, "tls_cert"));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const TlsFiles& files, const std::string& token) {
  if (files.ca.empty()) {
    if (!files.cert.empty() || !files.key.empty() || !token.empty()) {
      return absl::InvalidArgumentError(
          "--tls_ca is required with --tls_cert, --tls_key or --token_file "
          "(credentials are never sent without TLS)");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  grpc::SslCredentialsOptions options;
  ASSIGN_OR_RETURN(options.pem_root_certs, ReadPemFile(files.ca, "tls_ca"));
  if (!files.cert.empty()) {
    ASSIGN_OR_RETURN(options.pem_private_key,
                     ReadPemFile(files.key, "tls_key"));
    ASSIGN_OR_RETURN(options.pem_cert_chain,
                     ReadPemFile(files.cert, "tls_cert"));
  }
  std::shared_ptr<grpc::ChannelCredentials> channel =
      grpc::SslCredentials(options);
  if (token.empty()) return channel;
  return grpc::CompositeChannelCredentials(channel,
                                           grpc::AccessTokenCredentials(token));
}

}  // namespace meshcast::security
