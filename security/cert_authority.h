// CertAuthority: a small X.509 certificate authority for a cluster, built
// on the OpenSSL 3 C API. `meshctl up` uses it to create the cluster's CA
// and issue the controller's, the workers' and clients' certificates;
// tests use it to make throw-away certificates.
//
//   ASSIGN_OR_RETURN(KeyAndCert ca, CreateCertificateAuthority("meshcast CA"));
//   CertRequest request;
//   request.common_name = "worker-0";
//   request.organizational_unit = "worker";
//   request.dns_names = {"worker-0", "localhost"};
//   request.ip_addresses = {"127.0.0.1"};
//   ASSIGN_OR_RETURN(KeyAndCert leaf, IssueCertificate(ca, request));
//   RETURN_IF_ERROR(WriteKeyAndCert(leaf, "d/worker-0.key", "d/worker-0.crt"));
//   RETURN_IF_ERROR(VerifyCertificate(ca.cert_pem, leaf.cert_pem));
//
// Keys are ECDSA P-256; certificates are X.509 v3 signed with SHA-256.
// Leaf certificates carry extendedKeyUsage serverAuth and clientAuth (the
// controller's and the workers' certificates serve both ways) and
// basicConstraints CA:FALSE; the CA has CA:TRUE and keyCertSign.
//
// Errors: INVALID_ARGUMENT for a bad request (empty CN, an IP that does not
// parse), INTERNAL when OpenSSL fails (with its error text), and the file
// errors of writing (PERMISSION_DENIED / NOT_FOUND naming the path).
//
// Thread safety: pure functions; OpenSSL 3 is thread-safe.
#ifndef MESHCAST_SECURITY_CERT_AUTHORITY_H_
#define MESHCAST_SECURITY_CERT_AUTHORITY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace meshcast::security {

struct KeyAndCert {
  std::string key_pem;   // PKCS#8 private key
  std::string cert_pem;  // X.509 certificate
};

struct CertRequest {
  std::string common_name;
  // The role the controller reads from client certificates
  // (security/principal.h): worker, admin, user; controller for the
  // controller's own certificate.
  std::string organizational_unit;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  absl::Duration validity = absl::Hours(24 * 365);
};

absl::StatusOr<KeyAndCert> CreateCertificateAuthority(
    const std::string& common_name,
    absl::Duration validity = absl::Hours(24 * 365 * 5));

absl::StatusOr<KeyAndCert> IssueCertificate(const KeyAndCert& ca,
                                            const CertRequest& request);

// Writes `contents` to `path` with mode 0600 (created or truncated; the mode
// is set even when the file existed).
absl::Status WritePrivateFile(const std::string& path,
                              const std::string& contents);
// The key with mode 0600, the certificate with mode 0644.
absl::Status WriteKeyAndCert(const KeyAndCert& pair,
                             const std::string& key_path,
                             const std::string& cert_path);

// Verifies `cert_pem` against the single trusted root `ca_pem` with
// X509_verify_cert (chain, signature, validity period); with `host`
// non-empty, also that the certificate is valid for that DNS name or IP.
// UNAUTHENTICATED with OpenSSL's reason when it does not verify.
absl::Status VerifyCertificate(const std::string& ca_pem,
                               const std::string& cert_pem,
                               const std::string& host = "");

}  // namespace meshcast::security

#endif  // MESHCAST_SECURITY_CERT_AUTHORITY_H_
