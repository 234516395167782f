// CallGuard: authentication then authorization at the top of an RPC
// handler, in one call, with the result as a grpc::Status.
//
//   security::Principal caller;
//   if (grpc::Status s = guard.Admit(*context, kMethod, &caller); !s.ok()) {
//     return s;
//   }
//
// Admit answers UNAUTHENTICATED when the caller cannot be identified
// (security/principal.h) and PERMISSION_DENIED when the table
// (security/authorizer.h) refuses the method; `caller` is then untouched.
// A null guard (tests, --insecure) admits everyone as kAnonymous.
//
// Thread safety: immutable; Admit may run on any thread.
#ifndef MESHCAST_SECURITY_CALL_GUARD_H_
#define MESHCAST_SECURITY_CALL_GUARD_H_

#include <grpcpp/grpcpp.h>

#include "absl/strings/string_view.h"
#include "security/principal.h"

namespace meshcast::security {

grpc::Status Admit(const Authenticator* authenticator,
                   const grpc::ServerContextBase& context,
                   absl::string_view method, Principal* caller);

// On a worker's server: admits the controller's certificate only (or
// everyone, as kAnonymous, when `insecure`).
grpc::Status AdmitController(bool insecure,
                             absl::string_view controller_identity,
                             const grpc::ServerContextBase& context,
                             absl::string_view method);

}  // namespace meshcast::security

#endif  // MESHCAST_SECURITY_CALL_GUARD_H_
