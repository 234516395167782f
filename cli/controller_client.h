// ControllerClient: meshctl's gRPC client of the Controller service
// (proto/meshcast/v1/controller.proto), one small synchronous class that the
// commands share and tests can point at a fake server.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<ControllerClient> client,
//                    ControllerClient::Connect("127.0.0.1:50051"));
//   ASSIGN_OR_RETURN(v1::Job job, client->SubmitJob(spec));
//   RETURN_IF_ERROR(client->WatchJob(job.id(), absl::InfiniteDuration(),
//       [](const v1::JobEvent& e) { ...; return true; }));
//
// Connect waits a short time (3 s by default) for the channel to come up, so
// an unreachable controller is reported at once rather than on every call.
// Every call returns absl::Status with the gRPC status code unchanged
// (INVALID_ARGUMENT for a bad spec, NOT_FOUND for an unknown job id, ...)
// and the server's message; UNAVAILABLE messages name the address.
//
// Thread safety: thread-safe (gRPC stubs are); each call blocks its caller.
#ifndef MESHCAST_CLI_CONTROLLER_CLIENT_H_
#define MESHCAST_CLI_CONTROLLER_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/security/credentials.h"
#include "meshcast/v1/controller.grpc.pb.h"

namespace meshcast::cli {

// gRPC metadata key under which the controller sends its version
// (kVersionMetadataKey of controller/controller_service.h; the same text).
inline constexpr char kVersionMetadataKey[] = "meshcast-version";

class ControllerClient {
 public:
  struct Options {
    // How long Connect waits for the controller to accept a connection.
    absl::Duration connect_timeout = absl::Seconds(3);
    // Deadline of each unary call.
    absl::Duration call_timeout = absl::Seconds(60);
    // TLS and the bearer token (security/tls_credentials.h); null:
    // plaintext.
    std::shared_ptr<grpc::ChannelCredentials> credentials;
  };

  // Checks `address` is host:port, then waits up to connect_timeout for a
  // connection. INVALID_ARGUMENT for a malformed address, UNAVAILABLE when
  // nothing answers in time.
  static absl::StatusOr<std::unique_ptr<ControllerClient>> Connect(
      const std::string& address, const Options& options);
  static absl::StatusOr<std::unique_ptr<ControllerClient>> Connect(
      const std::string& address) {
    return Connect(address, Options());
  }

  const std::string& address() const { return address_; }

  absl::StatusOr<v1::GetClusterResponse> GetCluster();
  // The controller's version, which it sends with every GetCluster and
  // ListJobs answer as metadata (kVersionMetadataKey); "" from a controller
  // that predates it. A caller GetCluster refuses (a user's token) is
  // answered through ListJobs. Errors as those calls'.
  absl::StatusOr<std::string> ControllerVersion();
  absl::StatusOr<v1::Job> SubmitJob(const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> GetJob(const std::string& id);
  // Newest first; limit 0 = all.
  absl::StatusOr<std::vector<v1::Job>> ListJobs(int limit);
  absl::StatusOr<v1::Job> CancelJob(const std::string& id);
  // A dry run: the older reshard-only request, or any request (any kind in
  // PlanRequest.spec).
  absl::StatusOr<v1::PlanResponse> Plan(const v1::ReshardSpec& reshard);
  absl::StatusOr<v1::PlanResponse> Plan(const v1::PlanRequest& request);

  // Streams the job's events (first its current state) to `on_event` until
  // the server ends the stream (the job reached a final state), `on_event`
  // returns false, or `timeout` passes (DEADLINE_EXCEEDED).
  absl::Status WatchJob(
      const std::string& id, absl::Duration timeout,
      const std::function<bool(const v1::JobEvent&)>& on_event);

 private:
  ControllerClient(std::string address, Options options,
                   std::unique_ptr<v1::Controller::Stub> stub);

  // grpc::Status -> absl::Status with the same code.
  absl::Status Convert(const grpc::Status& status) const;
  // ControllerVersion through ListJobs (limit 1).
  absl::StatusOr<std::string> VersionFromJobList();

  const std::string address_;
  const Options options_;
  const std::unique_ptr<v1::Controller::Stub> stub_;
};

// Checks "host:port" (port 1..65535, host non-empty; [v6] accepted).
absl::Status ValidateAddress(absl::string_view address);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_CONTROLLER_CLIENT_H_
