#include "bench/cluster/job_client.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "util/grpc_status.h"
#include "util/status_macros.h"

namespace meshcast::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// gRPC deadlines as time points; an infinite timeout becomes a year away.
std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  const absl::Duration capped = std::min(timeout, absl::Hours(24 * 365));
  return std::chrono::system_clock::now() + absl::ToChronoNanoseconds(capped);
}

// What the load's client threads share.
struct SharedLoad {
  absl::Mutex mu;
  LoadResult result ABSL_GUARDED_BY(mu);
};

}  // namespace

bool IsFinalJobState(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

JobClient::JobClient(std::string address,
                     std::unique_ptr<v1::Controller::Stub> stub)
    : address_(std::move(address)), stub_(std::move(stub)) {}

absl::StatusOr<std::unique_ptr<JobClient>> JobClient::Connect(
    const std::string& address, absl::Duration connect_timeout) {
  grpc::ChannelArguments args;
  // A subchannel pool of this channel's own: its own TCP connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(Deadline(connect_timeout))) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach the controller at ", address, " within ",
                     absl::FormatDuration(connect_timeout)));
  }
  return std::unique_ptr<JobClient>(
      new JobClient(address, v1::Controller::NewStub(channel)));
}

absl::Status JobClient::Convert(const grpc::Status& status,
                                const std::string& call) const {
  return FromGrpcStatus(status, absl::StrCat(call, " on ", address_));
}

absl::StatusOr<v1::GetClusterResponse> JobClient::GetCluster() {
  grpc::ClientContext context;
  context.set_deadline(Deadline(absl::Seconds(30)));
  v1::GetClusterResponse response;
  RETURN_IF_ERROR(
      Convert(stub_->GetCluster(&context, v1::GetClusterRequest(), &response),
              "GetCluster"));
  return response;
}

absl::StatusOr<JobOutcome> JobClient::SubmitAndWait(const v1::JobSpec& spec,
                                                    absl::Duration timeout,
                                                    bool fetch_result) {
  const auto deadline = Deadline(timeout);
  const Clock::time_point start = Clock::now();
  JobOutcome outcome;
  {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    v1::SubmitJobResponse response;
    RETURN_IF_ERROR(
        Convert(stub_->SubmitJob(&context, request, &response), "SubmitJob"));
    outcome.job = std::move(*response.mutable_job());
  }
  const std::string id = outcome.job.id();
  if (!IsFinalJobState(outcome.job.state())) {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    v1::WatchJobRequest request;
    request.set_id(id);
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader =
        stub_->WatchJob(&context, request);
    v1::JobEvent event;
    bool final_seen = false;
    while (reader->Read(&event)) {
      outcome.job.set_state(event.state());
      outcome.job.set_message(event.message());
      if (IsFinalJobState(event.state())) {
        outcome.submit_to_done_seconds = SecondsSince(start);
        final_seen = true;
        // The server ends the stream after the final event; do not wait.
        context.TryCancel();
        break;
      }
    }
    const grpc::Status status = reader->Finish();
    if (!final_seen) {
      if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        return absl::DeadlineExceededError(absl::StrCat(
            "job ", id, " did not end within ", absl::FormatDuration(timeout),
            " (last state ", v1::JobState_Name(outcome.job.state()), ")"));
      }
      RETURN_IF_ERROR(Convert(status, absl::StrCat("WatchJob ", id)));
    }
  } else {
    outcome.submit_to_done_seconds = SecondsSince(start);
  }
  if (fetch_result || !IsFinalJobState(outcome.job.state())) {
    grpc::ClientContext context;
    context.set_deadline(Deadline(absl::Seconds(30)));
    v1::GetJobRequest request;
    request.set_id(id);
    v1::GetJobResponse response;
    RETURN_IF_ERROR(
        Convert(stub_->GetJob(&context, request, &response), "GetJob"));
    if (!IsFinalJobState(outcome.job.state())) {
      // The stream ended without a final event: the job's own record says
      // whether it ended.
      if (!IsFinalJobState(response.job().state())) {
        return absl::UnknownError(
            absl::StrCat("WatchJob ", id, " ended while the job is ",
                         v1::JobState_Name(response.job().state())));
      }
      outcome.submit_to_done_seconds = SecondsSince(start);
    }
    outcome.job = std::move(*response.mutable_job());
  }
  return outcome;
}

absl::StatusOr<LoadResult> RunClosedLoopLoad(const std::string& address,
                                             const v1::JobSpec& spec,
                                             const LoadOptions& options) {
  if (options.clients < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("load: clients must be >= 1, got ", options.clients));
  }
  // Connect first, so that connection set-up is not counted.
  std::vector<std::unique_ptr<JobClient>> clients;
  for (int c = 0; c < options.clients; ++c) {
    ASSIGN_OR_RETURN(std::unique_ptr<JobClient> client,
                     JobClient::Connect(address));
    clients.push_back(std::move(client));
  }

  SharedLoad shared;
  const Clock::time_point start = Clock::now();
  const Clock::time_point stop =
      start +
      std::chrono::nanoseconds(absl::ToInt64Nanoseconds(options.duration));
  std::vector<std::thread> threads;
  for (int c = 0; c < options.clients; ++c) {
    threads.emplace_back([&, c] {
      for (int64_t n = 0;
           options.max_jobs_per_client == 0 || n < options.max_jobs_per_client;
           ++n) {
        if (Clock::now() >= stop) break;
        absl::StatusOr<JobOutcome> outcome = clients[c]->SubmitAndWait(
            spec, options.job_timeout, /*fetch_result=*/false);
        absl::MutexLock lock(&shared.mu);
        if (!outcome.ok()) {
          ++shared.result.failed;
          if (shared.result.first_failure.empty()) {
            shared.result.first_failure = outcome.status().ToString();
          }
          continue;
        }
        shared.result.latencies_seconds.push_back(
            outcome->submit_to_done_seconds);
        if (outcome->job.state() == v1::JOB_STATE_SUCCEEDED) {
          ++shared.result.succeeded;
        } else {
          ++shared.result.failed;
          if (shared.result.first_failure.empty()) {
            shared.result.first_failure =
                absl::StrCat("job ", outcome->job.id(), " ",
                             v1::JobState_Name(outcome->job.state()), ": ",
                             outcome->job.message());
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  absl::MutexLock lock(&shared.mu);
  shared.result.elapsed_seconds = SecondsSince(start);
  return shared.result;
}

}  // namespace meshcast::bench
