// meshcast-worker: the per-node daemon. Serves the Worker service, keeps
// itself registered with the controller, and runs the programs the
// controller pushes on its devices (virtual CPU devices, or GPUs with
// --devices=cuda... in a CUDA build, docs/gpu.md).
//
//   meshcast-worker --controller 127.0.0.1:7070 --devices=cpu:4
//   ... --metrics-port=9402     # Prometheus /metrics (docs/metrics.md)
//
// The gRPC server also answers the standard health service (SERVING until
// shutdown) and server reflection.
//
// SIGTERM / SIGINT: abort running tasks, stop heartbeats, stop serving
// (the process ends within 2 s whatever it is doing),
// exit 0.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "security/parse_error_interceptor.h"
#include "security/tls_credentials.h"
#include "util/flags_usage.h"
#include "util/log.h"
#include "util/metrics_http_server.h"
#include "util/web_config.h"
#include "worker/controller_kv_store.h"
#include "worker/device_spec.h"
#include "worker/host_memory.h"
#include "worker/kernels/blas_arch.h"
#include "worker/machine_identity.h"
#include "worker/progress_pusher.h"
#include "worker/rate_probe.h"
#include "worker/worker_agent.h"
#include "worker/worker_metrics.h"
#include "worker/worker_service.h"
#ifdef MESHCAST_WITH_CUDA
#include "worker/cuda/device_executor.h"
#include "worker/cuda/device_pattern.h"
#endif

ABSL_FLAG(std::string, controller, "",
          "host:port of meshcast-controller (required)");
ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "host:port for the Worker service; port 0 picks a free port");
ABSL_FLAG(std::string, name, "", "unique worker name (default: the host name)");
ABSL_FLAG(std::string, devices, "",
          "cpu:N virtual CPU devices (default cpu:4), or GPUs: cuda (all "
          "visible), cuda:0,2 (CUDA ordinals), cuda:0x4 (4 virtual devices "
          "on GPU 0); GPUs need a CUDA build");
ABSL_FLAG(std::string, data_address, "127.0.0.1",
          "address of this host that peer workers connect to for data");
ABSL_FLAG(double, heartbeat_seconds, 0,
          "heartbeat period in seconds; 0 = as the controller says");
ABSL_FLAG(int64_t, chunk_bytes, int64_t{1} << 20,
          "pipelining chunk of relay chains, bytes");
ABSL_FLAG(int, pipeline_depth, 4, "chunks in flight per relay hop");
ABSL_FLAG(int, gloo_connections, 2,
          "TCP connections per pair of workers (1..16); two or more give "
          "each direction its own, so that data one way never delays the "
          "other way's ready notices, and concurrent transfers spread over "
          "them; every worker of a cluster must use the same number");
ABSL_FLAG(int64_t, gpu_chunk_bytes, int64_t{4} << 20,
          "GPU workers: relay chunk of NCCL pipelines, bytes (the same on "
          "every worker of a job)");
ABSL_FLAG(int, gpu_lanes, 4,
          "GPU workers: stream lanes (and NCCL communicators per GPU) that "
          "independent steps spread over");
ABSL_FLAG(double, rendezvous_timeout_seconds, 60,
          "bound on waiting for a job's peer workers to connect");
ABSL_FLAG(double, op_timeout_seconds, 120,
          "bound on each data-plane transfer wait");
ABSL_FLAG(int, metrics_port, -1,
          "port for Prometheus GET /metrics (docs/metrics.md); 0 picks a free "
          "port (printed, and written to --metrics-port-file); -1 = off");
ABSL_FLAG(std::string, metrics_address, "",
          "address the metrics port binds; empty (default): the host of "
          "--listen. 0.0.0.0 binds every interface");
ABSL_FLAG(std::string, metrics_web_config, "",
          "Prometheus-format web config file for /metrics: "
          "tls_server_config (HTTPS, client certificates) and "
          "basic_auth_users (bcrypt hashes); see docs/metrics.md");
ABSL_FLAG(std::string, metrics_port_file, "",
          "if set, write the bound metrics port to this file once serving");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate of this worker, CN = its --name (and a DNS SAN of "
          "it): its TLS server certificate and its client certificate toward "
          "the controller");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM certificate of the cluster CA (verifies the controller)");
ABSL_FLAG(std::string, controller_identity, "meshcast-controller",
          "the CN the controller's certificate must carry; RunTask, "
          "AbortTask and GetStatus are accepted from that certificate only");
ABSL_FLAG(std::string, local_socket, "",
          "a Unix socket path where processes on this host lend the worker "
          "their buffers (Worker.RegisterBuffer, docs/user_buffers.md); "
          "only the worker's user may connect; empty: none");
ABSL_FLAG(bool, probe_rates, true,
          "CPU devices: measure the host's memory-copy capacity and one "
          "device's GEMM rate at start (about 0.3 s, all devices at once) "
          "and report them at registration; the controller plans with them "
          "(its --probed_rates)");
ABSL_FLAG(bool, insecure, false,
          "no TLS: anyone who reaches --listen may run and abort tasks "
          "(local tests only); without it the --tls_* flags are required");

namespace meshcast::worker {
namespace {

std::string HostName() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0) return "worker";
  return buffer;
}

// The host part of host:port (brackets of [v6] kept).
std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// Abseil spells flags with underscores; accept the dashed spelling the
// docs and meshctl use (--data-address) by rewriting the name part of each
// "--flag[=value]" argument. Values are left alone.
std::vector<char*> NormalizeFlagNames(int argc, char** argv,
                                      std::vector<std::string>& storage) {
  storage.assign(argv, argv + argc);
  for (size_t i = 1; i < storage.size(); ++i) {
    std::string& arg = storage[i];
    if (arg == "--") break;
    if (arg.rfind("--", 0) != 0) continue;
    const size_t end = std::min(arg.find('='), arg.size());
    for (size_t k = 2; k < end; ++k) {
      if (arg[k] == '-') arg[k] = '_';
    }
  }
  std::vector<char*> pointers;
  for (std::string& arg : storage) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Writes "port\n" through a rename, so a reader never sees a partial file.
bool WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << port << "\n";
  out.close();
  return out && std::rename(tmp.c_str(), path.c_str()) == 0;
}

int Fail(const std::string& message) {
  std::cerr << "meshcast-worker: " << message << "\n";
  return 2;
}

int Main(int argc, char** argv) {
  // BLIS's kernels are requested through the environment (setenv), which
  // is safe only while this process has no other thread: before any
  // server or client starts.
  EnsureBlasArch();
  meshcast::InstallMeshcastFlagsUsage();  // --help lists our flags
  absl::SetProgramUsageMessage(
      "meshcast-worker --controller HOST:PORT [--listen HOST:PORT] "
      "[--devices=cpu:N] [--name NAME] [--data-address HOST] "
      "[--heartbeat-seconds S] (dashes and underscores in flag names are "
      "equivalent)");
  std::vector<std::string> storage;
  std::vector<char*> normalized = NormalizeFlagNames(argc, argv, storage);
  absl::ParseCommandLine(argc, normalized.data());

  const std::string controller = absl::GetFlag(FLAGS_controller);
  if (controller.empty()) {
    return Fail("--controller is required (host:port of meshcast-controller)");
  }
  absl::StatusOr<DeviceSpec> devices =
      ParseDeviceSpec(absl::GetFlag(FLAGS_devices));
  if (!devices.ok()) return Fail(std::string(devices.status().message()));
  if (devices->kind == "cuda") {
#ifdef MESHCAST_WITH_CUDA
    devices = ResolveGpuDevices(*devices, cuda::GpuCount());
    if (!devices.ok()) return Fail(std::string(devices.status().message()));
#else
    return Fail(absl::StrCat(
        "--devices=", absl::GetFlag(FLAGS_devices),
        ": this meshcast-worker was built without CUDA (MESHCAST_CUDA=OFF, or "
        "no CUDA toolkit and NCCL at build time); rebuild with "
        "-DMESHCAST_CUDA=ON or use --devices=cpu:N"));
#endif
  }
  if (absl::GetFlag(FLAGS_gpu_chunk_bytes) < 1 ||
      absl::GetFlag(FLAGS_gpu_lanes) < 1) {
    return Fail("--gpu-chunk-bytes and --gpu-lanes must be >= 1");
  }
  const std::string name = absl::GetFlag(FLAGS_name).empty()
                               ? HostName()
                               : absl::GetFlag(FLAGS_name);
  SetLogComponent(absl::StrCat("worker/", name));
  const std::string data_address = absl::GetFlag(FLAGS_data_address);
  if (data_address.empty()) return Fail("--data-address must not be empty");
  if (absl::GetFlag(FLAGS_chunk_bytes) < 1) {
    return Fail("--chunk-bytes must be >= 1");
  }
  if (absl::GetFlag(FLAGS_pipeline_depth) < 1) {
    return Fail("--pipeline-depth must be >= 1");
  }
  if (absl::GetFlag(FLAGS_heartbeat_seconds) < 0 ||
      absl::GetFlag(FLAGS_rendezvous_timeout_seconds) <= 0 ||
      absl::GetFlag(FLAGS_op_timeout_seconds) <= 0) {
    return Fail(
        "--heartbeat-seconds must be >= 0 and --rendezvous-timeout-seconds, "
        "--op-timeout-seconds > 0");
  }

  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (metrics_port < -1 || metrics_port > 65535) {
    return Fail("--metrics-port must be 0..65535 (0: a free port) or -1 (off)");
  }
  const std::string metrics_address = absl::GetFlag(FLAGS_metrics_address);
  const int gloo_connections = absl::GetFlag(FLAGS_gloo_connections);
  if (gloo_connections < 1 || gloo_connections > 16) {
    return Fail(absl::StrCat("--gloo-connections is ", gloo_connections,
                             "; allowed: 1..16"));
  }
  WebConfig metrics_web;
  if (const std::string path = absl::GetFlag(FLAGS_metrics_web_config);
      !path.empty()) {
    absl::StatusOr<WebConfig> web = LoadWebConfig(path);
    if (!web.ok()) {
      return Fail(absl::StrCat("--metrics-web-config: ", web.status().message()));
    }
    metrics_web = *std::move(web);
  }

  const security::TlsFiles tls{absl::GetFlag(FLAGS_tls_cert),
                               absl::GetFlag(FLAGS_tls_key),
                               absl::GetFlag(FLAGS_tls_ca)};
  const bool insecure = absl::GetFlag(FLAGS_insecure);
  const std::string controller_identity =
      absl::GetFlag(FLAGS_controller_identity);
  if (absl::Status s = security::CheckTlsFlags(tls, insecure, "meshcast-worker",
                                               /*cert_required=*/true);
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  if (!insecure && (controller_identity.empty() || name == controller_identity)) {
    return Fail(absl::StrCat(
        "--controller_identity must be non-empty and differ from --name (",
        name, ")"));
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> to_controller =
      security::MakeChannelCredentials(tls);
  if (!to_controller.ok()) {
    return Fail(std::string(to_controller.status().message()));
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server_credentials =
      security::MakeServerCredentials(
          tls, security::ClientCertificates::kRequireAndVerify);
  if (!server_credentials.ok()) {
    return Fail(std::string(server_credentials.status().message()));
  }
  if (insecure) {
    LogWarning("--insecure: TLS is OFF; anyone who reaches the worker's "
               "port may run and abort tasks on it");
  }

  // Signals are taken synchronously by sigwait below; block them before any
  // thread starts so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(controller, *to_controller);
  // Names this worker on every KvSet/KvGet: only a job's workers may.
  ControllerKvStore kv(channel, name);

  WorkerMetrics metrics(devices->count,
                        devices->kind == "cuda" ? "nccl" : "gloo");
  WorkerServiceOptions service_options;
  service_options.metrics = &metrics;
  service_options.name = name;
  if (!insecure) service_options.controller_identity = controller_identity;
  service_options.num_devices = devices->count;
  service_options.task.executor.relay.chunk_bytes =
      absl::GetFlag(FLAGS_chunk_bytes);
  service_options.task.executor.relay.pipeline_depth =
      absl::GetFlag(FLAGS_pipeline_depth);
  service_options.task.gloo.hostname = data_address;
  service_options.task.gloo.connections = gloo_connections;
  service_options.task.gloo.rendezvous_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_rendezvous_timeout_seconds));
  service_options.task.gloo.op_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_op_timeout_seconds));
  // Jobs' communicators close after their results are reported.
  service_options.task.closer = std::make_shared<DeferredCloser>();
#ifdef MESHCAST_WITH_CUDA
  if (devices->kind == "cuda") {
    cuda::CudaBackendOptions gpu;
    gpu.chunk_bytes = absl::GetFlag(FLAGS_gpu_chunk_bytes);
    gpu.lanes = absl::GetFlag(FLAGS_gpu_lanes);
    gpu.rendezvous_timeout =
        absl::Seconds(absl::GetFlag(FLAGS_rendezvous_timeout_seconds));
    gpu.op_timeout = absl::Seconds(absl::GetFlag(FLAGS_op_timeout_seconds));
    // The GPU executor reports steps, hops and tile memory live, as the
    // CPU executor does (WorkerService then skips its own step count).
    gpu.metrics = &metrics;
    service_options.task.device_backend =
        std::make_shared<cuda::CudaBackend>(*devices, gpu);
  }
#endif
  WorkerService service(service_options, &kv);

  const std::string listen = absl::GetFlag(FLAGS_listen);
  int port = 0;
  // Both take effect for servers built after these calls.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, *server_credentials, &port);
  // The local socket is for processes of this host only: its file mode
  // (set below) is the access control, so it needs no TLS.
  const std::string local_socket = absl::GetFlag(FLAGS_local_socket);
  if (!local_socket.empty()) {
    std::remove(local_socket.c_str());  // a stale socket of a previous run
    builder.AddListeningPort("unix:" + local_socket,
                             grpc::InsecureServerCredentials());
  }
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(256 << 20);  // large programs
  // A request that does not parse (e.g. invalid UTF-8 in a string field)
  // gets INVALID_ARGUMENT naming the field, as on the controller.
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(security::NewParseErrorInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    return Fail(absl::StrCat("cannot listen on --listen=", listen));
  }
  if (!local_socket.empty()) {
    if (chmod(local_socket.c_str(), 0600) != 0) {
      server->Shutdown();
      return Fail(absl::StrCat("--local_socket=", local_socket,
                               ": cannot restrict it to this user: ",
                               std::strerror(errno)));
    }
    LogInfo("user buffers are registered on unix:", local_socket);
  }
  std::string host = HostOf(listen);
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = data_address;
  const std::string address = absl::StrCat(host, ":", port);
  LogInfo("serving the Worker service on ", address, " (", name, ", ",
          devices->count, " ", devices->kind, " devices, data address ",
          data_address, ", controller ", controller, ")");
  std::printf("meshcast-worker listening on %s\n", address.c_str());
  std::fflush(stdout);

  std::unique_ptr<MetricsHttpServer> metrics_http;
  if (metrics_port >= 0) {
    const std::string metrics_listen = MetricsListenAddress(
        metrics_address, absl::GetFlag(FLAGS_listen), metrics_port);
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http =
        MetricsHttpServer::Start(metrics_listen, metrics.collectable(),
                                 metrics_web);
    if (!http.ok()) {
      service.Shutdown("worker failed to start");
      server->Shutdown();
      return Fail(absl::StrCat("--metrics-port: ", http.status().message()));
    }
    metrics_http = *std::move(http);
    LogInfo("serving Prometheus metrics on ", metrics_listen, " (port ",
            metrics_http->port(), ") /metrics",
            metrics_web.tls ? " over TLS" : "",
            metrics_web.basic_auth_users.empty() ? "" : " with basic auth");
    std::printf("meshcast-worker metrics on port %d\n", metrics_http->port());
    std::fflush(stdout);
    const std::string port_file = absl::GetFlag(FLAGS_metrics_port_file);
    if (!port_file.empty() && !WritePortFile(port_file, metrics_http->port())) {
      service.Shutdown("worker failed to start");
      server->Shutdown();
      return Fail(absl::StrCat("--metrics-port-file ", port_file,
                               ": cannot write"));
    }
  }

  WorkerAgentOptions agent_options;
  agent_options.name = name;
  agent_options.address = address;
  agent_options.data_address = data_address;
  agent_options.num_devices = devices->count;
  agent_options.device_kind = devices->kind;
  // For the controller's admission check: what the job tiles may use.
  if (service_options.task.device_backend != nullptr) {
    agent_options.memory_bytes =
        service_options.task.device_backend->MemoryBytes();
  } else {
    agent_options.memory_bytes = ReadMemTotal().value_or(0);
  }
  agent_options.heartbeat_interval =
      absl::Seconds(absl::GetFlag(FLAGS_heartbeat_seconds));
  if (devices->kind == "cpu") {
    // Chosen at the top of Main; logged here, with the worker's other
    // start-up lines.
    const BlasArchChoice& blas = EnsureBlasArch();
    LogInfo("BLAS: BLIS ", blas.arch, " kernels (", blas.reason, ")");
  }
  {
    const MachineIdentity machine = ReadMachineIdentity();
    agent_options.machine_id = machine.machine_id;
    agent_options.cpu_cores = machine.cpu_cores;
  }
  if (absl::GetFlag(FLAGS_probe_rates) && devices->kind == "cpu") {
    // Before registering, so that no job shares the cores with the probe.
    absl::StatusOr<ProbedRates> rates = ProbeCpuRates(devices->count, {});
    if (rates.ok()) {
      agent_options.probed_host_copy_bytes_per_second =
          rates->host_copy_bytes_per_second;
      agent_options.probed_device_flops = rates->device_flops;
      LogInfo("probed rates: host copy ",
              rates->host_copy_bytes_per_second / 1e9, " GB/s shared by ",
              devices->count, " devices; GEMM ", rates->device_flops / 1e9,
              " GFLOP/s per device");
    } else {
      LogWarning("rate probe failed (", rates.status().ToString(),
                 "); the controller plans with its own figures");
    }
  }
  WorkerAgent agent(channel, agent_options);
  agent.Start();
  // Running tasks' progress goes to the controller (about every 250 ms and
  // at each phase change) instead of being polled.
  ProgressPusherOptions pusher_options;
  pusher_options.name = name;
  ProgressPusher pusher(
      channel, [&service] { return RunningTaskProgress(service); },
      pusher_options);
  pusher.Start();

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  LogInfo("received ", signal_number == SIGTERM ? "SIGTERM" : "SIGINT",
          "; shutting down");
  // A stop is bounded whatever the worker is doing (a Gloo connect, a
  // controller that does not answer): past kStopBudget the process ends
  // without the remaining clean-up; its sockets close with it.
  constexpr absl::Duration kStopBudget = absl::Milliseconds(1500);
  std::thread([kStopBudget] {
    absl::SleepFor(kStopBudget);
    LogWarning("shutdown did not finish in time; exiting now");
    std::_Exit(0);
  }).detach();
  // Tasks first: nothing below may wait on them.
  service.Shutdown("worker shutting down");
  if (server->GetHealthCheckService() != nullptr) {
    server->GetHealthCheckService()->SetServingStatus(false);
  }
  pusher.Stop();
  agent.Stop();
  server->Shutdown(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(500));
  server->Wait();
  LogInfo("stopped");
  return 0;
}

}  // namespace
}  // namespace meshcast::worker

int main(int argc, char** argv) { return meshcast::worker::Main(argc, argv); }
