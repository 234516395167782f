#include "util/web_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

// A real bcrypt hash (of "secret", cost 4); the parser only checks its form.
constexpr char kHash[] =
    "$2b$04$abcdefghijklmnopqrstuuD7qz7bC3m0eYf5a0m4l9k8J6H2Z3Y1C";

TEST(WebConfigTest, ParsesTlsAndUsersAndResolvesRelativePaths) {
  const std::string yaml = std::string(R"(
tls_server_config:
  cert_file: tls.crt
  key_file: /abs/tls.key
  client_ca_file: ca.crt
  client_auth_type: RequireAndVerifyClientCert
  min_version: TLS13
basic_auth_users:
  prometheus: ')") + kHash + "'\n";
  absl::StatusOr<WebConfig> config = ParseWebConfig(yaml, "/etc/mc");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->tls.has_value());
  EXPECT_EQ(config->tls->cert_file, "/etc/mc/tls.crt");
  EXPECT_EQ(config->tls->key_file, "/abs/tls.key");
  EXPECT_EQ(config->tls->client_ca_file, "/etc/mc/ca.crt");
  EXPECT_EQ(config->tls->client_auth, ClientAuth::kRequireAndVerify);
  EXPECT_EQ(config->tls->min_version, "TLS13");
  ASSERT_EQ(config->basic_auth_users.size(), 1u);
  EXPECT_EQ(config->basic_auth_users.at("prometheus"), kHash);
}

TEST(WebConfigTest, EmptyFileTurnsNothingOn) {
  absl::StatusOr<WebConfig> config = ParseWebConfig("", "");
  ASSERT_TRUE(config.ok());
  EXPECT_FALSE(config->tls.has_value());
  EXPECT_TRUE(config->basic_auth_users.empty());
}

TEST(WebConfigTest, UnknownKeysAreErrorsNamingThem) {
  EXPECT_THAT(ParseWebConfig("basic_auth_user: {}\n", "").status().message(),
              HasSubstr("basic_auth_user is not a known key"));
  EXPECT_THAT(ParseWebConfig("tls_server_config:\n  cert_fle: a\n", "")
                  .status()
                  .message(),
              HasSubstr("tls_server_config.cert_fle is not supported"));
}

TEST(WebConfigTest, BadValuesNameTheFieldAndTheAllowedValues) {
  const absl::Status auth = ParseWebConfig(R"(
tls_server_config:
  cert_file: a
  key_file: b
  client_auth_type: Always
)",
                                           "")
                                .status();
  EXPECT_EQ(auth.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(auth.message(), HasSubstr("client_auth_type"));
  EXPECT_THAT(auth.message(), HasSubstr("RequireAndVerifyClientCert"));
  EXPECT_THAT(ParseWebConfig("tls_server_config:\n  cert_file: a\n", "")
                  .status()
                  .message(),
              HasSubstr("needs both cert_file and key_file"));
  EXPECT_THAT(ParseWebConfig(R"(
tls_server_config:
  cert_file: a
  key_file: b
  client_auth_type: VerifyClientCertIfGiven
)",
                             "")
                  .status()
                  .message(),
              HasSubstr("client_ca_file is required"));
  EXPECT_THAT(ParseWebConfig("tls_server_config:\n  cert_file: a\n  key_file: "
                             "b\n  min_version: SSL3\n",
                             "")
                  .status()
                  .message(),
              HasSubstr("TLS10, TLS11, TLS12, TLS13"));
}

TEST(WebConfigTest, PlainPasswordsAreRefused) {
  const absl::Status status =
      ParseWebConfig("basic_auth_users:\n  alice: hunter2\n", "").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("basic_auth_users.alice"));
  EXPECT_THAT(status.message(), HasSubstr("bcrypt"));
  EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("hunter2")));
}

TEST(WebConfigTest, InvalidYamlAndMissingFile) {
  EXPECT_EQ(ParseWebConfig("tls_server_config: [", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadWebConfig("/nonexistent/web.yml").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace meshcast
