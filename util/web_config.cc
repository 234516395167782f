#include "util/web_config.h"

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace meshcast {
namespace {

constexpr absl::string_view kFile = "web config";

absl::Status Invalid(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(kFile, ": ", where, " ", what));
}

absl::StatusOr<std::string> ScalarAt(const YAML::Node& node,
                                     absl::string_view where) {
  if (!node.IsScalar()) return Invalid(where, "must be a string");
  return node.as<std::string>();
}

std::string Resolve(absl::string_view base_dir, std::string path) {
  if (path.empty() || absl::StartsWith(path, "/") || base_dir.empty()) {
    return path;
  }
  return absl::StrCat(base_dir, "/", path);
}

absl::StatusOr<ClientAuth> ClientAuthOf(absl::string_view name) {
  static const std::pair<absl::string_view, ClientAuth> kTypes[] = {
      {"NoClientCert", ClientAuth::kNone},
      {"RequestClientCert", ClientAuth::kRequest},
      {"RequireAnyClientCert", ClientAuth::kRequireAny},
      {"VerifyClientCertIfGiven", ClientAuth::kVerifyIfGiven},
      {"RequireAndVerifyClientCert", ClientAuth::kRequireAndVerify},
  };
  std::vector<absl::string_view> names;
  for (const auto& [type_name, type] : kTypes) {
    if (type_name == name) return type;
    names.push_back(type_name);
  }
  return Invalid("tls_server_config.client_auth_type",
                 absl::StrCat("is not one of ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<TlsServerConfig> ParseTls(const YAML::Node& node,
                                         absl::string_view base_dir) {
  if (!node.IsMap()) return Invalid("tls_server_config", "must be a mapping");
  TlsServerConfig tls;
  for (const auto& entry : node) {
    const std::string key = entry.first.as<std::string>();
    const std::string where = absl::StrCat("tls_server_config.", key);
    ASSIGN_OR_RETURN(std::string value, ScalarAt(entry.second, where));
    if (key == "cert_file") {
      tls.cert_file = Resolve(base_dir, value);
    } else if (key == "key_file") {
      tls.key_file = Resolve(base_dir, value);
    } else if (key == "client_ca_file") {
      tls.client_ca_file = Resolve(base_dir, value);
    } else if (key == "client_auth_type") {
      ASSIGN_OR_RETURN(tls.client_auth, ClientAuthOf(value));
    } else if (key == "min_version") {
      if (value != "TLS10" && value != "TLS11" && value != "TLS12" &&
          value != "TLS13") {
        return Invalid(where, "is not one of TLS10, TLS11, TLS12, TLS13");
      }
      tls.min_version = value;
    } else {
      return Invalid(where,
                     "is not supported (known: cert_file, key_file, "
                     "client_ca_file, client_auth_type, min_version)");
    }
  }
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return Invalid("tls_server_config", "needs both cert_file and key_file");
  }
  const bool verifies = tls.client_auth == ClientAuth::kVerifyIfGiven ||
                        tls.client_auth == ClientAuth::kRequireAndVerify;
  if (verifies && tls.client_ca_file.empty()) {
    return Invalid("tls_server_config.client_ca_file",
                   "is required when client_auth_type verifies certificates");
  }
  return tls;
}

// bcrypt hashes look like $2a$, $2b$ or $2y$, a two-digit cost, '$' and
// 53 characters of salt and hash.
bool IsBcryptHash(absl::string_view hash) {
  return hash.size() == 60 &&
         (absl::StartsWith(hash, "$2a$") || absl::StartsWith(hash, "$2b$") ||
          absl::StartsWith(hash, "$2y$")) &&
         hash[6] == '$';
}

}  // namespace

absl::StatusOr<WebConfig> ParseWebConfig(absl::string_view yaml,
                                         absl::string_view base_dir) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFile, " is not valid YAML: ", e.what()));
  }
  WebConfig config;
  if (root.IsNull()) return config;
  if (!root.IsMap()) return Invalid("the top level", "must be a mapping");
  for (const auto& entry : root) {
    const std::string key = entry.first.as<std::string>();
    if (key == "tls_server_config") {
      ASSIGN_OR_RETURN(config.tls, ParseTls(entry.second, base_dir));
    } else if (key == "basic_auth_users") {
      if (entry.second.IsNull()) continue;
      if (!entry.second.IsMap()) {
        return Invalid("basic_auth_users", "must map user names to hashes");
      }
      for (const auto& user : entry.second) {
        const std::string name = user.first.as<std::string>();
        const std::string where = absl::StrCat("basic_auth_users.", name);
        ASSIGN_OR_RETURN(std::string hash, ScalarAt(user.second, where));
        if (name.empty() || absl::StrContains(name, ":")) {
          return Invalid(where, "user names must be non-empty without ':'");
        }
        if (!IsBcryptHash(hash)) {
          return Invalid(where,
                         "is not a bcrypt hash ($2y$..., 60 characters; make "
                         "one with `htpasswd -nbB user password`)");
        }
        config.basic_auth_users[name] = hash;
      }
    } else if (key == "http_server_config") {
      // Prometheus' HTTP/2 and header options do not apply to /metrics here.
      return Invalid("http_server_config", "is not supported by meshcast");
    } else {
      return Invalid(key,
                     "is not a known key (known: tls_server_config, "
                     "basic_auth_users)");
    }
  }
  return config;
}

absl::StatusOr<WebConfig> LoadWebConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the web config file ", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  const size_t slash = path.rfind('/');
  const std::string base_dir =
      slash == std::string::npos ? "" : path.substr(0, slash);
  absl::StatusOr<WebConfig> config = ParseWebConfig(text.str(), base_dir);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace meshcast
