// Principal: who is calling an RPC, as established by TLS client
// certificates and bearer tokens; and extracting it from a gRPC call.
//
//   Authenticator auth(AuthOptions{.tokens = tokens});   // or .insecure
//   absl::StatusOr<Principal> caller = auth.Authenticate(*context);
//   if (caller->kind == Principal::Kind::kWorker) { ... caller->name ... }
//
// How a caller is recognised (docs/security.md):
// - --insecure: everyone is an anonymous admin (Kind::kAnonymous, empty
//   name), as before security existed; a worker's name comes from its
//   request.
// - call metadata `authorization: Bearer <token>`: the token must be in the
//   tokens file (else UNAUTHENTICATED); the caller is its user with its role
//   (kAdmin or kUser). A token wins over a client certificate.
// - a client certificate verified against the cluster CA (the TLS layer
//   has checked the chain): its CN is the name and its OU the role:
//   OU=worker -> kWorker, OU=admin -> kAdmin, OU=user -> kUser. Any other OU
//   (e.g. the controller's own OU=controller) gives no role.
// - nothing usable: UNAUTHENTICATED, saying what to send.
//
// Kind::kController is only ever produced on a worker's server, by
// ControllerPeer(), for the peer whose certificate CN is the controller
// identity.
//
// Handlers get the Principal from the call guard (security/call_guard.h)
// and may use kind and name, e.g. to check that a KvSet comes from one of
// the job's workers (kind == kWorker and name in the job's worker names;
// kind == kAnonymous means --insecure: no check is possible).
//
// Thread safety: Authenticator is immutable after construction; every
// method may be called from any thread.
#ifndef MESHCAST_SECURITY_PRINCIPAL_H_
#define MESHCAST_SECURITY_PRINCIPAL_H_

#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "security/token_file.h"

namespace meshcast::security {

struct Principal {
  enum class Kind { kAnonymous, kAdmin, kUser, kWorker, kController };
  Kind kind = Kind::kAnonymous;
  // The user (token's user or certificate CN), the worker's name (its
  // certificate CN) or the controller's CN; empty for kAnonymous.
  std::string name;

  bool operator==(const Principal&) const = default;
};

// "anonymous", "admin", "user", "worker", "controller".
absl::string_view KindName(Principal::Kind kind);

// What the TLS layer verified about the peer; all empty without a verified
// client certificate.
struct PeerCertificate {
  std::string common_name;
  std::string organizational_unit;
};

// The certificate's CN and OU from PEM text (INVALID_ARGUMENT when it does
// not parse).
absl::StatusOr<PeerCertificate> PeerCertificateFromPem(absl::string_view pem);

// The verified client certificate of the call's peer, if any.
std::optional<PeerCertificate> PeerCertificateOf(
    const grpc::ServerContextBase& context);

// The value of the `authorization` call metadata, if sent.
std::optional<std::string> AuthorizationOf(const grpc::ServerContextBase& context);

struct AuthOptions {
  bool insecure = false;
  TokenTable tokens;
};

class Authenticator {
 public:
  explicit Authenticator(AuthOptions options) : options_(std::move(options)) {}

  bool insecure() const { return options_.insecure; }

  // The pure rule (tests drive it directly): `authorization` is the
  // metadata value, `certificate` the verified peer certificate.
  absl::StatusOr<Principal> Resolve(
      const std::optional<std::string>& authorization,
      const std::optional<PeerCertificate>& certificate) const;

  absl::StatusOr<Principal> Authenticate(
      const grpc::ServerContextBase& context) const {
    if (options_.insecure) return Principal{};
    return Resolve(AuthorizationOf(context), PeerCertificateOf(context));
  }

 private:
  const AuthOptions options_;
};

// On a worker's server: whether the peer presented a certificate (verified
// by the TLS layer) whose CN is `controller_identity`.
bool IsControllerPeer(const std::optional<PeerCertificate>& certificate,
                      absl::string_view controller_identity);

}  // namespace meshcast::security

#endif  // MESHCAST_SECURITY_PRINCIPAL_H_
