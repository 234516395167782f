#include "worker/controller_kv_store.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"
#include "util/grpc_status.h"

namespace meshcast::worker {

ControllerKvStore::ControllerKvStore(std::shared_ptr<grpc::Channel> channel,
                                     std::string worker,
                                     absl::Duration rpc_slack)
    : stub_(v1::Controller::NewStub(std::move(channel))),
      worker_(std::move(worker)),
      rpc_slack_(rpc_slack) {}

absl::Status ControllerKvStore::Set(const std::string& key,
                                    const std::string& value) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + rpc_slack_));
  v1::KvSetRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_worker(worker_);
  v1::KvSetResponse response;
  return FromGrpcStatus(stub_->KvSet(&context, request, &response),
                        absl::StrCat("controller KvSet '", key, "'"));
}

absl::StatusOr<std::string> ControllerKvStore::Get(const std::string& key,
                                                   absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout + rpc_slack_));
  v1::KvGetRequest request;
  request.set_key(key);
  request.set_timeout_seconds(absl::ToDoubleSeconds(timeout));
  request.set_worker(worker_);
  v1::KvGetResponse response;
  grpc::Status status = stub_->KvGet(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::NOT_FOUND ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(absl::StrCat(
        "key '", key, "' was not set within ", absl::FormatDuration(timeout),
        " (controller: ", status.error_message(), ")"));
  }
  if (!status.ok()) {
    return FromGrpcStatus(status, absl::StrCat("controller KvGet '", key, "'"));
  }
  return std::move(*response.mutable_value());
}

}  // namespace meshcast::worker
