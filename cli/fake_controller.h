// FakeController: an in-process Controller gRPC server on 127.0.0.1 for
// meshctl's tests. It answers from canned state and records what clients
// sent, so commands can be tested through their real gRPC client without
// daemons.
//
//   FakeController fake;
//   fake.SetCluster(cluster);             // GetCluster answer
//   fake.AddJob(job);                     // GetJob/ListJobs/CancelJob
//   fake.SetWatchEvents("j1", events);    // streamed by WatchJob("j1")
//   RunSubmitCommand({..., "--controller", fake.address()}, context);
//   EXPECT_EQ(fake.submitted()[0].reshard().strategy(), "meshcast");
//
// SubmitJob stores the spec, answers a QUEUED job "job-<n>" and, unless
// SetSubmitError was called, adds it to the jobs. Unknown ids are NOT_FOUND.
// WatchJob streams the configured events, then ends; after the stream the
// job (if known) takes the state of the last event.
//
// Thread safety: thread-safe.
#ifndef MESHCAST_CLI_FAKE_CONTROLLER_H_
#define MESHCAST_CLI_FAKE_CONTROLLER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server.h"
#include "meshcast/v1/controller.grpc.pb.h"

namespace meshcast::cli {

class FakeController final : public v1::Controller::Service {
 public:
  FakeController();  // starts serving on 127.0.0.1:<free port>
  ~FakeController() override;

  std::string address() const;

  void SetCluster(const v1::GetClusterResponse& cluster);
  void AddJob(const v1::Job& job);
  void SetWatchEvents(const std::string& id,
                      const std::vector<v1::JobEvent>& events);
  void SetSubmitError(grpc::Status status);
  // Every later GetJob fails with `status` (a controller going away).
  void SetGetJobError(grpc::Status status);
  void SetPlanResponse(const v1::PlanResponse& response);
  // The version GetCluster sends as metadata, as the real controller does;
  // empty (the default): none, as from a controller that predates it.
  void SetVersion(const std::string& version);
  // GetCluster answers PERMISSION_DENIED, as the real one does to a user's
  // token; ListJobs then carries the version (as the real one's does).
  void SetClusterAdminOnly(bool admin_only);
  std::vector<v1::JobSpec> submitted() const;
  std::vector<v1::ReshardSpec> planned() const;
  // Every Plan request, whole (PlanRequest.spec included).
  std::vector<v1::PlanRequest> plan_requests() const;

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

 private:
  mutable absl::Mutex mu_;
  v1::GetClusterResponse cluster_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);  // ids, oldest first
  std::map<std::string, v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<v1::JobEvent>> events_ ABSL_GUARDED_BY(mu_);
  grpc::Status submit_error_ ABSL_GUARDED_BY(mu_);
  grpc::Status get_job_error_ ABSL_GUARDED_BY(mu_);
  v1::PlanResponse plan_response_ ABSL_GUARDED_BY(mu_);
  std::string version_ ABSL_GUARDED_BY(mu_);
  bool cluster_admin_only_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::JobSpec> submitted_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReshardSpec> planned_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::PlanRequest> plan_requests_ ABSL_GUARDED_BY(mu_);
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_FAKE_CONTROLLER_H_
