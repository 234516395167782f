#include "security/token_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::security {
namespace {

using ::testing::HasSubstr;

constexpr char kAdminToken[] = "0123456789abcdef-admin";
constexpr char kUserToken[] = "0123456789abcdef-alice";

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name + "." +
         std::to_string(getpid());
}

std::string WriteFile(const std::string& name, const std::string& text,
                      mode_t mode) {
  const std::string path = TempPath(name);
  unlink(path.c_str());
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
  return path;
}

TEST(TokenTableTest, ParsesPrincipalsCommentsAndBlankLines) {
  absl::StatusOr<TokenTable> table = TokenTable::Parse(
      std::string("# tokens\n\n") + kAdminToken + " root admin\n" +
          kUserToken + "\talice  user\n",
      "t");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 2u);
  const TokenEntry* admin = table->Find(kAdminToken);
  ASSERT_NE(admin, nullptr);
  EXPECT_EQ(admin->user, "root");
  EXPECT_EQ(admin->role, TokenRole::kAdmin);
  const TokenEntry* alice = table->Find(kUserToken);
  ASSERT_NE(alice, nullptr);
  EXPECT_EQ(alice->user, "alice");
  EXPECT_EQ(alice->role, TokenRole::kUser);
  EXPECT_EQ(table->Find("0123456789abcdef-nobody"), nullptr);
  EXPECT_EQ(table->Find(""), nullptr);
  // A prefix of a token is not the token.
  EXPECT_EQ(table->Find("0123456789abcdef"), nullptr);
}

TEST(TokenTableTest, RefusesBadLinesNamingTheLineButNotTheToken) {
  struct Case {
    std::string text;
    std::string expected;
  };
  const Case cases[] = {
      {std::string(kAdminToken) + " root\n", "t:1: expected"},
      {std::string("\n") + kAdminToken + " root superuser\n",
       "t:2: role must be admin or user"},
      {"short root admin\n", "at least 16"},
      {std::string(kAdminToken) + " r/oot admin\n", "the user must be"},
      {std::string(kAdminToken) + " a admin\n" + kAdminToken + " b user\n",
       "t:2: this token is listed twice"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TokenTable> table = TokenTable::Parse(c.text, "t");
    ASSERT_FALSE(table.ok()) << c.text;
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(table.status().message(), HasSubstr(c.expected));
    EXPECT_THAT(table.status().message(),
                ::testing::Not(HasSubstr(kAdminToken)));
  }
}

TEST(TokensFileTest, ReadsAPrivateFile) {
  const std::string path = WriteFile(
      "tokens", std::string(kAdminToken) + " root admin\n", 0600);
  absl::StatusOr<TokenTable> table = ReadTokensFile(path);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_NE(table->Find(kAdminToken), nullptr);
}

TEST(TokensFileTest, RefusesGroupOrWorldReadableFiles) {
  for (mode_t mode : {0640, 0604, 0644, 0660}) {
    const std::string path = WriteFile(
        "tokens-open", std::string(kAdminToken) + " root admin\n", mode);
    absl::StatusOr<TokenTable> table = ReadTokensFile(path);
    ASSERT_FALSE(table.ok()) << std::oct << mode;
    EXPECT_EQ(table.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(table.status().message(), HasSubstr("--tokens_file"));
    EXPECT_THAT(table.status().message(), HasSubstr("chmod 600"));
  }
}

TEST(TokensFileTest, MissingFileIsNotFound) {
  absl::StatusOr<TokenTable> table = ReadTokensFile(TempPath("no-such"));
  EXPECT_EQ(table.status().code(), absl::StatusCode::kNotFound);
}

TEST(TokenFileTest, ReadsTheFirstTokenLine) {
  const std::string path = WriteFile(
      "token", std::string("# admin\n  ") + kAdminToken + "  \n", 0400);
  absl::StatusOr<std::string> token = ReadTokenFile(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, kAdminToken);
}

TEST(TokenFileTest, RefusesOpenModesAndEmptyFiles) {
  const std::string open = WriteFile("token-open", kAdminToken, 0644);
  EXPECT_EQ(ReadTokenFile(open).status().code(),
            absl::StatusCode::kPermissionDenied);
  const std::string empty = WriteFile("token-empty", "# nothing\n", 0600);
  EXPECT_EQ(ReadTokenFile(empty).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NewRandomTokenTest, IsLongHexAndFresh) {
  absl::StatusOr<std::string> a = NewRandomToken();
  absl::StatusOr<std::string> b = NewRandomToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
  EXPECT_TRUE(TokenTable::Parse(*a + " u user", "t").ok());
}

}  // namespace
}  // namespace meshcast::security
