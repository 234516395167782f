// /metrics over HTTPS and behind basic auth, through real sockets: the
// server under test against an OpenSSL client written here, with keys and
// certificates made at test time.
#include <arpa/inet.h>
#include <crypt.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/metrics.h"
#include "util/metrics_http_server.h"
#include "util/web_config.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct CertFree {
  void operator()(X509* cert) const { X509_free(cert); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

// A certificate for `cn` with `key`, signed by `issuer` (self-signed when
// null), valid for a day; a CA when `is_ca`.
Cert MakeCert(const std::string& cn, EVP_PKEY* key, X509* issuer,
              EVP_PKEY* issuer_key, bool is_ca) {
  static long serial = 1;
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial++);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 86400);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(
      name, "CN", MBSTRING_ASC,
      reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer != nullptr
                                       ? X509_get_subject_name(issuer)
                                       : name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer != nullptr ? issuer : cert.get(), cert.get(),
                 nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(
      nullptr, &ctx, NID_basic_constraints,
      is_ca ? "critical,CA:TRUE" : "CA:FALSE");
  X509_add_ext(cert.get(), ext, -1);
  X509_EXTENSION_free(ext);
  if (!is_ca) {
    ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name,
                              "IP:127.0.0.1");
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key,
            EVP_sha256());
  return cert;
}

void WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  if (cert != nullptr) PEM_write_X509(f, cert);
  if (key != nullptr) {
    PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  }
  fclose(f);
}

class MetricsTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/metrics_tls_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    ca_key_.reset(EVP_EC_gen("P-256"));
    ca_ = MakeCert("test-ca", ca_key_.get(), nullptr, nullptr, true);
    server_key_.reset(EVP_EC_gen("P-256"));
    server_ = MakeCert("127.0.0.1", server_key_.get(), ca_.get(),
                       ca_key_.get(), false);
    client_key_.reset(EVP_EC_gen("P-256"));
    client_ = MakeCert("prometheus", client_key_.get(), ca_.get(),
                       ca_key_.get(), false);
    WritePem(dir_ + "/ca.crt", ca_.get(), nullptr);
    WritePem(dir_ + "/tls.crt", server_.get(), nullptr);
    WritePem(dir_ + "/tls.key", nullptr, server_key_.get());
    prometheus::BuildCounter()
        .Name("meshcast_test_scrapes_total")
        .Help("Test.")
        .Register(*registry_)
        .Add({})
        .Increment(7);
  }
  void TearDown() override {
    std::string command = "rm -rf " + dir_;
    (void)!system(command.c_str());
  }

  TlsServerConfig Tls(ClientAuth auth = ClientAuth::kNone) const {
    TlsServerConfig tls;
    tls.cert_file = dir_ + "/tls.crt";
    tls.key_file = dir_ + "/tls.key";
    if (auth != ClientAuth::kNone) tls.client_ca_file = dir_ + "/ca.crt";
    tls.client_auth = auth;
    return tls;
  }

  static int Connect(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
        0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  static std::string Request(const std::string& authorization) {
    std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    if (!authorization.empty()) {
      absl::StrAppend(&request, "Authorization: ", authorization, "\r\n");
    }
    return request + "Connection: close\r\n\r\n";
  }

  // GET /metrics over TLS, verifying the server against the test CA;
  // "" when the handshake fails.
  std::string HttpsGet(int port, const std::string& authorization = "",
                       bool with_client_cert = false) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(ctx, (dir_ + "/ca.crt").c_str(), nullptr);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (with_client_cert) {
      SSL_CTX_use_certificate(ctx, client_.get());
      SSL_CTX_use_PrivateKey(ctx, client_key_.get());
    }
    std::string response;
    const int fd = Connect(port);
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (fd >= 0 && SSL_connect(ssl) == 1) {
      const std::string request = Request(authorization);
      SSL_write(ssl, request.data(), static_cast<int>(request.size()));
      char buffer[4096];
      int n;
      while ((n = SSL_read(ssl, buffer, sizeof(buffer))) > 0) {
        response.append(buffer, n);
      }
    }
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    if (fd >= 0) close(fd);
    return response;
  }

  static std::string HttpGet(int port, const std::string& authorization) {
    const int fd = Connect(port);
    if (fd < 0) return "";
    const std::string request = Request(authorization);
    send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string response;
    char buffer[4096];
    ssize_t n;
    while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
      response.append(buffer, n);
    }
    close(fd);
    return response;
  }

  static std::string Bcrypt(const std::string& password) {
    char salt[CRYPT_GENSALT_OUTPUT_SIZE];
    crypt_gensalt_rn("$2b$", 4, nullptr, 0, salt, sizeof(salt));
    crypt_data data{};
    return crypt_r(password.c_str(), salt, &data);
  }

  std::string dir_;
  Key ca_key_, server_key_, client_key_;
  Cert ca_, server_, client_;
  std::shared_ptr<prometheus::Registry> registry_ =
      std::make_shared<prometheus::Registry>();
};

TEST_F(MetricsTlsTest, ServesMetricsOverTls) {
  WebConfig web;
  web.tls = Tls();
  auto server = MetricsHttpServer::Start("127.0.0.1:0", registry_, web);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string response = HttpsGet((*server)->port());
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(response, HasSubstr("meshcast_test_scrapes_total 7\n"));
  // Plain HTTP on the TLS port gets no metrics.
  EXPECT_THAT(HttpGet((*server)->port(), ""),
              ::testing::Not(HasSubstr("meshcast_test_scrapes_total")));
  // Many scrapes in a row: connections end and their threads are reaped.
  for (int i = 0; i < 20; ++i) {
    EXPECT_THAT(HttpsGet((*server)->port()), StartsWith("HTTP/1.1 200"));
  }
}

TEST_F(MetricsTlsTest, BasicAuthOverTls) {
  WebConfig web;
  web.tls = Tls();
  web.basic_auth_users["prometheus"] = Bcrypt("pw");
  auto server = MetricsHttpServer::Start("127.0.0.1:0", registry_, web);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  const std::string denied = HttpsGet(port);
  EXPECT_THAT(denied, StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(denied, HasSubstr("WWW-Authenticate: Basic"));
  EXPECT_THAT(denied, ::testing::Not(HasSubstr("meshcast_test_scrapes_total")));
  EXPECT_THAT(HttpsGet(port, "Basic " + absl::Base64Escape("prometheus:no")),
              StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(HttpsGet(port, "Basic " + absl::Base64Escape("prometheus:pw")),
              HasSubstr("meshcast_test_scrapes_total 7\n"));
}

TEST_F(MetricsTlsTest, BasicAuthOverPlainHttp) {
  WebConfig web;
  web.basic_auth_users["prometheus"] = Bcrypt("pw");
  auto server = MetricsHttpServer::Start("127.0.0.1:0", registry_, web);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_THAT(HttpGet(port, ""), StartsWith("HTTP/1.1 401"));
  // Malformed or foreign credentials are refused like missing ones.
  for (const std::string& header : std::vector<std::string>{
           "Bearer abc", "Basic !!!notbase64",
        "Basic " + absl::Base64Escape("nocolon"),
        "Basic " + absl::Base64Escape("grafana:pw"),
        "Basic " + absl::Base64Escape("prometheus:pw2")}) {
    const std::string response = HttpGet(port, header);
    EXPECT_THAT(response, StartsWith("HTTP/1.1 401")) << header;
    EXPECT_THAT(response,
                ::testing::Not(HasSubstr("meshcast_test_scrapes_total")));
  }
  EXPECT_THAT(HttpGet(port, "Basic " + absl::Base64Escape("prometheus:pw")),
              HasSubstr("meshcast_test_scrapes_total 7\n"));
}

TEST_F(MetricsTlsTest, RequiredClientCertificateIsVerified) {
  WebConfig web;
  web.tls = Tls(ClientAuth::kRequireAndVerify);
  auto server = MetricsHttpServer::Start("127.0.0.1:0", registry_, web);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_THAT(HttpsGet(port, "", /*with_client_cert=*/false),
              ::testing::Not(HasSubstr("meshcast_test_scrapes_total")));
  EXPECT_THAT(HttpsGet(port, "", /*with_client_cert=*/true),
              HasSubstr("meshcast_test_scrapes_total 7\n"));
}

TEST_F(MetricsTlsTest, BadKeyFilesAreNamed) {
  WebConfig web;
  web.tls = Tls();
  web.tls->key_file = dir_ + "/ca.crt";  // a certificate, not a key
  auto server = MetricsHttpServer::Start("127.0.0.1:0", registry_, web);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("key_file"));
  EXPECT_THAT(server.status().message(), HasSubstr("ca.crt"));
}

TEST_F(MetricsTlsTest, StopsWithAConnectionOpen) {
  WebConfig web;
  web.tls = Tls();
  auto server = MetricsHttpServer::Start("127.0.0.1:0", registry_, web);
  ASSERT_TRUE(server.ok()) << server.status();
  const int idle = Connect((*server)->port());  // never says hello
  ASSERT_GE(idle, 0);
  server->reset();  // must not wait for the handshake timeout
  close(idle);
}

}  // namespace
}  // namespace meshcast
