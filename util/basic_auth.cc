#include "util/basic_auth.h"

#include <crypt.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace meshcast {

bool PasswordMatchesHash(const std::string& password, const std::string& hash) {
  auto data = std::make_unique<crypt_data>();
  std::memset(data.get(), 0, sizeof(crypt_data));
  const char* computed = crypt_r(password.c_str(), hash.c_str(), data.get());
  // crypt_r returns a string starting with '*' on failure (unknown method).
  if (computed == nullptr || computed[0] == '*') return false;
  const size_t n = std::strlen(computed);
  if (n != hash.size()) return false;
  // Compare in constant time: the length is public, the bytes are not.
  unsigned char diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= computed[i] ^ hash[i];
  return diff == 0;
}

bool BasicAuth::Check(const std::string& user,
                      const std::string& password) const {
  const auto entry = users_.find(user);
  if (entry == users_.end()) return false;
  return PasswordMatchesHash(password, entry->second);
}

bool BasicAuth::Allows(const std::string& user,
                       const std::string& password) const {
  if (users_.empty()) return true;
  // NUL appears in neither a user name nor a password of a header.
  const std::string key = absl::StrCat(user, std::string(1, '\0'), password);
  {
    absl::MutexLock lock(&mu_);
    if (remembered_.contains(key)) return true;
  }
  if (!Check(user, password)) return false;
  absl::MutexLock lock(&mu_);
  if (remembered_.size() >= kMaxRemembered) remembered_.clear();
  remembered_.insert(key);
  return true;
}

}  // namespace meshcast
