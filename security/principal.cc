#include "security/principal.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace meshcast::security {
namespace {

// The first entry of `nid` in `name`, or "" when there is none.
std::string NameEntry(X509_NAME* name, int nid) {
  const int index = X509_NAME_get_index_by_NID(name, nid, -1);
  if (index < 0) return "";
  ASN1_STRING* data =
      X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, index));
  unsigned char* utf8 = nullptr;
  const int length = ASN1_STRING_to_UTF8(&utf8, data);
  if (length < 0) return "";
  std::string out(reinterpret_cast<char*>(utf8), length);
  OPENSSL_free(utf8);
  return out;
}

std::optional<std::string> FirstProperty(const grpc::AuthContext& auth,
                                         const char* name) {
  std::vector<grpc::string_ref> values = auth.FindPropertyValues(name);
  if (values.empty()) return std::nullopt;
  return std::string(values[0].data(), values[0].size());
}

}  // namespace

absl::string_view KindName(Principal::Kind kind) {
  switch (kind) {
    case Principal::Kind::kAnonymous:
      return "anonymous";
    case Principal::Kind::kAdmin:
      return "admin";
    case Principal::Kind::kUser:
      return "user";
    case Principal::Kind::kWorker:
      return "worker";
    case Principal::Kind::kController:
      return "controller";
  }
  return "unknown";
}

absl::StatusOr<PeerCertificate> PeerCertificateFromPem(absl::string_view pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr,
      X509_free);
  if (cert == nullptr) {
    return absl::InvalidArgumentError("peer certificate: not a PEM X.509 "
                                      "certificate");
  }
  X509_NAME* subject = X509_get_subject_name(cert.get());
  PeerCertificate out;
  out.common_name = NameEntry(subject, NID_commonName);
  out.organizational_unit = NameEntry(subject, NID_organizationalUnitName);
  return out;
}

std::optional<PeerCertificate> PeerCertificateOf(
    const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return std::nullopt;
  const std::optional<std::string> transport =
      FirstProperty(*auth, GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME);
  if (transport != GRPC_SSL_TRANSPORT_SECURITY_TYPE) return std::nullopt;
  const std::optional<std::string> pem =
      FirstProperty(*auth, GRPC_X509_PEM_CERT_PROPERTY_NAME);
  if (pem.has_value()) {
    absl::StatusOr<PeerCertificate> parsed = PeerCertificateFromPem(*pem);
    if (parsed.ok()) return *parsed;
  }
  // Without the PEM, the CN alone (no role).
  const std::optional<std::string> cn =
      FirstProperty(*auth, GRPC_X509_CN_PROPERTY_NAME);
  if (!cn.has_value()) return std::nullopt;
  return PeerCertificate{*cn, ""};
}

std::optional<std::string> AuthorizationOf(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

absl::StatusOr<Principal> Authenticator::Resolve(
    const std::optional<std::string>& authorization,
    const std::optional<PeerCertificate>& certificate) const {
  if (options_.insecure) return Principal{};
  if (authorization.has_value()) {
    constexpr absl::string_view kBearer = "Bearer ";
    if (!absl::StartsWith(*authorization, kBearer)) {
      return absl::UnauthenticatedError(
          "the authorization metadata must be `Bearer <token>`");
    }
    const TokenEntry* entry =
        options_.tokens.Find(absl::string_view(*authorization).substr(
            kBearer.size()));
    if (entry == nullptr) {
      return absl::UnauthenticatedError(
          "the bearer token is not known to this controller (check "
          "--token_file)");
    }
    return Principal{entry->role == TokenRole::kAdmin ? Principal::Kind::kAdmin
                                                      : Principal::Kind::kUser,
                     entry->user};
  }
  if (certificate.has_value() && !certificate->common_name.empty()) {
    const std::string& ou = certificate->organizational_unit;
    if (ou == "worker") {
      return Principal{Principal::Kind::kWorker, certificate->common_name};
    }
    if (ou == "admin") {
      return Principal{Principal::Kind::kAdmin, certificate->common_name};
    }
    if (ou == "user") {
      return Principal{Principal::Kind::kUser, certificate->common_name};
    }
  }
  return absl::UnauthenticatedError(
      "no credentials: send a bearer token (--token_file) or a client "
      "certificate signed by the cluster CA with OU=admin, user or worker "
      "(--tls_cert, --tls_key)");
}

bool IsControllerPeer(const std::optional<PeerCertificate>& certificate,
                      absl::string_view controller_identity) {
  return certificate.has_value() && !controller_identity.empty() &&
         certificate->common_name == controller_identity;
}

}  // namespace meshcast::security
