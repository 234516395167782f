// JobClient: a minimal Controller client for benchmarks. It submits a job
// and follows it to its final state over WatchJob, timing submit-to-done as
// a framework calling the API would see it, and it opens a TCP connection of
// its own (gRPC otherwise shares one connection between channels to the
// same address), so N clients are N connections as N processes would be.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<JobClient> client,
//                    JobClient::Connect("127.0.0.1:50051"));
//   ASSIGN_OR_RETURN(JobOutcome outcome,
//                    client->SubmitAndWait(spec, absl::Seconds(60),
//                                          /*fetch_result=*/true));
//   if (outcome.job.state() == v1::JOB_STATE_SUCCEEDED) ...
//
// RunClosedLoopLoad drives many such clients at once, each submitting its
// next job when the previous one ended, and counts jobs per second.
//
// Errors: RPC failures keep their gRPC code (UNAVAILABLE names the address);
// a job that ends FAILED or CANCELLED is not an error, its state says so.
//
// Thread safety: a JobClient is thread-safe (gRPC stubs are), though each
// benchmark client thread owns one so that each has its own connection.
#ifndef MESHCAST_BENCH_CLUSTER_JOB_CLIENT_H_
#define MESHCAST_BENCH_CLUSTER_JOB_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "meshcast/v1/controller.grpc.pb.h"

namespace meshcast::bench {

bool IsFinalJobState(v1::JobState state);

struct JobOutcome {
  // The job in its final state; with fetch_result, as GetJob returns it
  // (plan and result included), else as SubmitJob returned it with the
  // final event's state and message.
  v1::Job job;
  // From just before SubmitJob to the arrival of the final state's event.
  double submit_to_done_seconds = 0;
};

class JobClient {
 public:
  // Waits up to connect_timeout for the controller to accept a connection
  // (UNAVAILABLE naming the address otherwise).
  static absl::StatusOr<std::unique_ptr<JobClient>> Connect(
      const std::string& address,
      absl::Duration connect_timeout = absl::Seconds(5));

  const std::string& address() const { return address_; }

  absl::StatusOr<v1::GetClusterResponse> GetCluster();

  // Submits `spec` and follows it until a final state or until `timeout`
  // (DEADLINE_EXCEEDED naming the job). With fetch_result, one GetJob after
  // the final event (not counted in submit_to_done_seconds).
  absl::StatusOr<JobOutcome> SubmitAndWait(const v1::JobSpec& spec,
                                           absl::Duration timeout,
                                           bool fetch_result);

 private:
  JobClient(std::string address, std::unique_ptr<v1::Controller::Stub> stub);

  absl::Status Convert(const grpc::Status& status,
                       const std::string& call) const;

  const std::string address_;
  const std::unique_ptr<v1::Controller::Stub> stub_;
};

struct LoadOptions {
  int clients = 8;  // threads, one JobClient (connection) each
  absl::Duration duration = absl::Seconds(10);  // no new job after this
  int64_t max_jobs_per_client = 0;  // 0 = as many as fit in duration
  absl::Duration job_timeout = absl::Seconds(60);
};

struct LoadResult {
  int64_t succeeded = 0;
  int64_t failed = 0;  // final state other than SUCCEEDED, or an RPC error
  std::string first_failure;  // what went wrong first, if anything did
  // From the start until the last client's last job ended.
  double elapsed_seconds = 0;
  std::vector<double> latencies_seconds;  // submit-to-done of every job
  double jobs_per_second() const {
    return elapsed_seconds > 0 ? (succeeded + failed) / elapsed_seconds : 0;
  }
};

// Closed-loop load: options.clients threads each connect and then submit
// `spec`, wait for it to end, and submit the next, until options.duration
// has passed (or max_jobs_per_client). INVALID_ARGUMENT for clients < 1;
// a client that cannot connect fails the whole run.
absl::StatusOr<LoadResult> RunClosedLoopLoad(const std::string& address,
                                             const v1::JobSpec& spec,
                                             const LoadOptions& options);

}  // namespace meshcast::bench

#endif  // MESHCAST_BENCH_CLUSTER_JOB_CLIENT_H_
