#include "util/basic_auth.h"

#include <crypt.h>

#include <cstring>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"

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

bool BasicAuth::Check(absl::string_view header) const {
  absl::string_view value = absl::StripAsciiWhitespace(header);
  constexpr absl::string_view kScheme = "basic ";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return false;
  }
  std::string decoded;
  if (!absl::Base64Unescape(
          absl::StripAsciiWhitespace(value.substr(kScheme.size())), &decoded)) {
    return false;
  }
  const size_t colon = decoded.find(':');
  if (colon == std::string::npos) return false;
  const auto user = users_.find(decoded.substr(0, colon));
  if (user == users_.end()) return false;
  return PasswordMatchesHash(decoded.substr(colon + 1), user->second);
}

bool BasicAuth::Allows(absl::string_view header) const {
  if (users_.empty()) return true;
  {
    absl::MutexLock lock(&mu_);
    if (remembered_.contains(header)) return true;
  }
  if (!Check(header)) return false;
  absl::MutexLock lock(&mu_);
  if (remembered_.size() >= kMaxRemembered) remembered_.clear();
  remembered_.insert(std::string(header));
  return true;
}

}  // namespace meshcast
