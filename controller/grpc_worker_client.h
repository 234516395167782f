// GrpcWorkerClient: the WorkerClient that calls the Worker service over gRPC
// (one cached channel per worker address).
//
//   GrpcWorkerClient client;
//   JobManager manager(..., &client, ...);
//
// Thread safety: thread-safe; calls may run concurrently.
#ifndef MESHCAST_CONTROLLER_GRPC_WORKER_CLIENT_H_
#define MESHCAST_CONTROLLER_GRPC_WORKER_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "controller/worker_client.h"

namespace meshcast {

// Largest message either way: per-worker programs of big plans can exceed
// gRPC's 4 MiB default.
inline constexpr int kMaxGrpcMessageBytes = 256 << 20;

class GrpcWorkerClient : public WorkerClient {
 public:
  // Plaintext channels.
  GrpcWorkerClient() : GrpcWorkerClient(grpc::InsecureChannelCredentials(),
                                        false) {}
  // With `verify_worker_name`, each worker's server certificate must be
  // valid for the worker's registered name (a DNS SAN equal to the name)
  // rather than for the host of its address, so that certificates need not
  // know the addresses workers will have (docs/security.md).
  GrpcWorkerClient(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   bool verify_worker_name)
      : credentials_(std::move(credentials)),
        verify_worker_name_(verify_worker_name) {}

  absl::StatusOr<v1::RunTaskResponse> RunTask(
      const WorkerEndpoint& worker, const v1::WorkerProgram& program,
      absl::Time deadline, CallCanceller* canceller) override;
  absl::Status AbortTask(const WorkerEndpoint& worker,
                         const std::string& job_id, const std::string& reason,
                         absl::Time deadline) override;
  absl::StatusOr<v1::GetStatusResponse> GetStatus(
      const WorkerEndpoint& worker, absl::Time deadline) override;

 private:
  std::shared_ptr<grpc::Channel> ChannelFor(const WorkerEndpoint& worker)
      ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const bool verify_worker_name_;
  absl::Mutex mu_;
  // By address, and by name too when names are verified.
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_GRPC_WORKER_CLIENT_H_
