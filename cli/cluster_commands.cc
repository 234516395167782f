#include "cli/cluster_commands.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
#include "util/status_macros.h"

namespace meshcast::cli {
namespace {

constexpr char kControllerBinary[] = "meshcast-controller";
constexpr char kWorkerBinary[] = "meshcast-worker";
constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

constexpr char kUpDescription[] =
    "Starts a local meshcast cluster on this machine: one meshcast-controller\n"
    "and --workers meshcast-worker processes, each worker with\n"
    "--devices-per-worker virtual CPU devices, all on 127.0.0.1. They run in\n"
    "the background (own session) and keep running after meshctl exits.\n"
    "Logs (DIR/logs/*.log), the job database (DIR/meshcast.db) and\n"
    "DIR/cluster.json (controller address, pids, log paths) live in the\n"
    "cluster directory. meshctl up returns once every worker has registered\n"
    "with the controller, or fails naming the log of a daemon that died.\n"
    "\n"
    "The daemons are looked for in --bin-dir, else next to meshctl's build\n"
    "tree (../controller, ../worker), else beside meshctl, else on $PATH.\n"
    "\n"
    "Other meshctl commands find the cluster through DIR/cluster.json (the\n"
    "same --dir / $MESHCAST_HOME / ./.meshcast), or through\n"
    "MESHCAST_CONTROLLER, which meshctl up prints. Stop it with\n"
    "'meshctl down'.";

std::string FlagsHelpFor(const char* binary) {
  return absl::StrCat("extra flags for every ", binary,
                      ", space-separated, e.g. \"--chunk_bytes=65536\"");
}

std::string PortFile(const std::string& dir) {
  return absl::StrCat(dir, "/controller.port");
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

// A daemon's death as one line pointing at its log.
std::string DiedMessage(const ClusterProcess& process, const std::string& how) {
  const std::string last = LastLogLine(process.log);
  return absl::StrCat(
      process.binary.substr(process.binary.rfind('/') + 1), " ", process.name,
      " ", how.empty() ? "exited" : how, " during startup; see ", process.log,
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

  // The controller's port once it has written its port file.
  absl::StatusOr<int> WaitForPort(absl::Time deadline) {
    const std::string path = PortFile(dir_);
    while (true) {
      std::ifstream in(path);
      int port = 0;
      std::string text;
      if (in && std::getline(in, text) &&
          absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port) &&
          port > 0) {
        return port;
      }
      RETURN_IF_ERROR(CheckAlive());
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("the controller did not start listening in time; see ",
                         file_.processes.front().log));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  // Polls GetCluster until every worker named in the file is registered
  // and not lost.
  absl::Status WaitForWorkers(absl::Time deadline) {
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
          if (missing.empty()) return absl::OkStatus();
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

std::string UsageText(const ClusterFile& file) {
  const int hosts = file.workers >= 2 ? file.workers / 2 : 1;
  const std::string mesh = absl::StrCat(hosts, "x", file.devices_per_worker);
  std::string out = absl::StrCat(
      "meshcast local cluster is up in ", file.dir, "\n", "  controller  ",
      file.controller, " (pid ", file.processes[0].pid, ")\n", "  workers     ",
      file.workers, " x ", file.devices_per_worker, " cpu devices\n",
      "  logs        ", file.dir, "/logs\n", "  database    ", file.database,
      "\n\n", "Use it:\n", "  export MESHCAST_CONTROLLER=", file.controller,
      "\n", "  meshctl cluster\n",
      "  meshctl submit reshard --shape 64x64x256 --dtype int32 \\\n",
      "    --src-mesh ", mesh, " --src-spec S0RR --dst-mesh ", mesh,
      " --dst-spec RS0R", file.workers >= 2 ? "" : " --allow-overlap",
      " --wait\n", "  meshctl list\n", "Stop it:\n", "  meshctl down --dir ",
      file.dir, "\n");
  return out;
}

}  // namespace

CommandResult RunUpCommand(const std::vector<std::string>& args,
                           const CommandContext& context) {
  constexpr char kCommand[] = "meshctl up";
  int workers = 4;
  int devices_per_worker = 4;
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
  std::string output = "table";
  FlagSet flags(kCommand, absl::StrCat(kUpDescription, "\n\n", kExitCodesHelp));
  flags.Int("workers", &workers, "N", "number of worker processes (hosts)");
  flags.Int("devices-per-worker", &devices_per_worker, "K",
            "virtual CPU devices per worker");
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
               "how long to wait for every worker to register");
  flags.Double("lease-seconds", &lease_seconds, "SECONDS",
               "worker lease: a worker silent this long is lost (0 = the\n"
               "controller's default)");
  flags.Double("heartbeat-seconds", &heartbeat_seconds, "SECONDS",
               "worker heartbeat period (0 = the controller's default)");
  flags.String("controller-flags", &controller_flags, "FLAGS",
               FlagsHelpFor(kControllerBinary));
  flags.String("worker-flags", &worker_flags, "FLAGS",
               FlagsHelpFor(kWorkerBinary));
  flags.Choice("output", &output, {"table", "json"},
               "table: how to use the cluster; json: the cluster.json record");
  const absl::Status parsed = flags.Parse(args);
  if (flags.help_requested()) return CommandResult{kExitOk, flags.Usage(), ""};
  if (!parsed.ok()) return Fail(kCommand, kExitUsage, parsed.message());
  if (!flags.positional().empty()) {
    return Fail(kCommand, kExitUsage,
                absl::StrCat("unexpected argument '", flags.positional()[0],
                             "'; every input is a flag, see 'meshctl up "
                             "--help'"));
  }
  if (workers < 1 || workers > 256) {
    return Fail(kCommand, kExitUsage,
                absl::StrCat("--workers: must be 1..256, got ", workers));
  }
  if (devices_per_worker < 1 || devices_per_worker > 1024) {
    return Fail(kCommand, kExitUsage,
                absl::StrCat("--devices-per-worker: must be 1..1024, got ",
                             devices_per_worker));
  }
  if (controller_port < 0 || controller_port > 65535) {
    return Fail(kCommand, kExitUsage,
                absl::StrCat("--controller-port: must be 0..65535, got ",
                             controller_port));
  }
  for (const auto& [flag, value, zero_ok] :
       {std::tuple<const char*, double, bool>{"--inter-gbps", inter_gbps,
                                              false},
        {"--intra-gbps", intra_gbps, false},
        {"--timeout", timeout_seconds, false},
        {"--lease-seconds", lease_seconds, true},
        {"--heartbeat-seconds", heartbeat_seconds, true}}) {
    if (!(value > 0 || (zero_ok && value == 0))) {
      return Fail(kCommand, kExitUsage,
                  absl::StrCat(flag, ": must be ", zero_ok ? ">= 0" : "> 0",
                               ", got ", value));
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

  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_seconds);
  Launcher launcher(*dir);
  ClusterFile& file = launcher.file();
  file.dir = *dir;
  file.database = absl::StrCat(*dir, "/meshcast.db");
  file.workers = workers;
  file.devices_per_worker = devices_per_worker;
  file.started_unix = NowUnix();

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
    std::vector<std::string> worker_args = {
        absl::StrCat("--controller=", file.controller), "--listen=127.0.0.1:0",
        absl::StrCat("--name=worker-", i),
        absl::StrCat("--devices=cpu:", devices_per_worker),
        "--data_address=127.0.0.1"};
    for (absl::string_view extra :
         absl::StrSplit(worker_flags, ' ', absl::SkipEmpty())) {
      worker_args.emplace_back(extra);
    }
    if (absl::Status status =
            launcher.Start("worker", absl::StrCat("worker-", i), *worker_binary,
                           std::move(worker_args));
        !status.ok()) {
      return FailWithStatus(kCommand, status);
    }
  }
  // Recorded before the wait, so that `meshctl down` can clean up if this
  // process is interrupted.
  if (absl::Status status = WriteClusterFile(*dir, file); !status.ok()) {
    return FailWithStatus(kCommand, status);
  }
  if (absl::Status status = launcher.WaitForWorkers(deadline); !status.ok()) {
    return Fail(kCommand, kExitFailure, status.message());
  }
  launcher.Commit();
  CommandResult result;
  result.out = output == "json" ? ClusterFileToJson(file) : UsageText(file);
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
          "\"controller shut down\") and then to the workers, SIGKILL to any\n"
          "still running after --grace seconds. Removes cluster.json; logs\n"
          "and the job database stay, so a later 'meshctl up' on the same\n"
          "directory lists the old jobs.\n\n",
          kExitCodesHelp));
  flags.String("dir", &dir_flag, "DIR",
               "cluster directory (default: $MESHCAST_HOME, else ./.meshcast)");
  flags.Double("grace", &grace_seconds, "SECONDS",
               "how long to wait after SIGTERM before SIGKILL");
  const absl::Status parsed = flags.Parse(args);
  if (flags.help_requested()) return CommandResult{kExitOk, flags.Usage(), ""};
  if (!parsed.ok()) return Fail(kCommand, kExitUsage, parsed.message());
  if (!flags.positional().empty()) {
    return Fail(kCommand, kExitUsage,
                absl::StrCat("unexpected argument '", flags.positional()[0],
                             "'; see 'meshctl down --help'"));
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
  // rather than blaming lost workers.
  std::vector<int> controllers, workers;
  int already_stopped = 0;
  for (const ClusterProcess& process : file->processes) {
    if (!IsProcessOf(process.pid, process.binary)) {
      ++already_stopped;
      continue;
    }
    (process.role == "controller" ? controllers : workers)
        .push_back(process.pid);
  }
  const absl::Duration grace = absl::Seconds(grace_seconds);
  std::vector<int> killed = StopProcesses(controllers, grace);
  std::vector<int> killed_workers = StopProcesses(workers, grace);
  killed.insert(killed.end(), killed_workers.begin(), killed_workers.end());
  RemoveClusterFile(dir).IgnoreError();
  std::remove(PortFile(dir).c_str());

  CommandResult result;
  result.out = absl::StrCat("stopped the local cluster in ",
                            file->dir.empty() ? dir : file->dir, ": ",
                            controllers.size(), " controller and ",
                            workers.size(), " worker process(es)");
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
          "name, address, global device ids, state (ready, busy, lost) and\n"
          "last heartbeat. --output json: {controller, topology{num_hosts,\n"
          "devices_per_host, *_bandwidth_bytes_per_second, ...}, workers[{\n"
          "name, address, data_address, host_index, device_kind, num_devices,\n"
          "devices, state, last_heartbeat_unix}]}.\n\n",
          kControllerHelp, "\n\n", kExitCodesHelp));
  flags.Choice("output", &output, {"table", "json"},
               "table: human-readable; json: one JSON object");
  client_flags.Register(flags);
  const absl::Status parsed = flags.Parse(args);
  if (flags.help_requested()) return CommandResult{kExitOk, flags.Usage(), ""};
  if (!parsed.ok()) return Fail(kCommand, kExitUsage, parsed.message());
  if (!flags.positional().empty()) {
    return Fail(kCommand, kExitUsage,
                absl::StrCat("unexpected argument '", flags.positional()[0],
                             "'; see 'meshctl cluster --help'"));
  }
  absl::StatusOr<std::unique_ptr<ControllerClient>> client =
      client_flags.Connect(context);
  if (!client.ok()) return FailWithStatus(kCommand, client.status());
  absl::StatusOr<v1::GetClusterResponse> cluster = (*client)->GetCluster();
  if (!cluster.ok()) return FailWithStatus(kCommand, cluster.status());
  CommandResult result;
  result.out = output == "json"
                   ? ClusterToJson(*cluster, (*client)->address()).dump() + "\n"
                   : RenderCluster(*cluster, (*client)->address(), NowUnix());
  return result;
}

}  // namespace meshcast::cli
