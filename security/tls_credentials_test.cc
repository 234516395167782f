#include "security/tls_credentials.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::security {
namespace {

using ::testing::HasSubstr;

TEST(CheckTlsFlagsTest, NeitherTlsNorInsecureNamesTheFlags) {
  const absl::Status status =
      CheckTlsFlags(TlsFiles{}, false, "meshcast-controller", true);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--tls_cert"));
  EXPECT_THAT(status.message(), HasSubstr("--tls_key"));
  EXPECT_THAT(status.message(), HasSubstr("--tls_ca"));
  EXPECT_THAT(status.message(), HasSubstr("--insecure"));
}

TEST(CheckTlsFlagsTest, AcceptsFullTlsOrExplicitInsecure) {
  EXPECT_TRUE(CheckTlsFlags(TlsFiles{"c", "k", "a"}, false, "d", true).ok());
  EXPECT_TRUE(CheckTlsFlags(TlsFiles{}, true, "d", true).ok());
  // A client needs only the CA.
  EXPECT_TRUE(CheckTlsFlags(TlsFiles{"", "", "a"}, false, "c", false).ok());
}

TEST(CheckTlsFlagsTest, RefusesHalfConfigurations) {
  EXPECT_THAT(CheckTlsFlags(TlsFiles{"c", "", "a"}, false, "d", true).message(),
              HasSubstr("--tls_key"));
  EXPECT_THAT(CheckTlsFlags(TlsFiles{"c", "k", ""}, false, "d", true).message(),
              HasSubstr("missing: --tls_ca"));
  EXPECT_THAT(CheckTlsFlags(TlsFiles{"c", "k", "a"}, true, "d", true).message(),
              HasSubstr("do not give"));
  EXPECT_FALSE(CheckTlsFlags(TlsFiles{"c", "", "a"}, false, "c", false).ok());
}

TEST(MakeChannelCredentialsTest, NeverSendsATokenInTheClear) {
  EXPECT_TRUE(MakeChannelCredentials(TlsFiles{}).ok());
  EXPECT_EQ(MakeChannelCredentials(TlsFiles{}, "0123456789abcdef0")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ReadPemFileTest, NamesTheFlag) {
  const absl::StatusOr<std::string> pem =
      ReadPemFile("/nonexistent/ca.crt", "tls_ca");
  EXPECT_EQ(pem.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(pem.status().message(), HasSubstr("--tls_ca /nonexistent"));
}

}  // namespace
}  // namespace meshcast::security
