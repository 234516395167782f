#include "controller/controller_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "controller/grpc_worker_client.h"
#include "controller/log.h"
#include "util/status_macros.h"

namespace meshcast {

absl::StatusOr<std::unique_ptr<ControllerServer>> ControllerServer::Start(
    const ControllerConfig& config, std::unique_ptr<WorkerClient> client,
    std::unique_ptr<ReshardPlanner> planner, Clock* clock) {
  std::unique_ptr<ControllerServer> server(new ControllerServer());
  ASSIGN_OR_RETURN(server->store_, JobStore::Open(config.db_path));
  server->registry_ = std::make_unique<WorkerRegistry>(config.registry, clock);
  server->kv_ = std::make_unique<KvStore>();
  server->client_ = client != nullptr ? std::move(client)
                                      : std::make_unique<GrpcWorkerClient>();
  server->planner_ = planner != nullptr ? std::move(planner)
                                        : std::make_unique<LibraryPlanner>();
  server->jobs_ = std::make_unique<JobManager>(
      config.jobs, server->store_.get(), server->registry_.get(),
      server->kv_.get(), server->client_.get(), server->planner_.get(), clock);
  RETURN_IF_ERROR(server->jobs_->Start());
  server->service_ = std::make_unique<ControllerService>(
      server->registry_.get(), server->jobs_.get(), server->kv_.get());

  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials(),
                           &server->port_);
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
  // Sweep a few times per lease so a dead worker is noticed promptly.
  server->registry_->StartSweeper(
      std::max(absl::Milliseconds(50), config.registry.lease / 4));
  return server;
}

ControllerServer::~ControllerServer() { Shutdown(); }

void ControllerServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // Unblock long-lived calls first so the gRPC shutdown does not wait on
  // them: watchers, then rendezvous waiters.
  if (service_ != nullptr) service_->Shutdown();
  if (kv_ != nullptr) kv_->Shutdown();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
  }
  // No more worker events may reach the manager once it is gone.
  if (registry_ != nullptr) registry_->StopSweeper();
  if (jobs_ != nullptr) jobs_->Shutdown("controller shut down");
  if (server_ != nullptr) LogInfo("controller stopped");
}

}  // namespace meshcast
