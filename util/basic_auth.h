// BasicAuth: checks the user and password of an HTTP basic-auth request
// (decoded from the Authorization header by the HTTP server) against the
// bcrypt hashes of a web config's basic_auth_users (web_config.h).
//
//   BasicAuth auth(config.basic_auth_users);
//   if (!auth.Allows(user, password)) reply 401 with WWW-Authenticate;
//
// bcrypt is slow on purpose (tens of milliseconds at cost 10), and
// Prometheus sends the same credentials on every scrape, so credentials
// that matched once are remembered (at most kMaxRemembered of them);
// credentials that did not match are checked again every time, so a wrong
// password cannot be cached into success.
//
// Thread safety: Allows() is thread-safe.
#ifndef MESHCAST_UTIL_BASIC_AUTH_H_
#define MESHCAST_UTIL_BASIC_AUTH_H_

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace meshcast {

class BasicAuth {
 public:
  static constexpr size_t kMaxRemembered = 64;

  // user -> bcrypt hash. An empty map allows every request.
  explicit BasicAuth(std::map<std::string, std::string> users)
      : users_(std::move(users)) {}

  bool enabled() const { return !users_.empty(); }

  bool Allows(const std::string& user, const std::string& password) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool Check(const std::string& user, const std::string& password) const;

  const std::map<std::string, std::string> users_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_set<std::string> remembered_ ABSL_GUARDED_BY(mu_);
};

// True when `password` matches the bcrypt (or any crypt(3)) `hash`.
bool PasswordMatchesHash(const std::string& password, const std::string& hash);

}  // namespace meshcast

#endif  // MESHCAST_UTIL_BASIC_AUTH_H_
