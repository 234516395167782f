#include "cli/controller_client.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "util/grpc_status.h"

namespace meshcast::cli {
namespace {

// Jobs carry their plans; a large plan can exceed gRPC's 4 MiB default.
constexpr int kMaxMessageBytes = 256 << 20;

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

std::string SecondsText(absl::Duration d) {
  return absl::StrFormat("%g s", absl::ToDoubleSeconds(d));
}

}  // namespace

absl::Status ValidateAddress(absl::string_view address) {
  const size_t colon = address.rfind(':');
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' is not a controller address (", why,
                     "); expected host:port, e.g. 127.0.0.1:50051"));
  };
  if (colon == absl::string_view::npos) return bad("no port");
  if (colon == 0) return bad("no host");
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return bad("port must be 1..65535");
  }
  return absl::OkStatus();
}

ControllerClient::ControllerClient(std::string address, Options options,
                                   std::unique_ptr<v1::Controller::Stub> stub)
    : address_(std::move(address)), options_(options), stub_(std::move(stub)) {}

absl::StatusOr<std::unique_ptr<ControllerClient>> ControllerClient::Connect(
    const std::string& address, const Options& options) {
  if (absl::Status status = ValidateAddress(address); !status.ok()) {
    return status;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // A proxy from the environment must not capture loopback traffic.
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  const bool tls = options.credentials != nullptr;
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      address,
      tls ? options.credentials : grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(DeadlineAfter(options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the controller at ", address, " within ",
        SecondsText(options.connect_timeout),
        tls ? " over TLS (is --tls_ca the cluster's CA, and does the "
              "controller's certificate name this host?)"
            : " in plaintext (if the controller uses TLS, pass --tls_ca and "
              "--token_file, or --dir of the cluster 'meshctl up' made)",
        "; start a local cluster with 'meshctl up', or point --controller / "
        "MESHCAST_CONTROLLER at a running controller"));
  }
  return std::unique_ptr<ControllerClient>(
      new ControllerClient(address, options, v1::Controller::NewStub(channel)));
}

absl::Status ControllerClient::Convert(const grpc::Status& status) const {
  absl::Status converted = FromGrpcStatus(status);
  if (converted.ok()) return converted;
  const absl::StatusCode code = converted.code();
  if (code == absl::StatusCode::kUnavailable) {
    return absl::UnavailableError(
        absl::StrCat("controller at ", address_,
                     " is unavailable: ", status.error_message()));
  }
  if (code == absl::StatusCode::kDeadlineExceeded &&
      status.error_message().empty()) {
    return absl::DeadlineExceededError(
        absl::StrCat("controller at ", address_, " did not answer in time"));
  }
  return converted;
}

absl::StatusOr<v1::GetClusterResponse> ControllerClient::GetCluster() {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(options_.call_timeout));
  v1::GetClusterResponse response;
  grpc::Status status =
      stub_->GetCluster(&context, v1::GetClusterRequest(), &response);
  if (!status.ok()) return Convert(status);
  return response;
}

namespace {

// The controller's version from an answer's metadata; "" when absent.
std::string VersionIn(const grpc::ClientContext& context) {
  const auto& metadata = context.GetServerInitialMetadata();
  auto it = metadata.find(kVersionMetadataKey);
  if (it == metadata.end()) return std::string();
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

absl::StatusOr<std::string> ControllerClient::ControllerVersion() {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(options_.call_timeout));
  v1::GetClusterResponse response;
  grpc::Status status =
      stub_->GetCluster(&context, v1::GetClusterRequest(), &response);
  if (status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    // GetCluster is for admins; any caller may list its own jobs, and the
    // controller sends its version with that answer too.
    return VersionFromJobList();
  }
  if (!status.ok()) return Convert(status);
  return VersionIn(context);
}

absl::StatusOr<std::string> ControllerClient::VersionFromJobList() {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(options_.call_timeout));
  v1::ListJobsRequest request;
  request.set_limit(1);
  v1::ListJobsResponse response;
  grpc::Status status = stub_->ListJobs(&context, request, &response);
  if (!status.ok()) return Convert(status);
  return VersionIn(context);
}

absl::StatusOr<v1::Job> ControllerClient::SubmitJob(const v1::JobSpec& spec) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(options_.call_timeout));
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::SubmitJobResponse response;
  grpc::Status status = stub_->SubmitJob(&context, request, &response);
  if (!status.ok()) return Convert(status);
  return response.job();
}

absl::StatusOr<v1::Job> ControllerClient::GetJob(const std::string& id) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(options_.call_timeout));
  v1::GetJobRequest request;
  request.set_id(id);
  v1::GetJobResponse response;
  grpc::Status status = stub_->GetJob(&context, request, &response);
  if (!status.ok()) return Convert(status);
  return response.job();
}

absl::StatusOr<std::vector<v1::Job>> ControllerClient::ListJobs(int limit) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(options_.call_timeout));
  v1::ListJobsRequest request;
  request.set_limit(limit);
  v1::ListJobsResponse response;
  grpc::Status status = stub_->ListJobs(&context, request, &response);
  if (!status.ok()) return Convert(status);
  return std::vector<v1::Job>(response.jobs().begin(), response.jobs().end());
}

absl::StatusOr<v1::Job> ControllerClient::CancelJob(const std::string& id) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(options_.call_timeout));
  v1::CancelJobRequest request;
  request.set_id(id);
  v1::CancelJobResponse response;
  grpc::Status status = stub_->CancelJob(&context, request, &response);
  if (!status.ok()) return Convert(status);
  return response.job();
}

absl::StatusOr<v1::PlanResponse> ControllerClient::Plan(
    const v1::ReshardSpec& reshard) {
  v1::PlanRequest request;
  *request.mutable_reshard() = reshard;
  return Plan(request);
}

absl::StatusOr<v1::PlanResponse> ControllerClient::Plan(
    const v1::PlanRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(options_.call_timeout));
  v1::PlanResponse response;
  grpc::Status status = stub_->Plan(&context, request, &response);
  if (!status.ok()) return Convert(status);
  return response;
}

absl::Status ControllerClient::WatchJob(
    const std::string& id, absl::Duration timeout,
    const std::function<bool(const v1::JobEvent&)>& on_event) {
  grpc::ClientContext context;
  if (timeout != absl::InfiniteDuration()) {
    context.set_deadline(DeadlineAfter(timeout));
  }
  v1::WatchJobRequest request;
  request.set_id(id);
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader =
      stub_->WatchJob(&context, request);
  v1::JobEvent event;
  bool stopped_early = false;
  while (reader->Read(&event)) {
    if (!on_event(event)) {
      stopped_early = true;
      context.TryCancel();
      break;
    }
  }
  grpc::Status status = reader->Finish();
  if (stopped_early) return absl::OkStatus();
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(absl::StrCat(
        "job ", id, " did not finish within ", SecondsText(timeout)));
  }
  return Convert(status);
}

}  // namespace meshcast::cli
