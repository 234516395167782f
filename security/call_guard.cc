#include "security/call_guard.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "security/authorizer.h"
#include "util/grpc_status.h"

namespace meshcast::security {
grpc::Status Admit(const Authenticator* authenticator,
                   const grpc::ServerContextBase& context,
                   absl::string_view method, Principal* caller) {
  if (authenticator == nullptr || authenticator->insecure()) {
    *caller = Principal{};
    return grpc::Status::OK;
  }
  absl::StatusOr<Principal> who = authenticator->Authenticate(context);
  if (!who.ok()) return ToGrpcStatus(who.status());
  const absl::Status allowed = Authorize(method, *who);
  if (!allowed.ok()) return ToGrpcStatus(allowed);
  *caller = *std::move(who);
  return grpc::Status::OK;
}

grpc::Status AdmitController(bool insecure,
                             absl::string_view controller_identity,
                             const grpc::ServerContextBase& context,
                             absl::string_view method) {
  if (insecure) return grpc::Status::OK;
  const std::optional<PeerCertificate> peer = PeerCertificateOf(context);
  if (!IsControllerPeer(peer, controller_identity)) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat(method, " is accepted only from the controller (a "
                             "certificate with CN ",
                     controller_identity, ")"));
  }
  return ToGrpcStatus(Authorize(
      method, Principal{Principal::Kind::kController, peer->common_name}));
}

}  // namespace meshcast::security
