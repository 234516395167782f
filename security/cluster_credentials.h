// ClusterCredentials: the certificates and tokens of one cluster, written
// into a directory by `meshctl up` (and usable by any launcher).
//
//   ASSIGN_OR_RETURN(ClusterCredentialFiles files,
//                    WriteClusterCredentials("/abs/.meshcast/tls",
//                                            {"worker-0", "worker-1"}));
//   // controller: --tls_cert=files.controller.cert ... --tokens_file=...
//   // worker-0:   --tls_cert=files.workers[0].cert ...
//   // clients:    --tls_ca=files.ca_cert --token_file=files.admin_token
//
// What lands in `dir` (created with mode 0700):
//   ca.key, ca.crt                 the cluster CA (kept across runs)
//   controller.key, controller.crt CN meshcast-controller, OU controller,
//                                  SAN DNS localhost, meshcast-controller,
//                                  IP 127.0.0.1 (issued anew each run)
//   <worker>.key, <worker>.crt     CN = OU worker, SAN DNS <worker> and
//                                  localhost, IP 127.0.0.1 (anew each run)
//   admin.token                    the admin's bearer token (kept)
//   tokens                         the controller's tokens file, first
//                                  line `<admin token> admin admin` (kept:
//                                  lines added by hand stay)
// Keys and token files have mode 0600. An existing CA is reused, so client
// certificates and tokens handed out earlier stay valid; delete ca.key and
// ca.crt (or the whole directory) to rotate everything.
//
// Errors: INVALID_ARGUMENT for a worker name that cannot be a certificate
// name (empty, or equal to the controller identity), and the file and
// OpenSSL errors of cert_authority.h.
//
// Thread safety: not safe against concurrent writers of the same dir.
#ifndef MESHCAST_SECURITY_CLUSTER_CREDENTIALS_H_
#define MESHCAST_SECURITY_CLUSTER_CREDENTIALS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace meshcast::security {

inline constexpr char kControllerIdentity[] = "meshcast-controller";

struct CertFiles {
  std::string cert;
  std::string key;
};

struct ClusterCredentialFiles {
  std::string ca_cert;
  CertFiles controller;
  std::vector<CertFiles> workers;  // in the order of the names given
  std::string admin_token;         // the file
  std::string tokens;              // the controller's --tokens_file
};

absl::StatusOr<ClusterCredentialFiles> WriteClusterCredentials(
    const std::string& dir, const std::vector<std::string>& worker_names);

}  // namespace meshcast::security

#endif  // MESHCAST_SECURITY_CLUSTER_CREDENTIALS_H_
