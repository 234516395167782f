// `meshctl up` / `down` with stand-in daemons (shell scripts): startup
// failures and bookkeeping; with an in-process fake controller (the
// scripts hand out its port) and a fake Prometheus HTTP API, also a whole
// `up --monitoring` / `down` cycle. The real daemons and Prometheus are
// exercised by tests/cluster.
#include "cli/cluster_commands.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/cluster_file.h"
#include "cli/daemon_process.h"
#include "cli/fake_controller.h"
#include "cli/fake_http_server.h"
#include "cli/local_prometheus.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class ClusterCommandsTest : public ::testing::Test {
 protected:
  ClusterCommandsTest() {
    root_ = ::testing::TempDir() + "/cluster_commands_test_" +
            std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ + "/bin");
    context_.getenv = [](const std::string&) { return std::nullopt; };
  }

  void Script(const std::string& name, const std::string& body) {
    const std::string path = root_ + "/bin/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    chmod(path.c_str(), 0755);
  }

  CommandResult Up(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "--dir", root_ + "/cluster", "--bin-dir", root_ + "/bin", "--timeout",
        "3",     "--workers",        "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    // The fake controller speaks plaintext; TLS: UpTurnsTlsOnByDefault.
    if (secure_) return RunUpCommand(args, context_);
    args.push_back("--insecure");
    return RunUpCommand(args, context_);
  }
  bool secure_ = false;

  // The text of a file a stand-in script writes; `up` may return before a
  // script it did not wait for got there, so wait (bounded) for a line.
  std::string ReadFile(const std::string& path) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (true) {
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      const std::string content = text.str();
      if ((!content.empty() && content.back() == '\n') ||
          absl::Now() > deadline) {
        return content;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

  // Stand-in daemons around `fake`: the controller script writes the fake
  // controller's port (and a made-up metrics port) to the files meshctl
  // names, each worker writes metrics port 4510<index>; all record their
  // arguments in <root>/<name>.args and then sleep.
  void FakeDaemons(const FakeController& fake) {
    const std::string port =
        fake.address().substr(fake.address().rfind(':') + 1);
    Script("meshcast-controller", "echo \"$@\" > " + root_ +
                                      "/controller.args; "
                                      "for a in \"$@\"; do case $a in "
                                      "--metrics-port-file=*) echo 45001 > "
                                      "\"${a#--metrics-port-file=}\";; "
                                      "--port_file=*) echo " +
                                      port +
                                      " > \"${a#--port_file=}\";; "
                                      "esac; done; exec sleep 30");
    Script(
        "meshcast-worker",
        "name=; for a in \"$@\"; do case $a in --name=*) name=${a#--name=};; "
        "esac; done; echo \"$@\" > " +
            root_ +
            "/$name.args; "
            "for a in \"$@\"; do case $a in --metrics-port-file=*) "
            "echo 4510${name#worker-} > \"${a#--metrics-port-file=}\";; esac; "
            "done; exec sleep 30");
  }

  static v1::GetClusterResponse TwoWorkers(int devices,
                                           const std::string& kind = "cpu") {
    v1::GetClusterResponse cluster;
    for (const char* name : {"worker-0", "worker-1"}) {
      v1::WorkerInfo* worker = cluster.add_workers();
      worker->set_name(name);
      worker->set_num_devices(devices);
      worker->set_device_kind(kind);
      worker->set_state(v1::WorkerInfo::STATE_READY);
    }
    return cluster;
  }

  // `down` recognises a daemon by its argv[0]; the scripts exec `sleep`.
  void RecordSleepAsBinaries() {
    absl::StatusOr<ClusterFile> file = ReadClusterFile(root_ + "/cluster");
    ASSERT_TRUE(file.ok()) << file.status();
    for (ClusterProcess& process : file->processes) {
      const absl::Time deadline = absl::Now() + absl::Seconds(5);
      while (!IsProcessOf(process.pid, "sleep") && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      process.binary = "sleep";
    }
    ASSERT_TRUE(WriteClusterFile(root_ + "/cluster", *file).ok());
  }

  std::string root_;
  CommandContext context_;
};

TEST_F(ClusterCommandsTest, ControllerThatDiesPointsAtItsLog) {
  Script("meshcast-controller",
         "echo \"meshcast-controller: cannot open database\" >&2; exit 1");
  Script("meshcast-worker", "exec sleep 30");
  const CommandResult result = Up();
  EXPECT_EQ(result.exit_code, kExitFailure);
  // The binary names the daemon: no "meshcast-controller controller".
  EXPECT_THAT(result.err, StartsWith("meshctl up: meshcast-controller exited "
                                     "with status 1 during startup; see "));
  EXPECT_THAT(result.err, HasSubstr("/cluster/logs/controller.log"));
  EXPECT_THAT(result.err, HasSubstr("cannot open database"));
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1);
  // Nothing is left recorded.
  EXPECT_FALSE(ReadClusterFile(root_ + "/cluster").ok());
}

TEST_F(ClusterCommandsTest, WorkerThatDiesIsNamedAndEverythingStops) {
  // A controller that writes its port file and then idles (it never answers
  // gRPC, so the workers never register).
  Script("meshcast-controller",
         "for a in \"$@\"; do case $a in --port_file=*) "
         "echo 4242 > \"${a#--port_file=}\";; esac; done; exec sleep 30");
  Script("meshcast-worker",
         "case \"$*\" in *worker-1*) echo 'bad --devices' >&2; exit 2;; esac; "
         "exec sleep 30");
  const CommandResult result = Up();
  EXPECT_EQ(result.exit_code, kExitFailure);
  EXPECT_THAT(result.err, StartsWith("meshctl up: meshcast-worker worker-1 "
                                     "exited with status 2 during startup"));
  EXPECT_THAT(result.err, HasSubstr("worker-1.log (last line: bad --devices)"));
  EXPECT_FALSE(ReadClusterFile(root_ + "/cluster").ok());
}

TEST_F(ClusterCommandsTest, RegistrationTimeoutListsMissingWorkers) {
  Script("meshcast-controller",
         "for a in \"$@\"; do case $a in --port_file=*) "
         "echo 4242 > \"${a#--port_file=}\";; esac; done; exec sleep 30");
  Script("meshcast-worker", "exec sleep 30");
  const CommandResult result = Up({"--timeout", "1"});
  EXPECT_EQ(result.exit_code, kExitFailure);
  EXPECT_THAT(result.err,
              HasSubstr("timed out waiting for workers to register (missing: "
                        "worker-0, worker-1)"));
}

TEST_F(ClusterCommandsTest, BadFlags) {
  CommandResult result = Up({"--workers", "0"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_EQ(result.err, "meshctl up: --workers: must be 1..256, got 0\n");
  result = Up({"--inter-gbps", "-1"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("meshctl up: --inter-gbps: must be > 0"));
  result = Up();  // no binaries in --bin-dir
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err,
              HasSubstr("--bin-dir: no executable meshcast-controller"));
}

// The controller refuses a lease not longer than the heartbeat; `up` says
// so itself, as bad input, before starting anything.
TEST_F(ClusterCommandsTest, LeaseMustExceedHeartbeat) {
  FakeController fake;
  fake.SetCluster(TwoWorkers(4));
  FakeDaemons(fake);
  CommandResult result =
      Up({"--lease-seconds", "1", "--heartbeat-seconds", "5"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("meshctl up: --lease-seconds (1) must be "
                                     "greater than --heartbeat-seconds (5)"));
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1);
  EXPECT_FALSE(std::filesystem::exists(root_ + "/controller.args"));
  // Equal is refused too; an unset value is the controller's default.
  EXPECT_EQ(Up({"--lease-seconds", "2", "--heartbeat-seconds", "2"}).exit_code,
            kExitUsage);
  result = Up({"--lease-seconds", "0.5"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err,
              HasSubstr("--lease-seconds (0.5) must be greater than "
                        "--heartbeat-seconds (1, the controller's default)"));
  result = Up({"--heartbeat-seconds", "5"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("(5, the controller's default) must be "
                                    "greater than --heartbeat-seconds (5)"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/controller.args"));

  // Values the controller takes from --controller-flags are its to judge.
  EXPECT_TRUE(CheckLeaseAndHeartbeat(1, 5, "--heartbeat_seconds=0.5").ok());
  EXPECT_TRUE(CheckLeaseAndHeartbeat(0, 5, "-lease_seconds 10").ok());
  EXPECT_FALSE(CheckLeaseAndHeartbeat(1, 5, "--lease_secondsx=9").ok());
  EXPECT_TRUE(CheckLeaseAndHeartbeat(3, 2, "").ok());
  EXPECT_TRUE(CheckLeaseAndHeartbeat(0, 0, "").ok());

  // A valid pair starts the cluster and reaches the controller.
  result = Up({"--lease-seconds", "3", "--heartbeat-seconds", "0.5"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  const std::string args = ReadFile(root_ + "/controller.args");
  EXPECT_THAT(args, HasSubstr("--lease_seconds=3"));
  EXPECT_THAT(args, HasSubstr("--heartbeat_seconds=0.5"));
  RecordSleepAsBinaries();
  EXPECT_EQ(RunDownCommand({"--dir", root_ + "/cluster", "--grace", "1"},
                           context_)
                .exit_code,
            kExitOk);
}

TEST_F(ClusterCommandsTest, HelpExamplesAreFlagsOfTheRightDaemon) {
  const CommandResult result = RunUpCommand({"--help"}, context_);
  ASSERT_EQ(result.exit_code, kExitOk);
  // --chunk_bytes is a worker flag: the controller would refuse it.
  EXPECT_THAT(result.out,
              HasSubstr(std::string("meshcast-controller, space-separated, "
                                    "e.g. \"") +
                        kControllerFlagsExample + "\""));
  EXPECT_THAT(result.out,
              HasSubstr(std::string("meshcast-worker, space-separated, e.g. "
                                    "\"") +
                        kWorkerFlagsExample + "\""));
  EXPECT_THAT(std::string(kControllerFlagsExample), Not(HasSubstr("chunk")));
}

TEST_F(ClusterCommandsTest, DeviceAndMonitoringFlags) {
  CommandResult result =
      Up({"--devices", "cpu:8", "--devices-per-worker", "4"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--devices cpu:8 and --devices-per-worker "
                                    "4 disagree"));
  result = Up({"--devices", "tpu:2"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("meshctl up: --devices: 'tpu:2': "));
  result = Up({"--devices", ""});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--devices: must not be empty"));
  result = Up({"--prometheus-port", "9090"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_EQ(result.err,
            "meshctl up: --prometheus-port: only with --monitoring\n");
  result = Up({"--monitoring", "--prometheus-port", "70000"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--prometheus-port: must be 0..65535"));
  result = Up({"--monitoring", "--scrape-interval", "0"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--scrape-interval: must be > 0"));
}

TEST_F(ClusterCommandsTest, MonitoringWithoutPrometheusIsAClearError) {
  CommandResult result =
      Up({"--monitoring", "--prometheus-bin", root_ + "/bin/prometheus"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--monitoring: no Prometheus server at "));
  EXPECT_THAT(result.err, HasSubstr("(--prometheus-bin)"));
  if (access(kDefaultPrometheusBinary, X_OK) != 0) {
    // The default path: say which package provides it.
    result = Up({"--monitoring"});
    EXPECT_EQ(result.exit_code, kExitFailure);
    EXPECT_THAT(result.err, HasSubstr("install Debian's `prometheus` package"));
  }
  // Nothing was started or recorded.
  EXPECT_FALSE(ReadClusterFile(root_ + "/cluster").ok());
}

TEST_F(ClusterCommandsTest, DevicesReachEveryWorkerAndMetricsStayOff) {
  FakeController fake;
  fake.SetCluster(TwoWorkers(8, "cuda"));
  FakeDaemons(fake);
  const CommandResult result =
      Up({"--devices", "cuda:0x8", "--worker-flags", "--chunk-bytes=64",
          "--controller-flags", "--task-timeout-seconds=7"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("2 x 8 cuda devices (--devices cuda:0x8)"));
  EXPECT_THAT(result.out, Not(HasSubstr("metrics")));
  for (const char* name : {"worker-0", "worker-1"}) {
    const std::string args = ReadFile(root_ + "/" + name + ".args");
    EXPECT_THAT(args, HasSubstr("--devices=cuda:0x8")) << name;
    EXPECT_THAT(args, HasSubstr("--chunk-bytes=64")) << name;
    EXPECT_THAT(args, Not(HasSubstr("--metrics"))) << name;
  }
  const std::string controller_args = ReadFile(root_ + "/controller.args");
  EXPECT_THAT(controller_args, HasSubstr("--task-timeout-seconds=7"));
  EXPECT_THAT(controller_args, Not(HasSubstr("--metrics")));
  absl::StatusOr<ClusterFile> file = ReadClusterFile(root_ + "/cluster");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->devices, "cuda:0x8");
  EXPECT_EQ(file->devices_per_worker, 8);
  EXPECT_EQ(file->prometheus, "");
  RecordSleepAsBinaries();
  const CommandResult down =
      RunDownCommand({"--dir", root_ + "/cluster"}, context_);
  EXPECT_EQ(down.exit_code, kExitOk) << down.err;
  EXPECT_THAT(down.out, HasSubstr("1 controller and 2 worker process(es);"));
}

TEST_F(ClusterCommandsTest, OpenCudaSpecTakesTheCountFromRegistration) {
  FakeController fake;
  fake.SetCluster(TwoWorkers(3, "cuda"));
  FakeDaemons(fake);
  const CommandResult result = Up({"--devices", "cuda", "--output", "json"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  absl::StatusOr<ClusterFile> file = ClusterFileFromJson(result.out);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->devices, "cuda");
  EXPECT_EQ(file->devices_per_worker, 3);
  RecordSleepAsBinaries();
  EXPECT_EQ(RunDownCommand({"--dir", root_ + "/cluster"}, context_).exit_code,
            kExitOk);
}

TEST_F(ClusterCommandsTest, MonitoringStartsPrometheusAndDownStopsIt) {
  FakeController fake;
  fake.SetCluster(TwoWorkers(2));
  FakeDaemons(fake);
  Script("prometheus",
         "echo \"$@\" > " + root_ + "/prometheus.args; exec sleep 30");
  // What the fake Prometheus is asked, and its answers: every target up.
  FakeHttpServer api([](const std::string& path) {
    if (path == "/-/ready") return FakeHttpServer::Reply{200, "ready"};
    std::string targets;
    for (int i = 0; i < 3; ++i) {
      targets += std::string(i ? "," : "") +
                 R"({"labels": {"job": "j", "instance": "i"}, "health": "up"})";
    }
    return FakeHttpServer::Reply{
        200, R"({"status": "success", "data": {"activeTargets": [)" + targets +
                 "]}}"};
  });
  const CommandResult result = Up(
      {"--monitoring", "--prometheus-bin", root_ + "/bin/prometheus",
       "--prometheus-port", std::to_string(api.port()), "--devices", "cpu:2"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_GE(api.requests(), 2);

  // Every daemon serves metrics on 127.0.0.1, port 0, with a port file.
  for (const char* name : {"controller", "worker-0", "worker-1"}) {
    const std::string args = ReadFile(root_ + "/" + name + ".args");
    EXPECT_THAT(args, HasSubstr("--metrics-port=0 --metrics-address=127.0.0.1 "
                                "--metrics-port-file="))
        << name;
  }
  const std::string prometheus_url =
      "http://127.0.0.1:" + std::to_string(api.port());
  EXPECT_THAT(result.out, HasSubstr("  metrics     controller  "
                                    "http://127.0.0.1:45001/metrics\n"
                                    "              worker-0    "
                                    "http://127.0.0.1:45100/metrics\n"
                                    "              worker-1    "
                                    "http://127.0.0.1:45101/metrics\n"));
  EXPECT_THAT(result.out, HasSubstr("  prometheus  " + prometheus_url));
  EXPECT_THAT(result.out,
              HasSubstr("URL " + prometheus_url + ", uid prometheus"));
  EXPECT_THAT(result.out, HasSubstr("2 x 2 cpu devices"));

  const std::string dir = std::filesystem::canonical(root_ + "/cluster");
  const std::string prometheus_args = ReadFile(root_ + "/prometheus.args");
  EXPECT_THAT(prometheus_args,
              HasSubstr("--config.file=" + dir + "/prometheus/prometheus.yml"));
  EXPECT_THAT(prometheus_args,
              HasSubstr("--storage.tsdb.path=" + dir + "/prometheus/data"));
  EXPECT_THAT(prometheus_args, HasSubstr("--web.listen-address=127.0.0.1:" +
                                         std::to_string(api.port())));
  const std::string config = ReadFile(dir + "/prometheus/prometheus.yml");
  EXPECT_THAT(config, HasSubstr("job_name: \"meshcast-controller\"\n"
                                "    static_configs:\n"
                                "      - targets: [\"127.0.0.1:45001\"]\n"));
  EXPECT_THAT(config, HasSubstr("      - targets: [\"127.0.0.1:45101\"]\n"
                                "        labels: {worker: \"worker-1\"}\n"));

  absl::StatusOr<ClusterFile> file = ReadClusterFile(dir);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->prometheus, prometheus_url);
  ASSERT_EQ(file->processes.size(), 4u);
  EXPECT_EQ(file->processes[3].role, "prometheus");
  EXPECT_EQ(file->processes[0].metrics, "127.0.0.1:45001");
  EXPECT_EQ(file->processes[2].metrics, "127.0.0.1:45101");
  // A restart from the recorded command line serves the same metrics port.
  EXPECT_THAT(file->processes[2].args, Contains("--metrics-port=45101"));

  RecordSleepAsBinaries();
  const CommandResult down = RunDownCommand({"--dir", dir}, context_);
  EXPECT_EQ(down.exit_code, kExitOk) << down.err;
  EXPECT_THAT(
      down.out,
      HasSubstr("1 controller and 2 worker process(es) and Prometheus;"));
  for (const ClusterProcess& process : file->processes) {
    EXPECT_FALSE(CheckProcess(process.pid).alive) << process.name;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/metrics/worker-0.port"));
}

TEST_F(ClusterCommandsTest, PrometheusThatDiesIsReportedAndAllStops) {
  FakeController fake;
  fake.SetCluster(TwoWorkers(4));
  FakeDaemons(fake);
  Script("prometheus", "echo 'err=\"opening storage failed\"' >&2; exit 1");
  const CommandResult result =
      Up({"--monitoring", "--prometheus-bin", root_ + "/bin/prometheus"});
  EXPECT_EQ(result.exit_code, kExitFailure);
  EXPECT_THAT(result.err, StartsWith("meshctl up: prometheus exited with "
                                     "status 1 during startup; see "));
  EXPECT_THAT(result.err, HasSubstr("opening storage failed"));
  EXPECT_FALSE(ReadClusterFile(root_ + "/cluster").ok());
}

TEST_F(ClusterCommandsTest, DownWithoutAClusterAndWithStaleRecord) {
  CommandResult result =
      RunDownCommand({"--dir", root_ + "/nothing"}, context_);
  EXPECT_EQ(result.exit_code, kExitFailure);
  EXPECT_THAT(result.err, HasSubstr("no local cluster recorded in"));

  // A record whose processes are gone (or are other programs) is cleaned
  // up without signalling anything.
  std::filesystem::create_directories(root_ + "/stale");
  ClusterFile file;
  file.controller = "127.0.0.1:1";
  absl::StatusOr<int> bystander =
      SpawnDetached("/bin/sh", {"-c", "exec sleep 30"}, root_ + "/by.log");
  ASSERT_TRUE(bystander.ok());
  file.processes.push_back(ClusterProcess{
      "controller", "controller", *bystander, "", "/bin/other", {}});
  ASSERT_TRUE(WriteClusterFile(root_ + "/stale", file).ok());
  result = RunDownCommand({"--dir", root_ + "/stale"}, context_);
  EXPECT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("1 had already exited"));
  EXPECT_TRUE(CheckProcess(*bystander).alive);
  EXPECT_FALSE(ReadClusterFile(root_ + "/stale").ok());
  StopProcesses({*bystander}, absl::Seconds(2));
}

TEST_F(ClusterCommandsTest, DownStopsWhatUpRecorded) {
  std::filesystem::create_directories(root_ + "/run");
  ClusterFile file;
  file.controller = "127.0.0.1:1";
  file.dir = root_ + "/run";
  for (const char* name : {"controller", "worker-0"}) {
    absl::StatusOr<int> pid =
        SpawnDetached("/bin/sh", {"-c", "exec sleep 30"}, root_ + "/x.log");
    ASSERT_TRUE(pid.ok());
    file.processes.push_back(ClusterProcess{
        name == std::string("controller") ? "controller" : "worker",
        name,
        *pid,
        "",
        "/bin/sh",
        {}});
  }
  // `sleep` replaces the shell, so argv[0] becomes "sleep": record that,
  // once both have got there.
  for (ClusterProcess& process : file.processes) {
    process.binary = "sleep";
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (!IsProcessOf(process.pid, "sleep") && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  ASSERT_TRUE(WriteClusterFile(root_ + "/run", file).ok());
  const CommandResult result =
      RunDownCommand({"--dir", root_ + "/run"}, context_);
  EXPECT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("1 controller and 1 worker process(es)"));
  for (const ClusterProcess& process : file.processes) {
    EXPECT_FALSE(CheckProcess(process.pid).alive);
  }
}

TEST_F(ClusterCommandsTest, UpTurnsTlsOnByDefault) {
  FakeController fake;
  fake.SetCluster(TwoWorkers(4));
  FakeDaemons(fake);
  secure_ = true;
  // The plaintext fake controller never answers a TLS client: `up` times
  // out, but only after starting every daemon with its certificate.
  const CommandResult result = Up({"--timeout", "1"});
  EXPECT_EQ(result.exit_code, kExitFailure);
  const std::string tls =
      std::filesystem::canonical(root_ + "/cluster").string() + "/tls";
  const std::string controller = ReadFile(root_ + "/controller.args");
  for (const std::string& flag :
       {"--tls_cert=" + tls + "/controller.crt",
        "--tls_key=" + tls + "/controller.key", "--tls_ca=" + tls + "/ca.crt",
        "--tokens_file=" + tls + "/tokens"}) {
    EXPECT_THAT(controller, HasSubstr(flag));
  }
  EXPECT_THAT(controller, Not(HasSubstr("--insecure")));
  const std::string worker = ReadFile(root_ + "/worker-1.args");
  EXPECT_THAT(worker, HasSubstr("--tls_cert=" + tls + "/worker-1.crt"));
  EXPECT_THAT(worker, HasSubstr("--tls_key=" + tls + "/worker-1.key"));
  EXPECT_THAT(worker, Not(HasSubstr("--insecure")));
  struct stat st;
  ASSERT_EQ(stat((tls + "/admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(ClusterCommandsTest, UpInsecureWarnsAndRecordsIt) {
  FakeController fake;
  fake.SetCluster(TwoWorkers(4));
  FakeDaemons(fake);
  const CommandResult result = Up({"--output", "json"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.err, HasSubstr("WARNING: --insecure"));
  EXPECT_THAT(ReadFile(root_ + "/controller.args"), HasSubstr("--insecure"));
  absl::StatusOr<ClusterFile> file = ReadClusterFile(root_ + "/cluster");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->insecure);
  RecordSleepAsBinaries();
  EXPECT_EQ(RunDownCommand({"--dir", root_ + "/cluster"}, context_).exit_code,
            kExitOk);
}

}  // namespace
}  // namespace meshcast::cli
