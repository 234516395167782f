// meshcast-worker: the per-node daemon. Serves the Worker service, keeps
// itself registered with the controller, and runs the programs the
// controller pushes on its (virtual CPU) devices.
//
//   meshcast-worker --controller 127.0.0.1:7070 --devices=cpu:4
//
// SIGTERM / SIGINT: abort running tasks, stop heartbeats, stop serving,
// exit 0.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "worker/controller_kv_store.h"
#include "worker/device_spec.h"
#include "worker/log.h"
#include "worker/worker_agent.h"
#include "worker/worker_service.h"

ABSL_FLAG(std::string, controller, "",
          "host:port of meshcast-controller (required)");
ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "host:port for the Worker service; port 0 picks a free port");
ABSL_FLAG(std::string, name, "", "unique worker name (default: the host name)");
ABSL_FLAG(std::string, devices, "",
          "cpu:N virtual CPU devices (default cpu:4); cuda[...] is not "
          "implemented yet");
ABSL_FLAG(std::string, data_address, "127.0.0.1",
          "address of this host that peer workers connect to for data");
ABSL_FLAG(double, heartbeat_seconds, 0,
          "heartbeat period in seconds; 0 = as the controller says");
ABSL_FLAG(int64_t, chunk_bytes, int64_t{1} << 20,
          "pipelining chunk of relay chains, bytes");
ABSL_FLAG(int, pipeline_depth, 4, "chunks in flight per relay hop");
ABSL_FLAG(double, rendezvous_timeout_seconds, 60,
          "bound on waiting for a job's peer workers to connect");
ABSL_FLAG(double, op_timeout_seconds, 120,
          "bound on each data-plane transfer wait");

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

int Fail(const std::string& message) {
  std::cerr << "meshcast-worker: " << message << "\n";
  return 2;
}

int Main(int argc, char** argv) {
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
  const std::string name = absl::GetFlag(FLAGS_name).empty()
                               ? HostName()
                               : absl::GetFlag(FLAGS_name);
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

  // Signals are taken synchronously by sigwait below; block them before any
  // thread starts so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(controller, grpc::InsecureChannelCredentials());
  ControllerKvStore kv(channel);

  WorkerServiceOptions service_options;
  service_options.name = name;
  service_options.num_devices = devices->count;
  service_options.task.executor.relay.chunk_bytes =
      absl::GetFlag(FLAGS_chunk_bytes);
  service_options.task.executor.relay.pipeline_depth =
      absl::GetFlag(FLAGS_pipeline_depth);
  service_options.task.gloo.hostname = data_address;
  service_options.task.gloo.rendezvous_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_rendezvous_timeout_seconds));
  service_options.task.gloo.op_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_op_timeout_seconds));
  WorkerService service(service_options, &kv);

  const std::string listen = absl::GetFlag(FLAGS_listen);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(256 << 20);  // large programs
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    return Fail(absl::StrCat("cannot listen on --listen=", listen));
  }
  std::string host = HostOf(listen);
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = data_address;
  const std::string address = absl::StrCat(host, ":", port);
  Log(absl::StrCat("serving the Worker service on ", address, " (", name, ", ",
                   devices->count, " ", devices->kind,
                   " devices, data address ", data_address, ", controller ",
                   controller, ")"));
  std::printf("meshcast-worker listening on %s\n", address.c_str());
  std::fflush(stdout);

  WorkerAgentOptions agent_options;
  agent_options.name = name;
  agent_options.address = address;
  agent_options.data_address = data_address;
  agent_options.num_devices = devices->count;
  agent_options.device_kind = devices->kind;
  agent_options.heartbeat_interval =
      absl::Seconds(absl::GetFlag(FLAGS_heartbeat_seconds));
  WorkerAgent agent(channel, agent_options);
  agent.Start();

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  Log(absl::StrCat("received ", signal_number == SIGTERM ? "SIGTERM" : "SIGINT",
                   "; shutting down"));
  agent.Stop();
  service.Shutdown("worker shutting down");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(10));
  server->Wait();
  Log("stopped");
  return 0;
}

}  // namespace
}  // namespace meshcast::worker

int main(int argc, char** argv) { return meshcast::worker::Main(argc, argv); }
