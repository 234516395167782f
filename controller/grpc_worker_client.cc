#include "controller/grpc_worker_client.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "meshcast/v1/worker.grpc.pb.h"
#include "util/grpc_status.h"
#include "util/status_macros.h"

namespace meshcast {

std::shared_ptr<grpc::Channel> GrpcWorkerClient::ChannelFor(
    const WorkerEndpoint& worker) {
  const std::string key = verify_worker_name_
                              ? absl::StrCat(worker.name, "@", worker.address)
                              : worker.address;
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(key);
  if (it != channels_.end()) return it->second;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  if (verify_worker_name_ && !worker.name.empty()) {
    args.SetSslTargetNameOverride(worker.name);
  }
  auto channel =
      grpc::CreateCustomChannel(worker.address, credentials_, args);
  channels_[key] = channel;
  return channel;
}

absl::StatusOr<v1::RunTaskResponse> GrpcWorkerClient::RunTask(
    const WorkerEndpoint& worker, const v1::WorkerProgram& program,
    absl::Time deadline, CallCanceller* canceller) {
  auto stub = v1::Worker::NewStub(ChannelFor(worker));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  v1::RunTaskRequest request;
  *request.mutable_program() = program;
  v1::RunTaskResponse response;
  // TryCancel is safe from another thread while the call blocks; Remove
  // guarantees the hook is done before `context` goes away.
  const int hook = canceller->Add([&context] { context.TryCancel(); });
  grpc::Status status = stub->RunTask(&context, request, &response);
  canceller->Remove(hook);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::Status GrpcWorkerClient::AbortTask(const WorkerEndpoint& worker,
                                         const std::string& job_id,
                                         const std::string& reason,
                                         absl::Time deadline) {
  auto stub = v1::Worker::NewStub(ChannelFor(worker));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  v1::AbortTaskRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  v1::AbortTaskResponse response;
  return FromGrpcStatus(stub->AbortTask(&context, request, &response));
}

absl::StatusOr<v1::GetStatusResponse> GrpcWorkerClient::GetStatus(
    const WorkerEndpoint& worker, absl::Time deadline) {
  auto stub = v1::Worker::NewStub(ChannelFor(worker));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  v1::GetStatusResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(
      stub->GetStatus(&context, v1::GetStatusRequest(), &response)));
  return response;
}

}  // namespace meshcast
