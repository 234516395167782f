#include "security/cluster_credentials.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "security/cert_authority.h"
#include "security/principal.h"
#include "security/token_file.h"

namespace meshcast::security {
namespace {

std::string Read(const std::string& path) {
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

mode_t Mode(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? (st.st_mode & 0777) : 0;
}

class ClusterCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/cluster_credentials_test." + std::to_string(getpid()) + "/tls";
  }
  void TearDown() override {
    std::system(("rm -rf " + dir_.substr(0, dir_.rfind('/'))).c_str());
  }
  std::string dir_;
};

TEST_F(ClusterCredentialsTest, WritesAVerifiableClusterWithPrivateSecrets) {
  absl::StatusOr<ClusterCredentialFiles> files =
      WriteClusterCredentials(dir_, {"worker-0", "worker-1"});
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(Mode(dir_), 0700u);
  const std::string ca = Read(files->ca_cert);
  // The controller: its CN, valid for 127.0.0.1 and localhost.
  const std::string controller = Read(files->controller.cert);
  EXPECT_TRUE(VerifyCertificate(ca, controller, "127.0.0.1").ok());
  EXPECT_TRUE(VerifyCertificate(ca, controller, "localhost").ok());
  EXPECT_EQ(PeerCertificateFromPem(controller)->common_name,
            kControllerIdentity);
  // Each worker: CN = name, OU worker, valid for its name.
  ASSERT_EQ(files->workers.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const std::string name = "worker-" + std::to_string(i);
    const std::string cert = Read(files->workers[i].cert);
    EXPECT_TRUE(VerifyCertificate(ca, cert, name).ok()) << name;
    absl::StatusOr<PeerCertificate> peer = PeerCertificateFromPem(cert);
    EXPECT_EQ(peer->common_name, name);
    EXPECT_EQ(peer->organizational_unit, "worker");
    EXPECT_EQ(Mode(files->workers[i].key), 0600u);
  }
  EXPECT_FALSE(VerifyCertificate(ca, Read(files->workers[0].cert), "worker-1")
                   .ok());
  EXPECT_EQ(Mode(dir_ + "/ca.key"), 0600u);
  EXPECT_EQ(Mode(files->controller.key), 0600u);
  EXPECT_EQ(Mode(files->admin_token), 0600u);
  EXPECT_EQ(Mode(files->tokens), 0600u);
  // The admin token is in the tokens file as an admin.
  absl::StatusOr<std::string> token = ReadTokenFile(files->admin_token);
  ASSERT_TRUE(token.ok()) << token.status();
  absl::StatusOr<TokenTable> tokens = ReadTokensFile(files->tokens);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  const TokenEntry* admin = tokens->Find(*token);
  ASSERT_NE(admin, nullptr);
  EXPECT_EQ(admin->role, TokenRole::kAdmin);
}

TEST_F(ClusterCredentialsTest, KeepsTheCaAndTokensAcrossRuns) {
  absl::StatusOr<ClusterCredentialFiles> first =
      WriteClusterCredentials(dir_, {"worker-0"});
  ASSERT_TRUE(first.ok());
  const std::string ca = Read(first->ca_cert);
  const std::string token = Read(first->admin_token);
  const std::string old_worker = Read(first->workers[0].cert);
  absl::StatusOr<ClusterCredentialFiles> second =
      WriteClusterCredentials(dir_, {"worker-0", "worker-1"});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(Read(second->ca_cert), ca);
  EXPECT_EQ(Read(second->admin_token), token);
  EXPECT_NE(Read(second->workers[0].cert), old_worker);
  EXPECT_TRUE(VerifyCertificate(ca, Read(second->workers[1].cert)).ok());
}

TEST_F(ClusterCredentialsTest, RefusesNamesThatCannotBeCertificates) {
  for (const char* name : {"", "meshcast-controller", "a/b", "ca", "x y"}) {
    EXPECT_EQ(WriteClusterCredentials(dir_, {name}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
}

}  // namespace
}  // namespace meshcast::security
