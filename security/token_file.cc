#include "security/token_file.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "util/status_macros.h"

namespace meshcast::security {
namespace {

bool IsValidToken(absl::string_view token) {
  if (token.size() < kMinTokenLength) return false;
  for (char c : token) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

bool IsValidUser(absl::string_view user) {
  if (user.empty() || user.size() > 64) return false;
  for (char c : user) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '@' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::string> ReadWhole(const std::string& path,
                                      absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(
        absl::StrCat("--", flag, " ", path, ": cannot read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text,
                                             absl::string_view source) {
  TokenTable table;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string where = absl::StrCat(source, ":", line_number);
    if (fields.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": expected `<token> <user> <role>` (3 fields), got ",
          fields.size()));
    }
    if (!IsValidToken(fields[0])) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the token must be at least ", kMinTokenLength,
          " printable ASCII characters"));
    }
    if (!IsValidUser(fields[1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the user must be 1..64 of [A-Za-z0-9._@-], got \"",
          absl::CHexEscape(fields[1].substr(0, 32)), "\""));
    }
    TokenEntry entry;
    entry.token = std::string(fields[0]);
    entry.user = std::string(fields[1]);
    if (fields[2] == "admin") {
      entry.role = TokenRole::kAdmin;
    } else if (fields[2] == "user") {
      entry.role = TokenRole::kUser;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": role must be admin or user, got \"",
          absl::CHexEscape(fields[2].substr(0, 16)), "\""));
    }
    if (table.Find(entry.token) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": this token is listed twice"));
    }
    table.entries_.push_back(std::move(entry));
  }
  return table;
}

const TokenEntry* TokenTable::Find(absl::string_view token) const {
  const TokenEntry* found = nullptr;
  for (const TokenEntry& entry : entries_) {
    const bool same =
        entry.token.size() == token.size() &&
        CRYPTO_memcmp(entry.token.data(), token.data(), token.size()) == 0;
    if (same && found == nullptr) found = &entry;
  }
  return found;
}

absl::Status CheckPrivateFileMode(const std::string& path,
                                  absl::string_view flag) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("--", flag, " ", path, ": no such file"));
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "--", flag, " ", path, ": cannot stat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path, ": not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "--%s %s: permissions 0%03o are too open: the file holds secrets "
        "and must not be accessible by group or others; run chmod 600 %s",
        flag, path, st.st_mode & 0777, path));
  }
  return absl::OkStatus();
}

absl::StatusOr<TokenTable> ReadTokensFile(const std::string& path) {
  RETURN_IF_ERROR(CheckPrivateFileMode(path, "tokens_file"));
  ASSIGN_OR_RETURN(const std::string text, ReadWhole(path, "tokens_file"));
  return TokenTable::Parse(text, absl::StrCat("--tokens_file ", path));
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  RETURN_IF_ERROR(CheckPrivateFileMode(path, "token_file"));
  ASSIGN_OR_RETURN(const std::string text, ReadWhole(path, "token_file"));
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (!IsValidToken(line)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--token_file ", path, ": the token must be at least ",
          kMinTokenLength, " printable ASCII characters without spaces"));
    }
    return std::string(line);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--token_file ", path, ": holds no token"));
}

absl::StatusOr<std::string> NewRandomToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return absl::InternalError("cannot draw random bytes for a token");
  }
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

}  // namespace meshcast::security
