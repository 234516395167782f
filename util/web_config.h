// WebConfig: the TLS and basic-auth settings of a daemon's /metrics
// endpoint, read from a file in the format of Prometheus' own web
// configuration file (the `--web.config.file` of Prometheus and its
// exporters), so operators reuse what they already write:
//
//   tls_server_config:
//     cert_file: /etc/meshcast/metrics/tls.crt
//     key_file: /etc/meshcast/metrics/tls.key
//     client_ca_file: /etc/meshcast/metrics/ca.crt    # optional
//     client_auth_type: RequireAndVerifyClientCert    # optional
//     min_version: TLS12                              # optional
//   basic_auth_users:
//     prometheus: $2y$10$...   # bcrypt hash (htpasswd -nbB, mkpasswd -m bcrypt)
//
//   ASSIGN_OR_RETURN(WebConfig config, LoadWebConfig("/etc/meshcast/web.yml"));
//   if (config.tls) { ... }            // serve HTTPS
//   CheckBasicAuth(config, "Basic ...") // see basic_auth.h
//
// Supported: the keys above. client_auth_type is one of NoClientCert
// (default), RequestClientCert, RequireAnyClientCert,
// VerifyClientCertIfGiven, RequireAndVerifyClientCert; min_version one of
// TLS10, TLS11, TLS12 (default), TLS13. Relative file paths are resolved
// against the configuration file's directory, as Prometheus does. Any other
// key is INVALID_ARGUMENT naming it (a typo must not silently turn
// protection off), and so is a password that is not a bcrypt hash.
//
// Thread safety: plain values; the functions are pure apart from reading
// the file.
#ifndef MESHCAST_UTIL_WEB_CONFIG_H_
#define MESHCAST_UTIL_WEB_CONFIG_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshcast {

enum class ClientAuth {
  kNone,              // NoClientCert
  kRequest,           // RequestClientCert: asked, not verified
  kRequireAny,        // RequireAnyClientCert: required, not verified
  kVerifyIfGiven,     // VerifyClientCertIfGiven
  kRequireAndVerify,  // RequireAndVerifyClientCert
};

struct TlsServerConfig {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;  // empty: none
  ClientAuth client_auth = ClientAuth::kNone;
  std::string min_version = "TLS12";
};

struct WebConfig {
  std::optional<TlsServerConfig> tls;
  // user -> bcrypt hash; empty: no authentication.
  std::map<std::string, std::string> basic_auth_users;
};

// Parses the YAML text; `base_dir` resolves relative file names.
absl::StatusOr<WebConfig> ParseWebConfig(absl::string_view yaml,
                                         absl::string_view base_dir);

// Reads and parses `path`. NOT_FOUND when the file cannot be read.
absl::StatusOr<WebConfig> LoadWebConfig(const std::string& path);

}  // namespace meshcast

#endif  // MESHCAST_UTIL_WEB_CONFIG_H_
