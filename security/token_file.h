// TokenTable: the bearer tokens the controller accepts (--tokens_file), and
// reading a client's own token (--token_file). Both files hold secrets, so
// both are refused when group or others may read them, as ssh refuses a
// private key: chmod 600 fixes it.
//
//   ASSIGN_OR_RETURN(TokenTable tokens, ReadTokensFile("/etc/meshcast/tokens"));
//   const TokenEntry* entry = tokens.Find(token_from_metadata);
//   ASSIGN_OR_RETURN(std::string mine, ReadTokenFile("~/.meshcast/admin.token"));
//
// Tokens file format: one principal per line, `<token> <user> <role>`,
// separated by spaces or tabs; role is `admin` or `user`; blank lines and
// lines starting with '#' are ignored. A token has at least
// kMinTokenLength printable ASCII characters (no spaces); a user name is
// 1..64 of [A-Za-z0-9._@-]. A token may appear only once.
//
// Errors: NOT_FOUND (file missing), PERMISSION_DENIED (mode allows group or
// others to read, or unreadable), INVALID_ARGUMENT (format; the message
// names the file and the line, never the token).
//
// Thread safety: TokenTable is immutable after parsing; Find may be called
// from any thread.
#ifndef MESHCAST_SECURITY_TOKEN_FILE_H_
#define MESHCAST_SECURITY_TOKEN_FILE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshcast::security {

inline constexpr size_t kMinTokenLength = 16;

enum class TokenRole { kAdmin, kUser };

struct TokenEntry {
  std::string token;
  std::string user;
  TokenRole role = TokenRole::kUser;
};

class TokenTable {
 public:
  TokenTable() = default;
  // `source` names the text in error messages (a file path).
  static absl::StatusOr<TokenTable> Parse(absl::string_view text,
                                          absl::string_view source);

  // The entry whose token equals `token`, or nullptr. Every entry is
  // compared in constant time, so timing does not reveal a prefix.
  const TokenEntry* Find(absl::string_view token) const;
  size_t size() const { return entries_.size(); }

 private:
  std::vector<TokenEntry> entries_;
};

// OK when only the owner may read `path`; PERMISSION_DENIED naming `flag`,
// the mode and the fix otherwise; NOT_FOUND when it does not exist.
absl::Status CheckPrivateFileMode(const std::string& path,
                                  absl::string_view flag);

// --tokens_file of the controller: mode check, then Parse.
absl::StatusOr<TokenTable> ReadTokensFile(const std::string& path);

// --token_file of a client: mode check, then the first non-blank,
// non-comment line, trimmed; it must be a valid token.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// A fresh random token (hex of 32 random bytes) for `meshctl up`.
absl::StatusOr<std::string> NewRandomToken();

}  // namespace meshcast::security

#endif  // MESHCAST_SECURITY_TOKEN_FILE_H_
