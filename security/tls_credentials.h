// TlsFiles and the gRPC credentials built from them: one place where every
// daemon and client turns --tls_cert, --tls_key, --tls_ca, --token_file and
// --insecure into grpc::ServerCredentials / grpc::ChannelCredentials.
//
//   TlsFiles files{.cert = "c.crt", .key = "c.key", .ca = "ca.crt"};
//   RETURN_IF_ERROR(CheckTlsFlags(files, insecure, "meshcast-controller",
//                                 /*cert_required=*/true));
//   ASSIGN_OR_RETURN(auto creds, MakeServerCredentials(
//       files, ClientCertificates::kRequestAndVerify));
//   ASSIGN_OR_RETURN(auto channel_creds, MakeChannelCredentials(files, token));
//
// Contract:
// - A daemon runs either with TLS (cert, key and CA all given) or with
//   --insecure, never half-way; CheckTlsFlags says which flags are missing.
// - kRequestAndVerify: a client may present a certificate, which must then
//   verify against the CA (the controller: tokens are the alternative);
//   kRequireAndVerify: it must (a worker's server).
// - MakeChannelCredentials: server verified against the CA; cert and key
//   optional (both or neither); a non-empty token is sent on every call as
//   `authorization: Bearer <token>`.
//
// Errors: INVALID_ARGUMENT naming the flags (--tls_cert, --tls_key,
// --tls_ca, --insecure); NOT_FOUND / PERMISSION_DENIED naming a file that
// cannot be read.
//
// Thread safety: pure functions.
#ifndef MESHCAST_SECURITY_TLS_CREDENTIALS_H_
#define MESHCAST_SECURITY_TLS_CREDENTIALS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshcast::security {

struct TlsFiles {
  std::string cert;  // --tls_cert: PEM certificate (chain)
  std::string key;   // --tls_key: PEM private key
  std::string ca;    // --tls_ca: PEM CA certificate(s) to trust

  bool any() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// The daemon start-up rule: with `insecure`, no TLS flag may be given (a
// half-configured TLS is a mistake, not a choice); otherwise --tls_ca and,
// when `cert_required`, --tls_cert and --tls_key must all be given.
// `program` names the daemon in the message.
absl::Status CheckTlsFlags(const TlsFiles& files, bool insecure,
                           absl::string_view program, bool cert_required);

// The file's whole text; errors name `flag` and the path.
absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                        absl::string_view flag);

enum class ClientCertificates { kRequestAndVerify, kRequireAndVerify };

// Insecure credentials when files.any() is false.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, ClientCertificates client_certificates);

// Insecure credentials when files.ca is empty (then cert, key and token
// must be empty too: a token is never sent in the clear).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const TlsFiles& files, const std::string& token = "");

}  // namespace meshcast::security

#endif  // MESHCAST_SECURITY_TLS_CREDENTIALS_H_
