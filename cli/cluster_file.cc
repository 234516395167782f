#include "cli/cluster_file.h"

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace meshcast::cli {
namespace {

using Json = nlohmann::ordered_json;

}  // namespace

std::string ClusterFilePath(const std::string& dir) {
  return absl::StrCat(dir, "/cluster.json");
}

std::string ClusterFileToJson(const ClusterFile& file) {
  Json processes = Json::array();
  for (const ClusterProcess& p : file.processes) {
    Json process{{"role", p.role}, {"name", p.name},     {"pid", p.pid},
                 {"log", p.log},   {"binary", p.binary}, {"args", p.args}};
    if (!p.metrics.empty()) process["metrics"] = p.metrics;
    if (!p.local_socket.empty()) process["local_socket"] = p.local_socket;
    processes.push_back(std::move(process));
  }
  Json out{{"controller", file.controller},
           {"dir", file.dir},
           {"database", file.database},
           {"workers", file.workers}};
  if (!file.devices.empty()) out["devices"] = file.devices;
  out["devices_per_worker"] = file.devices_per_worker;
  out["started_unix"] = file.started_unix;
  if (!file.prometheus.empty()) out["prometheus"] = file.prometheus;
  out["processes"] = std::move(processes);
  out["security"] = Json{{"insecure", file.insecure},
                         {"tls_ca", file.tls_ca},
                         {"tls_cert", file.tls_cert},
                         {"tls_key", file.tls_key},
                         {"token_file", file.token_file}};
  return out.dump(2) + "\n";
}

absl::StatusOr<ClusterFile> ClusterFileFromJson(const std::string& text) {
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return absl::InvalidArgumentError("not a JSON object");
  }
  ClusterFile file;
  // nlohmann's value() throws on a type mismatch; a hand-edited file must
  // not crash meshctl, so check types first.
  const auto text_field = [&](const Json& object, const char* key,
                              std::string* out) {
    if (object.contains(key) && object[key].is_string()) {
      *out = object[key].get<std::string>();
    }
  };
  const auto int_field = [&](const Json& object, const char* key, int* out) {
    if (object.contains(key) && object[key].is_number_integer()) {
      *out = object[key].get<int>();
    }
  };
  text_field(json, "controller", &file.controller);
  text_field(json, "dir", &file.dir);
  text_field(json, "database", &file.database);
  int_field(json, "workers", &file.workers);
  text_field(json, "devices", &file.devices);
  int_field(json, "devices_per_worker", &file.devices_per_worker);
  text_field(json, "prometheus", &file.prometheus);
  if (json.contains("started_unix") && json["started_unix"].is_number()) {
    file.started_unix = json["started_unix"].get<double>();
  }
  if (file.controller.empty()) {
    return absl::InvalidArgumentError("no \"controller\" address");
  }
  if (json.contains("security") && json["security"].is_object()) {
    const Json& security = json["security"];
    // Anything but an explicit false keeps the safe reading: a damaged
    // record must not make meshctl send its token in the clear (without
    // tls_ca it sends none).
    file.insecure = !(security.contains("insecure") &&
                      security["insecure"].is_boolean() &&
                      !security["insecure"].get<bool>());
    text_field(security, "tls_ca", &file.tls_ca);
    text_field(security, "tls_cert", &file.tls_cert);
    text_field(security, "tls_key", &file.tls_key);
    text_field(security, "token_file", &file.token_file);
  }
  if (json.contains("processes") && json["processes"].is_array()) {
    for (const Json& p : json["processes"]) {
      if (!p.is_object()) continue;
      ClusterProcess process;
      text_field(p, "role", &process.role);
      text_field(p, "name", &process.name);
      int_field(p, "pid", &process.pid);
      text_field(p, "log", &process.log);
      text_field(p, "binary", &process.binary);
      text_field(p, "metrics", &process.metrics);
      text_field(p, "local_socket", &process.local_socket);
      if (p.contains("args") && p["args"].is_array()) {
        for (const Json& arg : p["args"]) {
          if (arg.is_string()) process.args.push_back(arg.get<std::string>());
        }
      }
      file.processes.push_back(std::move(process));
    }
  }
  return file;
}

absl::StatusOr<ClusterFile> ReadClusterFile(const std::string& dir) {
  const std::string path = ClusterFilePath(dir);
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("no local cluster recorded in ", dir, " (no ", path,
                     "); start one with 'meshctl up --dir ", dir, "'"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  absl::StatusOr<ClusterFile> file = ClusterFileFromJson(buffer.str());
  if (!file.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", file.status().message()));
  }
  return file;
}

absl::Status WriteClusterFile(const std::string& dir, const ClusterFile& file) {
  const std::string path = ClusterFilePath(dir);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << ClusterFileToJson(file);
    out.close();
    if (!out) {
      return absl::InternalError(absl::StrCat("cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::Status RemoveClusterFile(const std::string& dir) {
  const std::string path = ClusterFilePath(dir);
  if (std::remove(path.c_str()) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot remove ", path));
  }
  return absl::OkStatus();
}

std::string LocalClusterDir(const std::string& flag_dir,
                            const CommandContext& context) {
  if (!flag_dir.empty()) return flag_dir;
  if (std::optional<std::string> home = context.Env("MESHCAST_HOME");
      home.has_value() && !home->empty()) {
    return *home;
  }
  return kDefaultClusterDir;
}

absl::StatusOr<std::string> ResolveControllerAddress(
    const std::string& flag_controller, const std::string& flag_dir,
    const CommandContext& context) {
  if (!flag_controller.empty()) return flag_controller;
  // An explicit --dir names the cluster the user means, so it wins over the
  // environment's controller.
  if (flag_dir.empty()) {
    if (std::optional<std::string> env = context.Env("MESHCAST_CONTROLLER");
        env.has_value() && !env->empty()) {
      return *env;
    }
  }
  const std::string dir = LocalClusterDir(flag_dir, context);
  absl::StatusOr<ClusterFile> file = ReadClusterFile(dir);
  if (file.ok()) return file->controller;
  // A directory the user named (--dir or $MESHCAST_HOME) without a running
  // cluster must not quietly reach some other controller on the default
  // port: after `meshctl down --dir D`, `meshctl list --dir D` would
  // otherwise list another cluster's jobs. Only the implicit ./.meshcast
  // falls through to the default address.
  const std::optional<std::string> home = context.Env("MESHCAST_HOME");
  const bool named_dir =
      !flag_dir.empty() || (home.has_value() && !home->empty());
  if (named_dir || !absl::IsNotFound(file.status())) return file.status();
  return std::string(kDefaultControllerAddress);
}

}  // namespace meshcast::cli
