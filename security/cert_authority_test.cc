#include "security/cert_authority.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "security/principal.h"

namespace meshcast::security {
namespace {

using ::testing::HasSubstr;

CertRequest WorkerRequest(const std::string& name) {
  CertRequest request;
  request.common_name = name;
  request.organizational_unit = "worker";
  request.dns_names = {name, "localhost"};
  request.ip_addresses = {"127.0.0.1"};
  return request;
}

TEST(CertAuthorityTest, IssuedCertificatesVerifyAgainstTheirCa) {
  absl::StatusOr<KeyAndCert> ca = CreateCertificateAuthority("test CA");
  ASSERT_TRUE(ca.ok()) << ca.status();
  EXPECT_THAT(ca->key_pem, HasSubstr("BEGIN PRIVATE KEY"));
  EXPECT_THAT(ca->cert_pem, HasSubstr("BEGIN CERTIFICATE"));
  // The CA is self-signed: it verifies against itself.
  EXPECT_TRUE(VerifyCertificate(ca->cert_pem, ca->cert_pem).ok());

  absl::StatusOr<KeyAndCert> leaf = IssueCertificate(*ca, WorkerRequest("w0"));
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  EXPECT_TRUE(VerifyCertificate(ca->cert_pem, leaf->cert_pem).ok());
  // The SANs: the name, localhost and 127.0.0.1; not another name.
  EXPECT_TRUE(VerifyCertificate(ca->cert_pem, leaf->cert_pem, "w0").ok());
  EXPECT_TRUE(
      VerifyCertificate(ca->cert_pem, leaf->cert_pem, "localhost").ok());
  EXPECT_TRUE(
      VerifyCertificate(ca->cert_pem, leaf->cert_pem, "127.0.0.1").ok());
  EXPECT_EQ(VerifyCertificate(ca->cert_pem, leaf->cert_pem, "w1").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(VerifyCertificate(ca->cert_pem, leaf->cert_pem, "10.0.0.1").code(),
            absl::StatusCode::kUnauthenticated);

  absl::StatusOr<PeerCertificate> names = PeerCertificateFromPem(leaf->cert_pem);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(names->common_name, "w0");
  EXPECT_EQ(names->organizational_unit, "worker");
}

TEST(CertAuthorityTest, ACertificateOfAnotherCaDoesNotVerify) {
  absl::StatusOr<KeyAndCert> ca = CreateCertificateAuthority("cluster CA");
  absl::StatusOr<KeyAndCert> rogue = CreateCertificateAuthority("cluster CA");
  ASSERT_TRUE(ca.ok() && rogue.ok());
  absl::StatusOr<KeyAndCert> forged =
      IssueCertificate(*rogue, WorkerRequest("w0"));
  ASSERT_TRUE(forged.ok());
  const absl::Status status = VerifyCertificate(ca->cert_pem, forged->cert_pem);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(status.message(), HasSubstr("does not verify"));
  // A leaf cannot act as a CA: a certificate it "signs" does not verify.
  absl::StatusOr<KeyAndCert> leaf = IssueCertificate(*ca, WorkerRequest("w0"));
  ASSERT_TRUE(leaf.ok());
  absl::StatusOr<KeyAndCert> grandchild =
      IssueCertificate(*leaf, WorkerRequest("w1"));
  ASSERT_TRUE(grandchild.ok());
  EXPECT_FALSE(VerifyCertificate(ca->cert_pem, grandchild->cert_pem).ok());
}

TEST(CertAuthorityTest, ExpiredCertificatesDoNotVerify) {
  absl::StatusOr<KeyAndCert> ca = CreateCertificateAuthority("test CA");
  ASSERT_TRUE(ca.ok());
  CertRequest request = WorkerRequest("w0");
  // notBefore is an hour back; a validity of -2 h ended an hour ago.
  request.validity = absl::Hours(-2);
  absl::StatusOr<KeyAndCert> leaf = IssueCertificate(*ca, request);
  ASSERT_TRUE(leaf.ok());
  const absl::Status status = VerifyCertificate(ca->cert_pem, leaf->cert_pem);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(status.message(), HasSubstr("expired"));
}

TEST(CertAuthorityTest, RefusesBadRequests) {
  absl::StatusOr<KeyAndCert> ca = CreateCertificateAuthority("test CA");
  ASSERT_TRUE(ca.ok());
  CertRequest no_name;
  EXPECT_EQ(IssueCertificate(*ca, no_name).status().code(),
            absl::StatusCode::kInvalidArgument);
  CertRequest bad_ip = WorkerRequest("w0");
  bad_ip.ip_addresses = {"300.1.1.1"};
  EXPECT_EQ(IssueCertificate(*ca, bad_ip).status().code(),
            absl::StatusCode::kInvalidArgument);
  CertRequest bad_dns = WorkerRequest("w0");
  bad_dns.dns_names = {"a,DNS:evil"};
  EXPECT_EQ(IssueCertificate(*ca, bad_dns).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateCertificateAuthority("").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CertAuthorityTest, WritesKeysPrivateAndCertificatesReadable) {
  absl::StatusOr<KeyAndCert> ca = CreateCertificateAuthority("test CA");
  ASSERT_TRUE(ca.ok());
  const std::string base = "/tmp/cert_authority_test." + std::to_string(getpid());
  const std::string key = base + ".key";
  const std::string cert = base + ".crt";
  // An existing key file with a wide mode is narrowed.
  std::ofstream(key) << "old";
  chmod(key.c_str(), 0666);
  ASSERT_TRUE(WriteKeyAndCert(*ca, key, cert).ok());
  struct stat st;
  ASSERT_EQ(stat(key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(cert.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  std::stringstream text;
  text << std::ifstream(key).rdbuf();
  EXPECT_EQ(text.str(), ca->key_pem);
  unlink(key.c_str());
  unlink(cert.c_str());
  EXPECT_EQ(WritePrivateFile("/nonexistent-dir/x", "y").code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace meshcast::security
