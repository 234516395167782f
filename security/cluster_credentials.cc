#include "security/cluster_credentials.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "security/cert_authority.h"
#include "security/token_file.h"
#include "util/status_macros.h"

namespace meshcast::security {
namespace {

bool Exists(const std::string& path) {
  std::error_code error;
  return std::filesystem::exists(path, error);
}

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot read"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The CA in `dir`, reused when both files are there, else a new one.
absl::StatusOr<KeyAndCert> LoadOrCreateCa(const std::string& dir) {
  const std::string key = dir + "/ca.key";
  const std::string cert = dir + "/ca.crt";
  if (Exists(key) && Exists(cert)) {
    KeyAndCert ca;
    ASSIGN_OR_RETURN(ca.key_pem, ReadAll(key));
    ASSIGN_OR_RETURN(ca.cert_pem, ReadAll(cert));
    return ca;
  }
  ASSIGN_OR_RETURN(KeyAndCert ca,
                   CreateCertificateAuthority("meshcast cluster CA"));
  RETURN_IF_ERROR(WriteKeyAndCert(ca, key, cert));
  return ca;
}

absl::StatusOr<CertFiles> Issue(const KeyAndCert& ca, const std::string& dir,
                                const std::string& file_name,
                                const CertRequest& request) {
  ASSIGN_OR_RETURN(KeyAndCert pair, IssueCertificate(ca, request));
  CertFiles files{absl::StrCat(dir, "/", file_name, ".crt"),
                  absl::StrCat(dir, "/", file_name, ".key")};
  RETURN_IF_ERROR(WriteKeyAndCert(pair, files.key, files.cert));
  return files;
}

}  // namespace

absl::StatusOr<ClusterCredentialFiles> WriteClusterCredentials(
    const std::string& dir, const std::vector<std::string>& worker_names) {
  for (const std::string& name : worker_names) {
    if (name.empty() || name == kControllerIdentity ||
        name.find_first_of("/, :") != std::string::npos || name == "ca" ||
        name == "controller") {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker name \"", name.substr(0, 64),
          "\" cannot name a certificate (empty, contains '/', ',', ':' or a "
          "space, or is ca, controller or ",
          kControllerIdentity, ")"));
    }
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error || chmod(dir.c_str(), 0700) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        dir, ": cannot create it with mode 0700: ",
        error ? error.message() : std::string(std::strerror(errno))));
  }
  ClusterCredentialFiles out;
  ASSIGN_OR_RETURN(const KeyAndCert ca, LoadOrCreateCa(dir));
  out.ca_cert = dir + "/ca.crt";

  CertRequest controller;
  controller.common_name = kControllerIdentity;
  controller.organizational_unit = "controller";
  controller.dns_names = {"localhost", kControllerIdentity};
  controller.ip_addresses = {"127.0.0.1"};
  ASSIGN_OR_RETURN(out.controller, Issue(ca, dir, "controller", controller));

  for (const std::string& name : worker_names) {
    CertRequest worker;
    worker.common_name = name;
    worker.organizational_unit = "worker";
    worker.dns_names = {name, "localhost"};
    worker.ip_addresses = {"127.0.0.1"};
    ASSIGN_OR_RETURN(CertFiles files, Issue(ca, dir, name, worker));
    out.workers.push_back(std::move(files));
  }

  out.admin_token = dir + "/admin.token";
  out.tokens = dir + "/tokens";
  if (!Exists(out.admin_token) || !Exists(out.tokens)) {
    ASSIGN_OR_RETURN(const std::string token, NewRandomToken());
    RETURN_IF_ERROR(WritePrivateFile(out.admin_token, token + "\n"));
    RETURN_IF_ERROR(WritePrivateFile(
        out.tokens,
        absl::StrCat("# meshcast bearer tokens: <token> <user> <role>, role "
                     "admin or user (docs/security.md)\n",
                     token, " admin admin\n")));
  }
  return out;
}

}  // namespace meshcast::security
