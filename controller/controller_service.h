// ControllerService: the gRPC Controller service (proto/meshcast/v1/
// controller.proto). A thin layer: it converts requests to domain calls on
// WorkerRegistry, JobManager and KvStore, and absl::Status to grpc::Status
// (same codes: INVALID_ARGUMENT for bad specs, NOT_FOUND for unknown job
// ids, ...). No request can crash the daemon: every input is validated by
// the domain classes.
//
// WatchJob streams the job's current state, then every event, and ends once
// the job reaches a final state (or the client goes away, or Shutdown()).
// GetCluster and ListJobs also send the controller's version (the project
// version it was built from) as initial metadata under kVersionMetadataKey,
// which `meshctl version` reads (cli/controller_client.h).
//
// Thread safety: thread-safe; gRPC calls the methods from its own threads.
#ifndef MESHCAST_CONTROLLER_CONTROLLER_SERVICE_H_
#define MESHCAST_CONTROLLER_CONTROLLER_SERVICE_H_

#include <atomic>

#include "controller/job_manager.h"
#include "controller/kv_service.h"
#include "controller/kv_store.h"
#include "controller/worker_registry.h"
#include "meshcast/v1/controller.grpc.pb.h"
#include "security/principal.h"

namespace meshcast {

// gRPC metadata key of the controller's version (see above).
inline constexpr char kVersionMetadataKey[] = "meshcast-version";

// KvGet uses gRPC's callback API (kv_service.h) so that a waiting KvGet
// holds no thread; every other method is synchronous.
class ControllerService final
    : public v1::Controller::WithCallbackMethod_KvGet<v1::Controller::Service> {
 public:
  // KvGet waits at most this long whatever the client asks.
  static constexpr double kMaxKvWaitSeconds = KvService::kMaxWaitSeconds;

  ControllerService(WorkerRegistry* registry, JobManager* jobs, KvStore* kv);

  // Every RPC first authenticates its caller and checks the rules of
  // security/authorizer.h; a worker's calls must name the worker of its
  // certificate, and a user sees only its own jobs (others' are NOT_FOUND).
  // Without an authenticator (or an insecure one) every caller is an
  // anonymous admin. Set before serving; must outlive the service.
  void SetAuthenticator(const security::Authenticator* authenticator) {
    authenticator_ = authenticator;
  }

  // Ends WatchJob streams promptly (before the server shuts down).
  void Shutdown() { shutting_down_ = true; }

  grpc::Status RegisterWorker(grpc::ServerContext* context,
                              const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status SubmitJob(grpc::ServerContext* context,
                         const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context,
                      const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context,
                        const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context,
                        const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* context,
                         const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override;
  grpc::Status Plan(grpc::ServerContext* context,
                    const v1::PlanRequest* request,
                    v1::PlanResponse* response) override;
  grpc::Status GetCluster(grpc::ServerContext* context,
                          const v1::GetClusterRequest* request,
                          v1::GetClusterResponse* response) override;
  grpc::Status KvSet(grpc::ServerContext* context,
                     const v1::KvSetRequest* request,
                     v1::KvSetResponse* response) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* context,
                                  const v1::KvGetRequest* request,
                                  v1::KvGetResponse* response) override;
  // Hands the tasks to JobManager::ReportProgress; reports about jobs that
  // do not run on that worker are ignored, not refused (a job may end while
  // its report is on the way).
  grpc::Status ReportProgress(grpc::ServerContext* context,
                              const v1::ReportProgressRequest* request,
                              v1::ReportProgressResponse* response) override;

 private:
  WorkerRegistry* const registry_;
  JobManager* const jobs_;
  KvStore* const kv_;
  KvService kv_service_;
  std::atomic<bool> shutting_down_{false};
  const security::Authenticator* authenticator_ = nullptr;
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_CONTROLLER_SERVICE_H_
