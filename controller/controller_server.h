// ControllerServer: the whole controller in one object: job store, worker
// registry (with its lease sweeper), key-value store, job manager and the
// gRPC server. main.cc wraps it in a daemon; tests start it in-process on
// 127.0.0.1:0 with fake workers.
//
//   ControllerConfig config;
//   config.listen = "127.0.0.1:0";
//   ASSIGN_OR_RETURN(std::unique_ptr<ControllerServer> server,
//                    ControllerServer::Start(config));
//   std::cout << server->port();
//   // with config.metrics_listen set: GET /metrics on metrics_port()
//   ...
//   server->Shutdown();   // also done by the destructor
//
// Besides the Controller service, the gRPC server answers the standard
// health service (grpc.health.v1.Health, SERVING until Shutdown) and server
// reflection, and counts every RPC in metrics().
//
// Thread safety: Start/Shutdown from one thread; port() from any.
#ifndef MESHCAST_CONTROLLER_CONTROLLER_SERVER_H_
#define MESHCAST_CONTROLLER_CONTROLLER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "controller/clock.h"
#include "controller/controller_metrics.h"
#include "controller/controller_service.h"
#include "controller/job_manager.h"
#include "controller/job_store.h"
#include "controller/kv_store.h"
#include "util/web_config.h"
#include "controller/worker_client.h"
#include "controller/worker_registry.h"
#include "security/principal.h"
#include "security/tls_credentials.h"
#include "util/metrics_http_server.h"

namespace meshcast {

struct ControllerConfig {
  std::string listen = "127.0.0.1:50051";  // port 0 picks a free port
  std::string db_path = "meshcast.db";     // ":memory:" for tests
  WorkerRegistry::Options registry;
  JobManager::Options jobs;
  // host:port for Prometheus metrics at GET /metrics (port 0 picks a free
  // port); empty: not served.
  std::string metrics_listen;
  // TLS and basic auth of /metrics (util/web_config.h); default: neither.
  WebConfig metrics_web;
  // TLS (docs/security.md). With tls.any(): the gRPC port speaks TLS only
  // (client certificates requested and verified against tls.ca, bearer
  // tokens from tokens_file the alternative), every RPC is authenticated
  // and authorized (security/authorizer.h), and the controller calls its
  // workers with mutual TLS, presenting tls.cert. Without: plaintext and
  // every caller an anonymous admin (the daemon needs --insecure for that).
  security::TlsFiles tls;
  std::string tokens_file;
};

class ControllerServer {
 public:
  // `client` defaults to GrpcWorkerClient. Jobs are planned by their kinds
  // (config.jobs.find_kind, default every registered kind).
  static absl::StatusOr<std::unique_ptr<ControllerServer>> Start(
      const ControllerConfig& config,
      std::unique_ptr<WorkerClient> client = nullptr,
      Clock* clock = Clock::Real());
  ~ControllerServer();

  int port() const { return port_; }
  // The bound metrics port; 0 when config.metrics_listen was empty.
  int metrics_port() const {
    return metrics_http_ != nullptr ? metrics_http_->port() : 0;
  }
  // Stops accepting RPCs, ends watchers and waiting KvGets, fails unfinished
  // jobs ("controller shut down", aborting them on their workers).
  // Idempotent.
  void Shutdown();

  JobManager& jobs() { return *jobs_; }
  WorkerRegistry& registry() { return *registry_; }
  ControllerMetrics& metrics() { return *metrics_; }

 private:
  ControllerServer() = default;
  // The state gauges' snapshot (ControllerMetrics::SetStateSource).
  ControllerState CurrentState() const;

  // First: outlives everything that records into it.
  std::unique_ptr<ControllerMetrics> metrics_;
  // Before the service, which points at it.
  std::unique_ptr<security::Authenticator> authenticator_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<KvStore> kv_;
  std::unique_ptr<WorkerClient> client_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<ControllerService> service_;
  std::unique_ptr<grpc::Server> server_;
  // Last: gone before what its scrapes read.
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_CONTROLLER_SERVER_H_
