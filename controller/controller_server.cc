#include "controller/controller_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/grpc_worker_client.h"
#include "util/log.h"
#include "security/parse_error_interceptor.h"
#include "security/token_file.h"
#include "util/status_macros.h"

namespace meshcast {

absl::StatusOr<std::unique_ptr<ControllerServer>> ControllerServer::Start(
    const ControllerConfig& config, std::unique_ptr<WorkerClient> client,
    Clock* clock) {
  std::unique_ptr<ControllerServer> server(new ControllerServer());
  server->metrics_ = std::make_unique<ControllerMetrics>();
  ASSIGN_OR_RETURN(server->store_, JobStore::Open(config.db_path));
  server->registry_ = std::make_unique<WorkerRegistry>(config.registry, clock);
  server->kv_ = std::make_unique<KvStore>();
  const bool tls = config.tls.any();
  security::AuthOptions auth;
  auth.insecure = !tls;
  if (tls && !config.tokens_file.empty()) {
    ASSIGN_OR_RETURN(auth.tokens,
                     security::ReadTokensFile(config.tokens_file));
  }
  server->authenticator_ =
      std::make_unique<security::Authenticator>(std::move(auth));
  ASSIGN_OR_RETURN(
      std::shared_ptr<grpc::ServerCredentials> server_credentials,
      security::MakeServerCredentials(
          config.tls, security::ClientCertificates::kRequestAndVerify));
  if (client == nullptr) {
    // Mutual TLS toward the workers: the controller's certificate is its
    // client certificate, and a worker must present one for its name.
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> to_workers,
                     security::MakeChannelCredentials(config.tls));
    client = std::make_unique<GrpcWorkerClient>(std::move(to_workers), tls);
  }
  server->client_ = std::move(client);
  server->jobs_ = std::make_unique<JobManager>(
      config.jobs, server->store_.get(), server->registry_.get(),
      server->kv_.get(), server->client_.get(), clock, server->metrics_.get());
  RETURN_IF_ERROR(server->jobs_->Start());
  server->service_ = std::make_unique<ControllerService>(
      server->registry_.get(), server->jobs_.get(), server->kv_.get());
  server->service_->SetAuthenticator(server->authenticator_.get());

  // Both take effect for servers built after these calls.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  // Unparsable requests (invalid UTF-8) get INVALID_ARGUMENT, not INTERNAL;
  // first, so that the metrics count the code the client gets.
  interceptors.push_back(security::NewParseErrorInterceptorFactory());
  interceptors.push_back(server->metrics_->NewRpcInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.AddListeningPort(config.listen, server_credentials, &server->port_);
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    server->Shutdown();
    return absl::UnavailableError(absl::StrCat(
        "--listen ", config.listen,
        ": cannot listen there (address in use or invalid; use host:port)"));
  }
  ControllerServer* raw = server.get();
  server->metrics_->SetStateSource([raw] { return raw->CurrentState(); });
  if (!config.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http =
        MetricsHttpServer::Start(config.metrics_listen,
                                 server->metrics_->collectable(),
                                 config.metrics_web);
    if (!http.ok()) {
      server->Shutdown();
      return absl::Status(
          http.status().code(),
          absl::StrCat("--metrics-port: ", http.status().message()));
    }
    server->metrics_http_ = *std::move(http);
  }
  // Sweep a few times per lease so a dead worker is noticed promptly.
  server->registry_->StartSweeper(
      std::max(absl::Milliseconds(50), config.registry.lease / 4));
  return server;
}

ControllerServer::~ControllerServer() { Shutdown(); }

ControllerState ControllerServer::CurrentState() const {
  ControllerState state;
  const std::vector<int> busy_hosts = jobs_->BusyHosts();
  std::vector<int> live_devices;
  for (const WorkerRecord& w : registry_->Workers()) {
    if (w.lost) {
      ++state.workers_lost;
      continue;
    }
    if (std::binary_search(busy_hosts.begin(), busy_hosts.end(),
                           w.host_index)) {
      ++state.workers_busy;
    } else {
      ++state.workers_ready;
    }
    // Global ids as the topology numbers them (host * G + local).
    for (int local = 0; local < w.num_devices; ++local) {
      live_devices.push_back(w.host_index * w.num_devices + local);
    }
  }
  state.devices_busy = jobs_->CountBusy(live_devices);
  state.devices_free =
      static_cast<int>(live_devices.size()) - state.devices_busy;
  state.queue_depth = jobs_->QueueDepth();
  absl::StatusOr<std::map<v1::JobState, int64_t>> jobs =
      jobs_->CountJobsByState();
  if (jobs.ok()) {
    state.jobs = *std::move(jobs);
  } else {
    LogError("metrics: cannot count jobs: ", jobs.status().ToString());
  }
  return state;
}

void ControllerServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // No more worker events may reach the manager once it is gone.
  if (registry_ != nullptr) registry_->StopSweeper();
  // End the jobs while watchers are still connected, so that `meshctl
  // submit --wait` sees "FAILED: controller shut down" rather than a lost
  // connection.
  if (jobs_ != nullptr) jobs_->Shutdown("controller shut down");
  // Unblock long-lived calls so the gRPC shutdown does not wait on them:
  // watchers, then rendezvous waiters.
  if (service_ != nullptr) service_->Shutdown();
  if (kv_ != nullptr) kv_->Shutdown();
  if (server_ != nullptr) {
    if (server_->GetHealthCheckService() != nullptr) {
      server_->GetHealthCheckService()->SetServingStatus(false);
    }
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
  }
  metrics_http_.reset();
  if (server_ != nullptr) LogInfo("controller stopped");
}

}  // namespace meshcast
