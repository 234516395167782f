#include "cli/local_prometheus.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cli/http_get.h"
#include "nlohmann/json.hpp"

namespace meshcast::cli {
namespace {

using Json = nlohmann::json;

constexpr absl::Duration kPollInterval = absl::Milliseconds(200);
constexpr absl::Duration kRequestTimeout = absl::Seconds(2);
// meshctl sits in <build>/cli/, and a build tree in or beside the sources:
// three levels up reaches the sources from either.
constexpr int kAncestorLevels = 3;

// A YAML scalar that needs no escaping rules of its own: a JSON string is
// valid YAML.
std::string Quoted(const std::string& text) { return Json(text).dump(); }

// Prometheus duration syntax: "1s", "250ms".
std::string PrometheusDuration(absl::Duration interval) {
  const int64_t millis =
      std::max<int64_t>(1, absl::ToInt64Milliseconds(interval));
  if (millis % 1000 == 0) return absl::StrCat(millis / 1000, "s");
  return absl::StrCat(millis, "ms");
}

bool IsDirectory(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::is_directory(path, error);
}

bool IsRuleFileName(const std::string& name, bool require_rules_in_name) {
  if (!absl::EndsWith(name, ".yml") && !absl::EndsWith(name, ".yaml")) {
    return false;
  }
  return !require_rules_in_name || absl::StrContains(name, "rules");
}

// The YAML files directly in `dir` (optionally only those named *rules*).
void AddRuleFiles(const std::filesystem::path& dir, bool require_rules_in_name,
                  std::vector<std::string>* files) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    std::error_code type_error;
    if (!entry.is_regular_file(type_error)) continue;
    if (IsRuleFileName(entry.path().filename().string(),
                       require_rules_in_name)) {
      files->push_back(entry.path().string());
    }
  }
}

std::string DescribeTarget(const Json& target) {
  const Json labels = target.value("labels", Json::object());
  std::string out = absl::StrCat(labels.value("job", std::string("?")), " ",
                                 labels.value("instance", std::string("?")));
  if (labels.contains("worker") && labels["worker"].is_string()) {
    absl::StrAppend(&out, " (", labels["worker"].get<std::string>(), ")");
  }
  absl::StrAppend(&out, ": ", target.value("health", std::string("unknown")));
  const std::string error = target.value("lastError", std::string());
  if (!error.empty()) absl::StrAppend(&out, ": ", error);
  return out;
}

}  // namespace

std::string PrometheusConfigYaml(const std::vector<ScrapeTarget>& targets,
                                 const std::vector<std::string>& rule_files,
                                 absl::Duration interval) {
  const std::string every = PrometheusDuration(interval);
  std::string out = absl::StrCat(
      "# Written by `meshctl up --monitoring`: scrapes the local meshcast\n"
      "# cluster (job and label names as docs/monitoring.md describes).\n"
      "global:\n"
      "  scrape_interval: ",
      every, "\n  evaluation_interval: ", every,
      "\n  external_labels:\n    cluster: meshcast-local\n");
  if (!rule_files.empty()) {
    absl::StrAppend(&out, "rule_files:\n");
    for (const std::string& file : rule_files) {
      absl::StrAppend(&out, "  - ", Quoted(file), "\n");
    }
  }
  std::vector<std::string> jobs;
  for (const ScrapeTarget& target : targets) {
    if (std::find(jobs.begin(), jobs.end(), target.job) == jobs.end()) {
      jobs.push_back(target.job);
    }
  }
  absl::StrAppend(&out, "scrape_configs:\n");
  for (const std::string& job : jobs) {
    absl::StrAppend(&out, "  - job_name: ", Quoted(job),
                    "\n    static_configs:\n");
    for (const ScrapeTarget& target : targets) {
      if (target.job != job) continue;
      absl::StrAppend(&out, "      - targets: [", Quoted(target.address),
                      "]\n");
      if (!target.worker.empty()) {
        absl::StrAppend(
            &out, "        labels: {worker: ", Quoted(target.worker), "}\n");
      }
    }
  }
  return out;
}

std::optional<std::string> FindSourceTree(
    const std::vector<std::string>& start_dirs) {
  for (const std::string& start : start_dirs) {
    if (start.empty()) continue;
    std::error_code error;
    std::filesystem::path dir = std::filesystem::weakly_canonical(start, error);
    if (error) continue;
    for (int level = 0; level <= kAncestorLevels; ++level) {
      if (IsDirectory(dir / "deploy" / "prometheus" / "rules") ||
          IsDirectory(dir / "dashboards" / "provisioning")) {
        return dir.string();
      }
      if (!dir.has_parent_path() || dir.parent_path() == dir) break;
      dir = dir.parent_path();
    }
  }
  return std::nullopt;
}

std::vector<std::string> AlertRuleFiles(const std::string& source_tree) {
  const std::filesystem::path prometheus =
      std::filesystem::path(source_tree) / "deploy" / "prometheus";
  std::vector<std::string> files;
  AddRuleFiles(prometheus / "rules", /*require_rules_in_name=*/false, &files);
  AddRuleFiles(prometheus, /*require_rules_in_name=*/true, &files);
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

absl::StatusOr<int> PickFreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket(): ", strerror(errno)));
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const std::string error = strerror(errno);
    close(fd);
    return absl::InternalError(
        absl::StrCat("cannot find a free port on 127.0.0.1: ", error));
  }
  close(fd);
  return static_cast<int>(ntohs(address.sin_port));
}

absl::StatusOr<TargetsHealth> ParseTargetsResponse(const std::string& body) {
  const Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || json.value("status", std::string()) != "success" ||
      !json.contains("data") || !json["data"].is_object() ||
      !json["data"].contains("activeTargets") ||
      !json["data"]["activeTargets"].is_array()) {
    return absl::InternalError(absl::StrCat(
        "/api/v1/targets: unexpected reply: ", body.substr(0, 200)));
  }
  TargetsHealth health;
  for (const Json& target : json["data"]["activeTargets"]) {
    if (!target.is_object()) continue;
    if (target.value("health", std::string()) == "up") {
      ++health.up;
    } else {
      health.not_up.push_back(DescribeTarget(target));
    }
  }
  return health;
}

absl::Status WaitForPrometheus(
    const std::string& address, int expected_targets, absl::Time deadline,
    const std::function<absl::Status()>& check_alive) {
  bool ready = false;
  std::string missing = "no answer on /-/ready";
  while (true) {
    if (check_alive) {
      if (absl::Status alive = check_alive(); !alive.ok()) return alive;
    }
    if (!ready) {
      absl::StatusOr<HttpResponse> response =
          HttpGet(address, "/-/ready", kRequestTimeout);
      if (response.ok() && response->status_code == 200) {
        ready = true;
      } else if (response.ok()) {
        missing = absl::StrCat("/-/ready answers HTTP ", response->status_code);
      }
    }
    if (ready) {
      absl::StatusOr<HttpResponse> response =
          HttpGet(address, "/api/v1/targets?state=active", kRequestTimeout);
      absl::StatusOr<TargetsHealth> health =
          response.ok() && response->status_code == 200
              ? ParseTargetsResponse(response->body)
              : absl::StatusOr<TargetsHealth>(absl::UnavailableError(
                    response.ok() ? absl::StrCat("HTTP ", response->status_code)
                                  : std::string(response.status().message())));
      if (health.ok()) {
        if (health->up == expected_targets && health->not_up.empty()) {
          return absl::OkStatus();
        }
        missing =
            absl::StrCat(health->up, " of ", expected_targets, " targets up");
        if (!health->not_up.empty()) {
          absl::StrAppend(&missing, "; ", absl::StrJoin(health->not_up, "; "));
        }
      } else {
        missing = absl::StrCat("/api/v1/targets: ", health.status().message());
      }
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("Prometheus at http://", address,
                       ready ? " did not see every daemon up in time ("
                             : " was not ready in time (",
                       missing, ")"));
    }
    absl::SleepFor(kPollInterval);
  }
}

std::string GrafanaInstructions(const std::string& prometheus_url,
                                const std::optional<std::string>& source_tree) {
  const std::string dashboards = source_tree
                                     ? absl::StrCat(*source_tree, "/dashboards")
                                     : "dashboards (in the meshcast sources)";
  std::string out = absl::StrCat(
      "Grafana:\n"
      "  data source  type Prometheus, URL ",
      prometheus_url,
      ", uid prometheus (the dashboards default to that uid)\n"
      "  dashboards   import ",
      dashboards,
      "/*.json (Dashboards > New > Import), or provision both:\n"
      "    docker run -d --name grafana --network host \\\n"
      "      -e MESHCAST_PROMETHEUS_URL=",
      prometheus_url, " \\\n");
  if (source_tree) {
    absl::StrAppend(
        &out, "      -v ", dashboards,
        "/provisioning/datasources:/etc/grafana/provisioning/datasources:ro "
        "\\\n",
        "      -v ", dashboards,
        "/provisioning/dashboards:/etc/grafana/provisioning/dashboards:ro "
        "\\\n",
        "      -v ", dashboards,
        ":/var/lib/grafana/dashboards/meshcast:ro \\\n");
  } else {
    absl::StrAppend(
        &out,
        "      -v $MESHCAST_SRC/dashboards/provisioning/datasources:"
        "/etc/grafana/provisioning/datasources:ro \\\n"
        "      -v $MESHCAST_SRC/dashboards/provisioning/dashboards:"
        "/etc/grafana/provisioning/dashboards:ro \\\n"
        "      -v $MESHCAST_SRC/dashboards:/var/lib/grafana/dashboards/"
        "meshcast:ro \\\n");
  }
  absl::StrAppend(&out,
                  "      grafana/grafana:11.2.0\n"
                  "    then open http://localhost:3000 (admin/admin), folder "
                  "meshcast; see docs/monitoring.md\n");
  return out;
}

}  // namespace meshcast::cli
