#include "security/cert_authority.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"

namespace meshcast::security {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using EvpKey = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Store = std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>>;
using StoreCtx =
    std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
using Extension =
    std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;

// The queued OpenSSL errors as text (and clears the queue).
std::string OpenSslErrors() {
  std::string out;
  unsigned long code;
  while ((code = ERR_get_error()) != 0) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof(buffer));
    if (!out.empty()) out += "; ";
    out += buffer;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

absl::Status OpenSslError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", OpenSslErrors()));
}

absl::StatusOr<EvpKey> NewKey() {
  EvpKey key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("cannot generate a P-256 key");
  return key;
}

absl::StatusOr<EvpKey> ParseKey(const std::string& pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  EvpKey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) return OpenSslError("cannot read the CA key");
  return key;
}

absl::StatusOr<Cert> ParseCert(const std::string& pem, absl::string_view what) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) return OpenSslError(absl::StrCat("cannot read ", what));
  return cert;
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr,
                               nullptr) != 1) {
    return OpenSslError("cannot encode a key");
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, size);
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_X509(bio.get(), cert) != 1) {
    return OpenSslError("cannot encode a certificate");
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, size);
}

absl::Status SetName(X509_NAME* name, const std::string& common_name,
                     const std::string& organizational_unit) {
  const auto add = [name](const char* field, const std::string& value) {
    return X509_NAME_add_entry_by_txt(
               name, field, MBSTRING_UTF8,
               reinterpret_cast<const unsigned char*>(value.data()),
               static_cast<int>(value.size()), -1, 0) == 1;
  };
  if (!add("O", "meshcast") ||
      (!organizational_unit.empty() && !add("OU", organizational_unit)) ||
      !add("CN", common_name)) {
    return OpenSslError("cannot set the certificate's subject");
  }
  return absl::OkStatus();
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid,
                          const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  Extension ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (ext == nullptr || X509_add_ext(cert, ext.get(), -1) != 1) {
    return OpenSslError(absl::StrCat("cannot add the extension ",
                                     OBJ_nid2sn(nid), " = ", value));
  }
  return absl::OkStatus();
}

// A certificate for `key` named `common_name`, with a random serial and the
// validity period [now - 1 h, now + validity) (the hour absorbs clock skew
// between the machines of a cluster).
absl::StatusOr<Cert> NewCert(EVP_PKEY* key, const std::string& common_name,
                             const std::string& organizational_unit,
                             absl::Duration validity) {
  Cert cert(X509_new());
  if (cert == nullptr) return OpenSslError("cannot allocate a certificate");
  X509_set_version(cert.get(), 2);  // v3
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) {
    return OpenSslError("cannot draw a serial number");
  }
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()),
                  static_cast<long>(absl::ToInt64Seconds(validity)));
  X509_set_pubkey(cert.get(), key);
  RETURN_IF_ERROR(SetName(X509_get_subject_name(cert.get()), common_name,
                          organizational_unit));
  return cert;
}

bool LooksLikeIp(const std::string& text) {
  ASN1_OCTET_STRING* ip = a2i_IPADDRESS(text.c_str());
  if (ip == nullptr) return false;
  ASN1_OCTET_STRING_free(ip);
  return true;
}

}  // namespace

absl::StatusOr<KeyAndCert> CreateCertificateAuthority(
    const std::string& common_name, absl::Duration validity) {
  if (common_name.empty()) {
    return absl::InvalidArgumentError("the CA's common name must not be empty");
  }
  ASSIGN_OR_RETURN(EvpKey key, NewKey());
  ASSIGN_OR_RETURN(Cert cert, NewCert(key.get(), common_name, "", validity));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(),
                               NID_basic_constraints, "critical,CA:TRUE"));
  RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_key_usage,
                               "critical,keyCertSign,cRLSign"));
  RETURN_IF_ERROR(
      AddExtension(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) {
    return OpenSslError("cannot sign the CA certificate");
  }
  KeyAndCert out;
  ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  ASSIGN_OR_RETURN(out.cert_pem, CertPem(cert.get()));
  return out;
}

absl::StatusOr<KeyAndCert> IssueCertificate(const KeyAndCert& ca,
                                            const CertRequest& request) {
  if (request.common_name.empty()) {
    return absl::InvalidArgumentError(
        "the certificate's common_name must not be empty");
  }
  std::vector<std::string> alt_names;
  for (const std::string& dns : request.dns_names) {
    if (dns.empty() || dns.find_first_of(",: ") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dns_names: \"", dns.substr(0, 64),
          "\" is not a DNS name (no empty names, commas, colons or spaces)"));
    }
    alt_names.push_back(absl::StrCat("DNS:", dns));
  }
  for (const std::string& ip : request.ip_addresses) {
    if (!LooksLikeIp(ip)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ip_addresses: \"", ip.substr(0, 64), "\" is not an IP address"));
    }
    alt_names.push_back(absl::StrCat("IP:", ip));
  }
  ASSIGN_OR_RETURN(EvpKey ca_key, ParseKey(ca.key_pem));
  ASSIGN_OR_RETURN(Cert ca_cert, ParseCert(ca.cert_pem, "the CA certificate"));
  ASSIGN_OR_RETURN(EvpKey key, NewKey());
  ASSIGN_OR_RETURN(Cert cert, NewCert(key.get(), request.common_name,
                                      request.organizational_unit,
                                      request.validity));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get()));
  RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert.get(),
                               NID_basic_constraints, "critical,CA:FALSE"));
  RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert.get(), NID_key_usage,
                               "critical,digitalSignature,keyEncipherment"));
  RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert.get(), NID_ext_key_usage,
                               "serverAuth,clientAuth"));
  RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert.get(),
                               NID_subject_key_identifier, "hash"));
  RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert.get(),
                               NID_authority_key_identifier, "keyid:always"));
  if (!alt_names.empty()) {
    RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert.get(),
                                 NID_subject_alt_name,
                                 absl::StrJoin(alt_names, ",")));
  }
  if (X509_sign(cert.get(), ca_key.get(), EVP_sha256()) == 0) {
    return OpenSslError("cannot sign the certificate");
  }
  KeyAndCert out;
  ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  ASSIGN_OR_RETURN(out.cert_pem, CertPem(cert.get()));
  return out;
}

namespace {

absl::Status WriteWithMode(const std::string& path, const std::string& contents,
                           mode_t mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                      mode);
  if (fd < 0) {
    const std::string reason = std::strerror(errno);
    return errno == ENOENT
               ? absl::NotFoundError(absl::StrCat(path, ": ", reason))
               : absl::PermissionDeniedError(absl::StrCat(path, ": ", reason));
  }
  // The file may have existed with a wider mode.
  bool ok = fchmod(fd, mode) == 0;
  size_t written = 0;
  while (ok && written < contents.size()) {
    const ssize_t n =
        write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) written += static_cast<size_t>(n);
  }
  ok = (close(fd) == 0) && ok;
  if (!ok) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WritePrivateFile(const std::string& path,
                              const std::string& contents) {
  return WriteWithMode(path, contents, 0600);
}

absl::Status WriteKeyAndCert(const KeyAndCert& pair,
                             const std::string& key_path,
                             const std::string& cert_path) {
  RETURN_IF_ERROR(WriteWithMode(key_path, pair.key_pem, 0600));
  return WriteWithMode(cert_path, pair.cert_pem, 0644);
}

absl::Status VerifyCertificate(const std::string& ca_pem,
                               const std::string& cert_pem,
                               const std::string& host) {
  ASSIGN_OR_RETURN(Cert ca, ParseCert(ca_pem, "the CA certificate"));
  ASSIGN_OR_RETURN(Cert cert, ParseCert(cert_pem, "the certificate"));
  Store store(X509_STORE_new());
  StoreCtx ctx(X509_STORE_CTX_new());
  if (store == nullptr || ctx == nullptr ||
      X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1) {
    return OpenSslError("cannot set up verification");
  }
  if (!host.empty()) {
    X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx.get());
    const int set = LooksLikeIp(host)
                        ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str())
                        : X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
    if (set != 1) return OpenSslError("cannot set the host to verify");
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return absl::UnauthenticatedError(
        absl::StrCat("certificate does not verify: ",
                     X509_verify_cert_error_string(error)));
  }
  return absl::OkStatus();
}

}  // namespace meshcast::security
