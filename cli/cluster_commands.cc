#include "cli/cluster_commands.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/client_flags.h"
#include "cli/cluster_file.h"
#include "cli/command_errors.h"
#include "cli/controller_client.h"
#include "cli/daemon_process.h"
#include "cli/flags.h"
#include "cli/job_format.h"
#include "cli/output_format.h"
#include "cli/local_prometheus.h"
#include "cli/worker_devices.h"
#include "security/cluster_credentials.h"
#include "util/status_macros.h"

namespace meshcast::cli {
namespace {

constexpr char kControllerBinary[] = "meshcast-controller";
constexpr char kWorkerBinary[] = "meshcast-worker";
constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

constexpr char kUpDescription[] =
    "Starts a local meshcast cluster on this machine: one meshcast-controller\n"
    "and --workers meshcast-worker processes, each worker with the devices\n"
    "of --devices (default cpu:4: four virtual CPU devices), all on\n"
    "127.0.0.1. They run in the background (own session) and keep running\n"
    "after meshctl exits. Logs (DIR/logs/*.log), the job database\n"
    "(DIR/meshcast.db) and DIR/cluster.json (controller address, pids, log\n"
    "paths) live in the cluster directory. meshctl up returns once every\n"
    "worker has registered with the controller, or fails naming the log of a\n"
    "daemon that died.\n"
    "\n"
    "--monitoring also serves each daemon's Prometheus metrics on 127.0.0.1\n"
    "and starts a Prometheus server (Debian package `prometheus`,\n"
    "/usr/bin/prometheus) scraping them, with the meshcast alert rules when\n"
    "the sources are found; its configuration and data live in\n"
    "DIR/prometheus. meshctl up then also waits until Prometheus is ready and\n"
    "scrapes every daemon, and prints the metrics endpoints and how to point\n"
    "Grafana at it. 'meshctl down' stops it with the daemons.\n"
    "\n"
    "The daemons are looked for in --bin-dir, else next to meshctl's build\n"
    "tree (../controller, ../worker), else beside meshctl, else on $PATH.\n"
    "\n"
    "Other meshctl commands find the cluster through DIR/cluster.json (the\n"
    "same --dir / $MESHCAST_HOME / ./.meshcast), or through\n"
    "MESHCAST_CONTROLLER, which meshctl up prints. Stop it with\n"
    "'meshctl down'.";

// `example` must be a flag `binary` really has: help that suggests a flag
// the daemon refuses sends people to its log.
std::string FlagsHelpFor(const char* binary, absl::string_view example) {
  return absl::StrCat("extra flags for every ", binary,
                      ", space-separated, e.g. \"", example, "\"");
}

std::string PortFile(const std::string& dir) {
  return absl::StrCat(dir, "/controller.port");
}

// Where a daemon started with --monitoring writes its bound metrics port.
// DIR/sockets/NAME.sock, where a worker takes user buffers from the
// processes of its host (docs/user_buffers.md); empty when the path is too
// long for a Unix socket (108 bytes with its terminator) or the directory
// cannot be made: that worker then takes none.
std::string LocalSocketPath(const std::string& dir, const std::string& name) {
  const std::string sockets = absl::StrCat(dir, "/sockets");
  const std::string path = absl::StrCat(sockets, "/", name, ".sock");
  std::error_code error;
  std::filesystem::create_directories(sockets, error);
  if (error || path.size() >= 108) return "";
  return path;
}

std::string MetricsPortFile(const std::string& dir, const std::string& name) {
  return absl::StrCat(dir, "/metrics/", name, ".port");
}

// The port in a port file, or 0 while the file is missing or incomplete.
int ReadPortFile(const std::string& path) {
  std::ifstream in(path);
  int port = 0;
  std::string text;
  if (in && std::getline(in, text) &&
      absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port) && port > 0 &&
      port <= 65535) {
    return port;
  }
  return 0;
}

// Flags that make a daemon serve its metrics on 127.0.0.1, on a port the
// kernel picks and the daemon writes to its metrics port file.
std::vector<std::string> MetricsFlags(const std::string& dir,
                                      const std::string& name) {
  return {"--metrics-port=0", "--metrics-address=127.0.0.1",
          absl::StrCat("--metrics-port-file=", MetricsPortFile(dir, name))};
}

std::string MetricsUrl(const std::string& address) {
  return absl::StrCat("http://", address, "/metrics");
}

absl::StatusOr<std::string> MakeDirectory(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir + "/logs", error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dir: cannot create ", dir, "/logs: ", error.message()));
  }
  const std::filesystem::path absolute = std::filesystem::canonical(dir, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dir: cannot resolve ", dir, ": ", error.message()));
  }
  return absolute.string();
}

void AppendLogHeader(const std::string& log, const std::string& what) {
  std::ofstream out(log, std::ios::app);
  out << "=== meshctl: " << what << " at "
      << absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::Now(),
                          absl::LocalTimeZone())
      << " ===\n";
}

// "meshcast-worker worker-1", but "meshcast-controller" and "prometheus"
// rather than repeating a name the binary already says.
std::string DaemonLabel(const ClusterProcess& process) {
  const std::string binary =
      process.binary.substr(process.binary.rfind('/') + 1);
  if (process.name.empty() || absl::EndsWith(binary, process.name)) {
    return binary;
  }
  return absl::StrCat(binary, " ", process.name);
}

// Whether `flags` (the --controller-flags text) sets the controller flag
// `name` itself, as --name=V, --name V, -name=V or -name V.
bool PassesFlag(absl::string_view flags, absl::string_view name) {
  for (absl::string_view arg : absl::StrSplit(flags, ' ', absl::SkipEmpty())) {
    absl::ConsumePrefix(&arg, "-");
    absl::ConsumePrefix(&arg, "-");
    if (arg == name || absl::StartsWith(arg, absl::StrCat(name, "="))) {
      return true;
    }
  }
  return false;
}

// A daemon's death as one line pointing at its log.
std::string DiedMessage(const ClusterProcess& process, const std::string& how) {
  const std::string last = LastLogLine(process.log);
  return absl::StrCat(
      DaemonLabel(process), " ", how.empty() ? "exited" : how,
      " during startup; see ", process.log,
      last.empty() ? "" : absl::StrCat(" (last line: ", last, ")"));
}

// Starts the daemons of one local cluster and stops them again if the
// cluster does not come up, so a failed `up` leaves nothing running.
class Launcher {
 public:
  explicit Launcher(std::string dir) : dir_(std::move(dir)) {}

  ~Launcher() {
    if (committed_) return;
    std::vector<int> pids;
    for (const ClusterProcess& process : file_.processes) {
      pids.push_back(process.pid);
    }
    StopProcesses(pids, absl::Seconds(5));
    RemoveClusterFile(dir_).IgnoreError();
  }

  ClusterFile& file() { return file_; }
  void Commit() { committed_ = true; }

  absl::Status Start(const std::string& role, const std::string& name,
                     const std::string& binary, std::vector<std::string> args) {
    ClusterProcess process;
    process.role = role;
    process.name = name;
    process.binary = binary;
    process.args = std::move(args);
    process.log = absl::StrCat(dir_, "/logs/", name, ".log");
    AppendLogHeader(process.log, absl::StrCat("starting ", name));
    ASSIGN_OR_RETURN(process.pid,
                     SpawnDetached(binary, process.args, process.log, dir_));
    file_.processes.push_back(std::move(process));
    return absl::OkStatus();
  }

  // FAILED_PRECONDITION naming the log of the first daemon that died.
  absl::Status CheckAlive() {
    for (const ClusterProcess& process : file_.processes) {
      const ProcessStatus status = CheckProcess(process.pid);
      if (!status.alive) {
        return absl::FailedPreconditionError(DiedMessage(process, status.exit));
      }
    }
    return absl::OkStatus();
  }

  // The port in `path` once `process` has written it there.
  absl::StatusOr<int> WaitForPortFile(const std::string& path,
                                      const ClusterProcess& process,
                                      absl::string_view what,
                                      absl::Time deadline) {
    while (true) {
      if (const int port = ReadPortFile(path); port > 0) return port;
      RETURN_IF_ERROR(CheckAlive());
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(process.name, " did not ", what, " in time (no ", path,
                         "); see ", process.log));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  // The controller's port once it has written its port file.
  absl::StatusOr<int> WaitForPort(absl::Time deadline) {
    return WaitForPortFile(PortFile(dir_), file_.processes.front(),
                           "start listening", deadline);
  }

  // Records the metrics port every daemon wrote (they were started with
  // MetricsFlags), and replaces --metrics-port=0 in its recorded command
  // line with that port, so that a restarted daemon serves where
  // Prometheus scrapes.
  absl::Status CollectMetricsPorts(absl::Time deadline) {
    for (ClusterProcess& process : file_.processes) {
      if (process.role != "controller" && process.role != "worker") continue;
      ASSIGN_OR_RETURN(const int port,
                       WaitForPortFile(MetricsPortFile(dir_, process.name),
                                       process, "serve its metrics", deadline));
      process.metrics = absl::StrCat("127.0.0.1:", port);
      for (std::string& arg : process.args) {
        if (arg == "--metrics-port=0") {
          arg = absl::StrCat("--metrics-port=", port);
        }
      }
    }
    return absl::OkStatus();
  }

  // Polls GetCluster until every worker named in the file is registered
  // and not lost; returns that last view of the cluster.
  absl::StatusOr<v1::GetClusterResponse> WaitForWorkers(absl::Time deadline) {
    std::set<std::string> expected;
    for (const ClusterProcess& process : file_.processes) {
      if (process.role == "worker") expected.insert(process.name);
    }
    std::unique_ptr<ControllerClient> client;
    std::set<std::string> missing = expected;
    while (true) {
      RETURN_IF_ERROR(CheckAlive());
      if (client == nullptr) {
        ControllerClient::Options options;
        options.connect_timeout = absl::Seconds(1);
        options.call_timeout = absl::Seconds(3);
        ASSIGN_OR_RETURN(options.credentials, ClusterCredentials(file_));
        absl::StatusOr<std::unique_ptr<ControllerClient>> connected =
            ControllerClient::Connect(file_.controller, options);
        if (connected.ok()) client = *std::move(connected);
      }
      if (client != nullptr) {
        absl::StatusOr<v1::GetClusterResponse> cluster = client->GetCluster();
        if (cluster.ok()) {
          missing = expected;
          for (const v1::WorkerInfo& worker : cluster->workers()) {
            if (worker.state() != v1::WorkerInfo::STATE_LOST) {
              missing.erase(worker.name());
            }
          }
          if (missing.empty()) return *std::move(cluster);
        }
      }
      if (absl::Now() > deadline) {
        std::vector<std::string> logs;
        for (const ClusterProcess& process : file_.processes) {
          if (missing.count(process.name) > 0) logs.push_back(process.log);
        }
        return absl::DeadlineExceededError(
            absl::StrCat("timed out waiting for workers to register (missing: ",
                         absl::StrJoin(missing, ", "), "); see ",
                         logs.empty() ? file_.processes.front().log
                                      : absl::StrJoin(logs, ", ")));
      }
      absl::SleepFor(kPollInterval);
    }
  }

 private:
  const std::string dir_;
  ClusterFile file_;
  bool committed_ = false;
};

// What `up --monitoring` set up besides the cluster file, for its text.
struct MonitoringSetup {
  std::string config;  // DIR/prometheus/prometheus.yml
  std::string data;    // DIR/prometheus/data
  std::vector<std::string> rule_files;
  std::optional<std::string> source_tree;
};

// The --devices that --worker-flags gives the workers, if any (the last
// one, as the worker's flag parser takes it): it overrides up's own.
std::optional<std::string> DevicesInWorkerFlags(const std::string& flags) {
  std::optional<std::string> devices;
  const std::vector<std::string> words =
      absl::StrSplit(flags, ' ', absl::SkipEmpty());
  for (size_t i = 0; i < words.size(); ++i) {
    for (absl::string_view prefix : {"--devices=", "-devices="}) {
      if (absl::StartsWith(words[i], prefix)) {
        devices = words[i].substr(prefix.size());
      }
    }
    if ((words[i] == "--devices" || words[i] == "-devices") &&
        i + 1 < words.size()) {
      devices = words[i + 1];
    }
  }
  return devices;
}

// `kind` is what the workers registered: --worker-flags may override
// --devices.
std::string DevicesText(const ClusterFile& file, const std::string& kind) {
  return absl::StrCat(file.workers, " x ", file.devices_per_worker, " ", kind,
                      " devices (--devices ", file.devices, ")");
}

std::string MonitoringText(const ClusterFile& file,
                           const MonitoringSetup& monitoring) {
  std::string out = "  metrics     ";
  size_t width = 0;
  for (const ClusterProcess& process : file.processes) {
    if (!process.metrics.empty()) width = std::max(width, process.name.size());
  }
  bool first = true;
  for (const ClusterProcess& process : file.processes) {
    if (process.metrics.empty()) continue;
    std::string name = process.name;
    name.resize(width + 2, ' ');
    absl::StrAppend(&out, first ? "" : "              ", name,
                    MetricsUrl(process.metrics), "\n");
    first = false;
  }
  int prometheus_pid = 0;
  for (const ClusterProcess& process : file.processes) {
    if (process.role == "prometheus") prometheus_pid = process.pid;
  }
  absl::StrAppend(&out, "  prometheus  ", file.prometheus, " (pid ",
                  prometheus_pid, "), scraping every daemon\n",
                  "              config ", monitoring.config, ", data ",
                  monitoring.data, "\n");
  if (monitoring.rule_files.empty()) {
    absl::StrAppend(&out,
                    "              alert rules: none (no meshcast sources "
                    "found near meshctl or the working directory)\n");
  } else {
    absl::StrAppend(&out, "              alert rules: ",
                    absl::StrJoin(monitoring.rule_files, ", "), "\n");
  }
  return out;
}

std::string UsageText(const ClusterFile& file, const std::string& device_kind,
                      const MonitoringSetup* monitoring) {
  const int hosts = file.workers >= 2 ? file.workers / 2 : 1;
  const std::string mesh =
      absl::StrCat(hosts, "x", std::max(1, file.devices_per_worker));
  std::string out = absl::StrCat(
      "meshcast local cluster is up in ", file.dir, "\n", "  controller  ",
      file.controller, " (pid ", file.processes[0].pid, ")\n", "  workers     ",
      DevicesText(file, device_kind), "\n", "  logs        ", file.dir,
      "/logs\n", "  database    ", file.database, "\n");
  absl::StrAppend(
      &out, "  security    ",
      file.insecure
          ? "NONE (--insecure): no TLS, no authentication\n"
          : absl::StrCat("TLS with the CA ", file.tls_ca, ", admin token ",
                         file.token_file,
                         "\n              (meshctl uses them for this "
                         "cluster; elsewhere pass --tls_ca and --token_file)\n"));
  if (monitoring != nullptr) {
    absl::StrAppend(&out, MonitoringText(file, *monitoring));
  }
  absl::StrAppend(
      &out, "\n", "Use it:\n", "  export MESHCAST_CONTROLLER=", file.controller,
      "\n",
      file.insecure ? ""
                    : absl::StrCat("  export MESHCAST_TLS_CA=", file.tls_ca,
                                   " MESHCAST_TOKEN_FILE=", file.token_file,
                                   "\n"), "  meshctl cluster\n",
      "  meshctl submit reshard --shape 64x64x256 --dtype int32 \\\n",
      "    --src-mesh ", mesh, " --src-spec S0RR --dst-mesh ", mesh,
      " --dst-spec RS0R", file.workers >= 2 ? "" : " --allow-overlap",
      " --wait\n", "  meshctl list\n");
  if (monitoring != nullptr) {
    absl::StrAppend(
        &out, "Watch it:\n", "  ", file.prometheus, "/targets, ",
        file.prometheus,
        "/graph?g0.expr=meshcast_controller_jobs_finished_total\n",
        GrafanaInstructions(file.prometheus, monitoring->source_tree));
  }
  absl::StrAppend(&out, "Stop it:\n", "  meshctl down --dir ", file.dir, "\n");
  return out;
}

// An absolute, symlink-free path for a binary given on the command line, so
// that `down` recognises the process by its argv[0].
std::string AbsoluteBinary(const std::string& path) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) != nullptr) return resolved;
  return path;
}

// meshcast daemons not in cluster.json that belong to the cluster anyway
// (restarted by hand): a meshcast-controller or meshcast-worker whose
// command line names the cluster directory (its --db, port, certificate or
// metrics files) or, for a worker, the recorded controller address. Found
// by scanning /proc/<pid>/cmdline; Linux only (elsewhere: none).
struct StrayDaemon {
  int pid = 0;
  bool controller = false;
};
std::vector<StrayDaemon> FindStrayDaemons(const std::string& dir,
                                          const std::string& controller,
                                          const std::set<int>& known) {
  std::error_code error;
  const std::string canonical =
      std::filesystem::weakly_canonical(dir, error).string();
  std::vector<StrayDaemon> found;
  for (auto it = std::filesystem::directory_iterator("/proc", error);
       !error && it != std::filesystem::directory_iterator();
       it.increment(error)) {
    int pid = 0;
    if (!absl::SimpleAtoi(it->path().filename().string(), &pid) ||
        pid == getpid() || known.count(pid) > 0) {
      continue;
    }
    std::ifstream file(it->path() / "cmdline", std::ios::binary);
    const std::string cmdline((std::istreambuf_iterator<char>(file)),
                              std::istreambuf_iterator<char>());
    std::vector<std::string> argv = absl::StrSplit(cmdline, '\0');
    if (argv.empty()) continue;
    const std::string program =
        std::filesystem::path(argv[0]).filename().string();
    const bool is_controller = program == "meshcast-controller";
    if (!is_controller && program != "meshcast-worker") continue;
    bool ours = false;
    for (size_t i = 1; i < argv.size() && !ours; ++i) {
      const std::string& arg = argv[i];
      // The absolute directory only: a relative one would match others.
      ours = (!canonical.empty() &&
              absl::StrContains(arg, absl::StrCat(canonical, "/"))) ||
             (!is_controller && !controller.empty() &&
              arg == absl::StrCat("--controller=", controller));
    }
    if (ours) found.push_back({pid, is_controller});
  }
  return found;
}

bool IsExecutable(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error) &&
         access(path.c_str(), X_OK) == 0;
}

// The directories FindSourceTree starts from: meshctl's own and the
// working directory.
std::vector<std::string> SourceTreeStarts(const CommandContext& context) {
  std::vector<std::string> starts;
  if (!context.program_path.empty()) {
    starts.push_back(
        std::filesystem::path(context.program_path).parent_path().string());
  }
  std::error_code error;
  const std::filesystem::path cwd = std::filesystem::current_path(error);
  if (!error) starts.push_back(cwd.string());
  return starts;
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

struct PrometheusOptions {
  std::string binary;  // absolute
  int port = 0;        // 0: pick a free one
  absl::Duration scrape_interval;
};

// The Prometheus part of `up --monitoring`, once every daemon `launcher`
// started is registered: records their metrics ports, writes
// DIR/prometheus/prometheus.yml, starts Prometheus through `launcher` (so
// that a failure stops it with the rest), records it in cluster.json and
// waits until it is ready and scrapes every daemon. Errors are one line
// naming the log to read.
absl::StatusOr<MonitoringSetup> StartPrometheus(
    Launcher& launcher, const PrometheusOptions& options,
    const CommandContext& context, absl::Time deadline) {
  ClusterFile& file = launcher.file();
  RETURN_IF_ERROR(launcher.CollectMetricsPorts(deadline));
  std::vector<ScrapeTarget> targets;
  for (const ClusterProcess& process : file.processes) {
    targets.push_back(ScrapeTarget{
        process.role == "controller" ? kControllerScrapeJob : kWorkerScrapeJob,
        process.metrics, process.role == "worker" ? process.name : ""});
  }
  MonitoringSetup setup;
  setup.source_tree = FindSourceTree(SourceTreeStarts(context));
  if (setup.source_tree) setup.rule_files = AlertRuleFiles(*setup.source_tree);
  setup.config = absl::StrCat(file.dir, "/prometheus/prometheus.yml");
  setup.data = absl::StrCat(file.dir, "/prometheus/data");
  RETURN_IF_ERROR(WriteTextFile(setup.config,
                                PrometheusConfigYaml(targets, setup.rule_files,
                                                     options.scrape_interval)));
  int port = options.port;
  if (port == 0) {
    // The macro expands to several statements: keep the braces.
    ASSIGN_OR_RETURN(port, PickFreeLoopbackPort());
  }
  const std::string address = absl::StrCat("127.0.0.1:", port);
  file.prometheus = absl::StrCat("http://", address);
  RETURN_IF_ERROR(
      launcher.Start("prometheus", "prometheus", options.binary,
                     {absl::StrCat("--config.file=", setup.config),
                      absl::StrCat("--storage.tsdb.path=", setup.data),
                      absl::StrCat("--web.listen-address=", address)}));
  RETURN_IF_ERROR(WriteClusterFile(file.dir, file));
  const absl::Status ready =
      WaitForPrometheus(address, static_cast<int>(targets.size()), deadline,
                        [&launcher] { return launcher.CheckAlive(); });
  // A process that died names its own log; a timeout points at
  // Prometheus's.
  if (absl::IsDeadlineExceeded(ready)) {
    return absl::DeadlineExceededError(absl::StrCat(
        ready.message(), "; see ", file.dir, "/logs/prometheus.log"));
  }
  RETURN_IF_ERROR(ready);
  return setup;
}

}  // namespace

absl::Status CheckLeaseAndHeartbeat(double lease_seconds,
                                    double heartbeat_seconds,
                                    absl::string_view controller_flags) {
  // Flags passed through come last on the controller's command line and
  // win; the controller judges those itself.
  if (PassesFlag(controller_flags, "lease_seconds") ||
      PassesFlag(controller_flags, "heartbeat_seconds")) {
    return absl::OkStatus();
  }
  const double lease =
      lease_seconds > 0 ? lease_seconds : kControllerDefaultLeaseSeconds;
  const double heartbeat = heartbeat_seconds > 0
                               ? heartbeat_seconds
                               : kControllerDefaultHeartbeatSeconds;
  if (lease > heartbeat) return absl::OkStatus();
  const auto shown = [](double given, double used) {
    return given > 0 ? absl::StrCat(used)
                     : absl::StrCat(used, ", the controller's default");
  };
  return absl::InvalidArgumentError(absl::StrCat(
      "--lease-seconds (", shown(lease_seconds, lease),
      ") must be greater than --heartbeat-seconds (",
      shown(heartbeat_seconds, heartbeat),
      "): a worker is lost when it has not sent a heartbeat for a whole "
      "lease"));
}

CommandResult RunUpCommand(const std::vector<std::string>& args,
                           const CommandContext& context) {
  constexpr char kCommand[] = "meshctl up";
  int workers = 4;
  int devices_per_worker = kDefaultCpuDevicesPerWorker;
  std::string devices_flag;
  std::string dir_flag;
  double inter_gbps = 10;
  double intra_gbps = 100;
  int controller_port = 0;
  std::string bin_dir;
  double timeout_seconds = 30;
  double lease_seconds = 0;
  double heartbeat_seconds = 0;
  std::string controller_flags;
  std::string worker_flags;
  bool monitoring = false;
  bool insecure = false;
  int prometheus_port = 0;
  std::string prometheus_binary = kDefaultPrometheusBinary;
  double scrape_interval_seconds = 1;
  std::string output = "table";
  FlagSet flags(kCommand, absl::StrCat(kUpDescription, "\n\n", kExitCodesHelp));
  flags.Int("workers", &workers, "N", "number of worker processes (hosts)");
  flags.String("devices", &devices_flag, "SPEC",
               "every worker's devices: cpu:N (N virtual CPU devices), cuda\n"
               "(every visible GPU), cuda:0,1 (CUDA ordinals), cuda:0x4 (4\n"
               "devices on GPU 0); default cpu:4");
  flags.Int("devices-per-worker", &devices_per_worker, "K",
            "short for --devices cpu:K");
  flags.String("dir", &dir_flag, "DIR",
               "cluster directory (default: $MESHCAST_HOME, else ./.meshcast)");
  flags.Double("inter-gbps", &inter_gbps, "GBPS",
               "topology bandwidth between hosts, Gbit/s (for planning)");
  flags.Double("intra-gbps", &intra_gbps, "GBPS",
               "topology bandwidth inside a host, Gbit/s (for planning)");
  flags.Int("controller-port", &controller_port, "PORT",
            "controller port on 127.0.0.1 (0 = any free port)");
  flags.String("bin-dir", &bin_dir, "DIR",
               "directory holding meshcast-controller and meshcast-worker");
  flags.Double("timeout", &timeout_seconds, "SECONDS",
               "how long to wait for every worker to register (and, with\n"
               "--monitoring, for Prometheus to scrape every daemon)");
  flags.Double("lease-seconds", &lease_seconds, "SECONDS",
               "worker lease: a worker silent this long is lost (0 = the\n"
               "controller's default)");
  flags.Double("heartbeat-seconds", &heartbeat_seconds, "SECONDS",
               "worker heartbeat period (0 = the controller's default);\n"
               "must be shorter than the lease");
  flags.String("controller-flags", &controller_flags, "FLAGS",
               FlagsHelpFor(kControllerBinary, kControllerFlagsExample));
  flags.String("worker-flags", &worker_flags, "FLAGS",
               FlagsHelpFor(kWorkerBinary, kWorkerFlagsExample));
  flags.Bool("monitoring", &monitoring,
             "serve the daemons' metrics on 127.0.0.1 and start a local\n"
             "Prometheus scraping them (see above)");
  flags.Int("prometheus-port", &prometheus_port, "PORT",
            "with --monitoring: Prometheus's port on 127.0.0.1 (0 = a free "
            "port)");
  flags.String("prometheus-bin", &prometheus_binary, "PATH",
               "with --monitoring: the Prometheus server binary");
  flags.Double("scrape-interval", &scrape_interval_seconds, "SECONDS",
               "with --monitoring: scrape and rule evaluation interval");
  AddOutputFlag(flags, &output,
                "table: how to use the cluster (wide: the same); json: the\n"
                "cluster.json record; yaml: the same data as YAML");
  flags.Bool("insecure", &insecure,
             "no TLS and no tokens (anyone on this machine can use the\n"
             "cluster); by default DIR/tls holds a CA, certificates for\n"
             "every daemon and an admin token, and everything uses them");
  if (auto done = ParseCommandFlags(flags, args, kCommand, 0,
                                    "every input is a flag, see 'meshctl up "
                                    "--help'")) {
    return *done;
  }
  if (workers < 1 || workers > 256) {
    return Fail(kCommand, kExitUsage,
                absl::StrCat("--workers: must be 1..256, got ", workers));
  }
  if (flags.IsSet("devices") && devices_flag.empty()) {
    return Fail(kCommand, kExitUsage,
                "--devices: must not be empty; e.g. cpu:4, cuda, cuda:0x4");
  }
  absl::StatusOr<WorkerDevices> devices = ResolveWorkerDevices(
      devices_flag, devices_per_worker, flags.IsSet("devices-per-worker"));
  if (!devices.ok()) {
    return Fail(kCommand, kExitUsage, devices.status().message());
  }
  for (const auto& [flag, port] :
       {std::pair<const char*, int>{"--controller-port", controller_port},
        {"--prometheus-port", prometheus_port}}) {
    if (port < 0 || port > 65535) {
      return Fail(kCommand, kExitUsage,
                  absl::StrCat(flag, ": must be 0..65535, got ", port));
    }
  }
  for (const auto& [flag, value, zero_ok] :
       {std::tuple<const char*, double, bool>{"--inter-gbps", inter_gbps,
                                              false},
        {"--intra-gbps", intra_gbps, false},
        {"--timeout", timeout_seconds, false},
        {"--lease-seconds", lease_seconds, true},
        {"--heartbeat-seconds", heartbeat_seconds, true},
        {"--scrape-interval", scrape_interval_seconds, false}}) {
    if (!(value > 0 || (zero_ok && value == 0)) || !std::isfinite(value)) {
      return Fail(kCommand, kExitUsage,
                  absl::StrCat(flag, ": must be ", zero_ok ? ">= 0" : "> 0",
                               ", got ", value));
    }
  }
  if (absl::Status status = CheckLeaseAndHeartbeat(
          lease_seconds, heartbeat_seconds, controller_flags);
      !status.ok()) {
    return FailWithStatus(kCommand, status);
  }
  if (!monitoring) {
    for (const char* flag :
         {"prometheus-port", "prometheus-bin", "scrape-interval"}) {
      if (flags.IsSet(flag)) {
        return Fail(kCommand, kExitUsage,
                    absl::StrCat("--", flag, ": only with --monitoring"));
      }
    }
  }
  if (monitoring) {
    prometheus_binary = AbsoluteBinary(prometheus_binary);
    if (!IsExecutable(prometheus_binary)) {
      return Fail(
          kCommand, flags.IsSet("prometheus-bin") ? kExitUsage : kExitFailure,
          absl::StrCat(
              "--monitoring: no Prometheus server at ", prometheus_binary,
              flags.IsSet("prometheus-bin")
                  ? " (--prometheus-bin)"
                  : "; install Debian's `prometheus` package (apt-get "
                    "install prometheus, or scripts/install-deps.sh) or pass "
                    "--prometheus-bin PATH"));
    }
  }

  absl::StatusOr<std::string> dir =
      MakeDirectory(LocalClusterDir(dir_flag, context));
  if (!dir.ok()) return FailWithStatus(kCommand, dir.status());
  if (absl::StatusOr<ClusterFile> existing = ReadClusterFile(*dir);
      existing.ok() && !existing->processes.empty() &&
      IsProcessOf(existing->processes[0].pid, existing->processes[0].binary)) {
    return Fail(kCommand, kExitFailure,
                absl::StrCat("a local cluster is already running in ", *dir,
                             " (controller ", existing->controller, ", pid ",
                             existing->processes[0].pid,
                             "); stop it with 'meshctl down --dir ", *dir,
                             "' or use another --dir"));
  }
  absl::StatusOr<std::string> controller_binary =
      FindDaemonBinary(kControllerBinary, "controller", bin_dir, context);
  // A wrong --bin-dir is bad input; a missing build is a failure.
  const int missing_binary_code = bin_dir.empty() ? kExitFailure : kExitUsage;
  if (!controller_binary.ok()) {
    return Fail(kCommand, missing_binary_code,
                controller_binary.status().message());
  }
  absl::StatusOr<std::string> worker_binary =
      FindDaemonBinary(kWorkerBinary, "worker", bin_dir, context);
  if (!worker_binary.ok()) {
    return Fail(kCommand, missing_binary_code,
                worker_binary.status().message());
  }
  if (monitoring) {
    std::error_code error;
    std::filesystem::create_directories(*dir + "/metrics", error);
    if (!error) {
      std::filesystem::create_directories(*dir + "/prometheus/data", error);
    }
    if (error) {
      return Fail(kCommand, kExitFailure,
                  absl::StrCat("--monitoring: cannot create directories in ",
                               *dir, ": ", error.message()));
    }
  }

  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_seconds);
  Launcher launcher(*dir);
  ClusterFile& file = launcher.file();
  file.dir = *dir;
  file.database = absl::StrCat(*dir, "/meshcast.db");
  file.workers = workers;
  file.devices = devices->spec;
  file.devices_per_worker = devices->count;
  file.started_unix = NowUnix();

  // TLS and tokens unless --insecure (docs/security.md).
  std::vector<std::string> worker_names;
  for (int i = 0; i < workers; ++i) {
    worker_names.push_back(absl::StrCat("worker-", i));
  }
  std::vector<std::string> controller_security = {"--insecure"};
  std::vector<std::vector<std::string>> worker_security(
      workers, std::vector<std::string>{"--insecure"});
  std::string warning;
  if (insecure) {
    warning =
        "meshctl up: WARNING: --insecure: no TLS and no authentication; any "
        "local process can register workers, run tasks and cancel jobs\n";
  } else {
    absl::StatusOr<security::ClusterCredentialFiles> credentials =
        security::WriteClusterCredentials(*dir + "/tls", worker_names);
    if (!credentials.ok()) {
      return Fail(kCommand, kExitFailure,
                  absl::StrCat("cannot write the cluster's certificates: ",
                               credentials.status().message()));
    }
    controller_security = {
        absl::StrCat("--tls_cert=", credentials->controller.cert),
        absl::StrCat("--tls_key=", credentials->controller.key),
        absl::StrCat("--tls_ca=", credentials->ca_cert),
        absl::StrCat("--tokens_file=", credentials->tokens)};
    for (int i = 0; i < workers; ++i) {
      worker_security[i] = {
          absl::StrCat("--tls_cert=", credentials->workers[i].cert),
          absl::StrCat("--tls_key=", credentials->workers[i].key),
          absl::StrCat("--tls_ca=", credentials->ca_cert)};
    }
    file.insecure = false;
    file.tls_ca = credentials->ca_cert;
    file.token_file = credentials->admin_token;
  }

  std::remove(PortFile(*dir).c_str());
  std::vector<std::string> controller_args = {
      absl::StrCat("--listen=127.0.0.1:", controller_port),
      absl::StrCat("--port_file=", PortFile(*dir)),
      absl::StrCat("--db=", file.database),
      absl::StrCat("--inter_gbps=", inter_gbps),
      absl::StrCat("--intra_gbps=", intra_gbps)};
  if (lease_seconds > 0) {
    controller_args.push_back(absl::StrCat("--lease_seconds=", lease_seconds));
  }
  if (heartbeat_seconds > 0) {
    controller_args.push_back(
        absl::StrCat("--heartbeat_seconds=", heartbeat_seconds));
  }
  controller_args.insert(controller_args.end(), controller_security.begin(),
                         controller_security.end());
  if (monitoring) {
    std::remove(MetricsPortFile(*dir, "controller").c_str());
    for (std::string& flag : MetricsFlags(*dir, "controller")) {
      controller_args.push_back(std::move(flag));
    }
  }
  // Extra flags last: Abseil keeps the last value of a repeated flag, so
  // they override meshctl's.
  for (absl::string_view extra :
       absl::StrSplit(controller_flags, ' ', absl::SkipEmpty())) {
    controller_args.emplace_back(extra);
  }
  if (absl::Status status =
          launcher.Start("controller", "controller", *controller_binary,
                         std::move(controller_args));
      !status.ok()) {
    return FailWithStatus(kCommand, status);
  }
  absl::StatusOr<int> port = launcher.WaitForPort(deadline);
  if (!port.ok()) return Fail(kCommand, kExitFailure, port.status().message());
  file.controller = absl::StrCat("127.0.0.1:", *port);
  // The bound port replaces port 0, so the recorded command line restarts
  // the controller where the workers look for it.
  file.processes[0].args[0] = absl::StrCat("--listen=", file.controller);

  for (int i = 0; i < workers; ++i) {
    const std::string& name = worker_names[i];
    std::vector<std::string> worker_args = {
        absl::StrCat("--controller=", file.controller), "--listen=127.0.0.1:0",
        absl::StrCat("--name=", name),
        absl::StrCat("--devices=", devices->spec), "--data_address=127.0.0.1"};
    worker_args.insert(worker_args.end(), worker_security[i].begin(),
                       worker_security[i].end());
    if (monitoring) {
      std::remove(MetricsPortFile(*dir, name).c_str());
      for (std::string& flag : MetricsFlags(*dir, name)) {
        worker_args.push_back(std::move(flag));
      }
    }
    const std::string socket = LocalSocketPath(*dir, name);
    if (!socket.empty()) worker_args.push_back("--local_socket=" + socket);
    for (absl::string_view extra :
         absl::StrSplit(worker_flags, ' ', absl::SkipEmpty())) {
      worker_args.emplace_back(extra);
    }
    if (absl::Status status = launcher.Start("worker", name, *worker_binary,
                                             std::move(worker_args));
        !status.ok()) {
      return FailWithStatus(kCommand, status);
    }
    file.processes.back().local_socket = socket;
  }
  if (std::optional<std::string> given = DevicesInWorkerFlags(worker_flags)) {
    file.devices = *given;
  }
  // Recorded before the wait, so that `meshctl down` can clean up if this
  // process is interrupted.
  if (absl::Status status = WriteClusterFile(*dir, file); !status.ok()) {
    return FailWithStatus(kCommand, status);
  }
  absl::StatusOr<v1::GetClusterResponse> cluster =
      launcher.WaitForWorkers(deadline);
  if (!cluster.ok()) {
    return Fail(kCommand, kExitFailure, cluster.status().message());
  }
  // What the workers registered is the truth: `cuda` counts the visible
  // GPUs, and --worker-flags may have overridden --devices.
  std::string device_kind = devices->kind;
  for (const v1::WorkerInfo& worker : cluster->workers()) {
    if (worker.name() != "worker-0") continue;
    if (worker.num_devices() > 0)
      file.devices_per_worker = worker.num_devices();
    if (!worker.device_kind().empty()) device_kind = worker.device_kind();
  }

  std::optional<MonitoringSetup> setup;
  if (monitoring) {
    absl::StatusOr<MonitoringSetup> started = StartPrometheus(
        launcher,
        PrometheusOptions{prometheus_binary, prometheus_port,
                          absl::Seconds(scrape_interval_seconds)},
        context, deadline);
    if (!started.ok()) {
      return Fail(kCommand, kExitFailure, started.status().message());
    }
    setup = *std::move(started);
  }
  if (absl::Status status = WriteClusterFile(*dir, file); !status.ok()) {
    return FailWithStatus(kCommand, status);
  }
  launcher.Commit();
  CommandResult result;
  result.err = warning;
  result.out = IsStructuredOutput(output)
                   ? RenderStructuredText(ClusterFileToJson(file), output)
                   : UsageText(file, device_kind, setup ? &*setup : nullptr);
  return result;
}

CommandResult RunDownCommand(const std::vector<std::string>& args,
                             const CommandContext& context) {
  constexpr char kCommand[] = "meshctl down";
  std::string dir_flag;
  double grace_seconds = 10;
  FlagSet flags(
      kCommand,
      absl::StrCat(
          "Stops the local cluster recorded in DIR/cluster.json by 'meshctl\n"
          "up': SIGTERM to the controller (it fails its unfinished jobs with\n"
          "\"controller shut down\"), then to the workers, then to the local\n"
          "Prometheus of 'up --monitoring'; SIGKILL to any still running\n"
          "after --grace seconds. Daemons of the cluster restarted by hand\n"
          "are stopped too: any meshcast-controller or meshcast-worker\n"
          "whose command line names DIR (or, for a worker, the recorded\n"
          "controller address). Removes cluster.json; logs, the job\n"
          "database and Prometheus's data stay, so a later 'meshctl up' on\n"
          "the same directory lists the old jobs.\n\n",
          kExitCodesHelp));
  flags.String("dir", &dir_flag, "DIR",
               "cluster directory (default: $MESHCAST_HOME, else ./.meshcast)");
  flags.Double("grace", &grace_seconds, "SECONDS",
               "how long to wait after SIGTERM before SIGKILL");
  if (auto done = ParseCommandFlags(flags, args, kCommand, 0,
                                    "see 'meshctl down --help'")) {
    return *done;
  }
  if (!(grace_seconds >= 0) || !std::isfinite(grace_seconds)) {
    return Fail(
        kCommand, kExitUsage,
        absl::StrCat("--grace: must be >= 0 seconds, got ", grace_seconds));
  }
  const std::string dir = LocalClusterDir(dir_flag, context);
  absl::StatusOr<ClusterFile> file = ReadClusterFile(dir);
  if (!file.ok()) {
    return Fail(kCommand, kExitFailure, file.status().message());
  }
  // The controller first, so that it records why unfinished jobs ended
  // rather than blaming lost workers; Prometheus last, so that it sees the
  // daemons go.
  std::vector<int> controllers, workers, prometheus;
  int already_stopped = 0;
  for (const ClusterProcess& process : file->processes) {
    if (!IsProcessOf(process.pid, process.binary)) {
      ++already_stopped;
      continue;
    }
    if (process.role == "controller") {
      controllers.push_back(process.pid);
    } else if (process.role == "prometheus") {
      prometheus.push_back(process.pid);
    } else {
      workers.push_back(process.pid);
    }
  }
  // Daemons of this cluster restarted by hand are not in cluster.json.
  std::set<int> known;
  for (const ClusterProcess& process : file->processes) {
    known.insert(process.pid);
  }
  int strays = 0;
  for (const StrayDaemon& stray :
       FindStrayDaemons(file->dir.empty() ? dir : file->dir, file->controller,
                        known)) {
    (stray.controller ? controllers : workers).push_back(stray.pid);
    ++strays;
  }
  const absl::Duration grace = absl::Seconds(grace_seconds);
  std::vector<int> killed;
  for (const std::vector<int>* group : {&controllers, &workers, &prometheus}) {
    const std::vector<int> group_killed = StopProcesses(*group, grace);
    killed.insert(killed.end(), group_killed.begin(), group_killed.end());
  }
  RemoveClusterFile(dir).IgnoreError();
  std::remove(PortFile(dir).c_str());
  for (const ClusterProcess& process : file->processes) {
    std::remove(MetricsPortFile(dir, process.name).c_str());
  }

  CommandResult result;
  result.out = absl::StrCat("stopped the local cluster in ",
                            file->dir.empty() ? dir : file->dir, ": ",
                            controllers.size(), " controller and ",
                            workers.size(), " worker process(es)");
  if (!prometheus.empty()) absl::StrAppend(&result.out, " and Prometheus");
  if (strays > 0) {
    absl::StrAppend(&result.out, " (", strays,
                    " not in cluster.json: started by hand)");
  }
  if (already_stopped > 0) {
    absl::StrAppend(&result.out, ", ", already_stopped, " had already exited");
  }
  if (!killed.empty()) {
    absl::StrAppend(&result.out, ", SIGKILL needed for pid(s) ",
                    absl::StrJoin(killed, ","));
  }
  absl::StrAppend(&result.out, "; logs and database kept\n");
  return result;
}

CommandResult RunClusterCommand(const std::vector<std::string>& args,
                                const CommandContext& context) {
  constexpr char kCommand[] = "meshctl cluster";
  std::string output = "table";
  ClientFlags client_flags;
  FlagSet flags(
      kCommand,
      absl::StrCat(
          "Shows the live cluster: its topology (hosts x devices and link\n"
          "bandwidths used for planning) and one row per worker: host index,\n"
          "name, address, global device ids, memory (host memory of a cpu\n"
          "worker, its GPUs' memory for cuda: the controller refuses jobs\n"
          "whose tiles cannot fit), state (ready, busy, lost) and last\n"
          "heartbeat. --output json: {controller, topology{num_hosts,\n"
          "devices_per_host, *_bandwidth_bytes_per_second, ...}, workers[{\n"
          "name, address, data_address, host_index, device_kind, num_devices,\n"
          "memory_bytes, devices, state, last_heartbeat_unix}]}.\n\n",
          kControllerHelp, "\n\n", kExitCodesHelp));
  AddOutputFlag(flags, &output,
                "table: human-readable; wide: with each worker's data\n"
                "address; json: one JSON object; yaml: the same data as YAML");
  client_flags.Register(flags);
  if (auto done = ParseCommandFlags(flags, args, kCommand, 0,
                                    "see 'meshctl cluster --help'")) {
    return *done;
  }
  absl::StatusOr<std::unique_ptr<ControllerClient>> client =
      client_flags.Connect(context);
  if (!client.ok()) return FailWithStatus(kCommand, client.status());
  absl::StatusOr<v1::GetClusterResponse> cluster = (*client)->GetCluster();
  if (!cluster.ok()) return FailWithStatus(kCommand, cluster.status());
  CommandResult result;
  result.out =
      IsStructuredOutput(output)
          ? RenderStructured(ClusterToJson(*cluster, (*client)->address()),
                             output)
          : RenderCluster(*cluster, (*client)->address(), NowUnix(),
                          /*wide=*/output == "wide");
  return result;
}

}  // namespace meshcast::cli
