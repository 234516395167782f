#include "util/basic_auth.h"

#include <crypt.h>

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
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

std::string Header(const std::string& user, const std::string& password) {
  return absl::StrCat("Basic ", absl::Base64Escape(user + ":" + password));
}

TEST(BasicAuthTest, AcceptsTheRightPasswordOnly) {
  BasicAuth auth({{"prometheus", Bcrypt("s3cret")}});
  ASSERT_TRUE(auth.enabled());
  EXPECT_TRUE(auth.Allows(Header("prometheus", "s3cret")));
  EXPECT_FALSE(auth.Allows(Header("prometheus", "s3cret2")));
  EXPECT_FALSE(auth.Allows(Header("prometheus", "")));
  EXPECT_FALSE(auth.Allows(Header("grafana", "s3cret")));
  // Remembering a good header must not let a wrong one through after it.
  EXPECT_TRUE(auth.Allows(Header("prometheus", "s3cret")));
  EXPECT_FALSE(auth.Allows(Header("prometheus", "S3cret")));
}

TEST(BasicAuthTest, MalformedHeadersAreRefused) {
  BasicAuth auth({{"u", Bcrypt("p")}});
  EXPECT_FALSE(auth.Allows(""));
  EXPECT_FALSE(auth.Allows("Bearer abc"));
  EXPECT_FALSE(auth.Allows("Basic !!!notbase64"));
  EXPECT_FALSE(auth.Allows(absl::StrCat("Basic ", absl::Base64Escape("nocolon"))));
  EXPECT_TRUE(auth.Allows(absl::StrCat("basic  ", absl::Base64Escape("u:p"))));
}

TEST(BasicAuthTest, NoUsersAllowsEverything) {
  BasicAuth auth({});
  EXPECT_FALSE(auth.enabled());
  EXPECT_TRUE(auth.Allows(""));
}

TEST(BasicAuthTest, HashComparison) {
  const std::string hash = Bcrypt("pw");
  EXPECT_TRUE(PasswordMatchesHash("pw", hash));
  EXPECT_FALSE(PasswordMatchesHash("pw ", hash));
  EXPECT_FALSE(PasswordMatchesHash("pw", "not-a-hash"));
}

}  // namespace
}  // namespace meshcast
