#include "util/basic_auth.h"

#include <crypt.h>

#include <string>

#include "gtest/gtest.h"

namespace meshcast {
namespace {

// A bcrypt hash of `password` made here (cost 4: the lowest, so tests are
// fast), independently of the code under test.
std::string Bcrypt(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  EXPECT_NE(crypt_gensalt_rn("$2b$", 4, nullptr, 0, salt, sizeof(salt)),
            nullptr);
  crypt_data data{};
  const char* hash = crypt_r(password.c_str(), salt, &data);
  EXPECT_NE(hash, nullptr);
  return hash;
}

TEST(BasicAuthTest, AcceptsTheRightPasswordOnly) {
  BasicAuth auth({{"prometheus", Bcrypt("s3cret")}});
  ASSERT_TRUE(auth.enabled());
  EXPECT_TRUE(auth.Allows("prometheus", "s3cret"));
  EXPECT_FALSE(auth.Allows("prometheus", "s3cret2"));
  EXPECT_FALSE(auth.Allows("prometheus", ""));
  EXPECT_FALSE(auth.Allows("grafana", "s3cret"));
  EXPECT_FALSE(auth.Allows("", ""));
  // Remembering good credentials must not let wrong ones through after it.
  EXPECT_TRUE(auth.Allows("prometheus", "s3cret"));
  EXPECT_FALSE(auth.Allows("prometheus", "S3cret"));
  EXPECT_FALSE(auth.Allows("prometheus", "s3cret "));
}

TEST(BasicAuthTest, RememberedCredentialsDoNotBleedAcrossUsers) {
  BasicAuth auth({{"a", Bcrypt("b")}, {"c", Bcrypt("d")}});
  EXPECT_TRUE(auth.Allows("a", "b"));
  EXPECT_FALSE(auth.Allows("c", "b"));
  EXPECT_FALSE(auth.Allows("a", "d"));
  EXPECT_TRUE(auth.Allows("c", "d"));
}

TEST(BasicAuthTest, NoUsersAllowsEverything) {
  BasicAuth auth({});
  EXPECT_FALSE(auth.enabled());
  EXPECT_TRUE(auth.Allows("", ""));
}

TEST(BasicAuthTest, HashComparison) {
  const std::string hash = Bcrypt("pw");
  EXPECT_TRUE(PasswordMatchesHash("pw", hash));
  EXPECT_FALSE(PasswordMatchesHash("pw ", hash));
  EXPECT_FALSE(PasswordMatchesHash("pw", "not-a-hash"));
}

}  // namespace
}  // namespace meshcast
