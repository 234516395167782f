#include "bench/cluster/job_client.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/cluster/cluster_cases.h"
#include "cli/fake_controller.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::bench {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

v1::JobEvent Event(v1::JobState state, const std::string& message) {
  v1::JobEvent event;
  event.set_state(state);
  event.set_message(message);
  return event;
}

v1::JobSpec TinyJob() {
  v1::JobSpec spec;
  *spec.mutable_reshard() = TinyReshardSpec(4096);
  return spec;
}

// The fake numbers submitted jobs job-1, job-2, ...: script the first n.
void ScriptJobs(cli::FakeController& fake, int n, v1::JobState final_state) {
  for (int i = 1; i <= n; ++i) {
    fake.SetWatchEvents(absl::StrCat("job-", i),
                        {Event(v1::JOB_STATE_QUEUED, "queued"),
                         Event(v1::JOB_STATE_RUNNING, "running"),
                         Event(final_state, "the end")});
  }
}

TEST(JobClientTest, FollowsAJobToItsFinalStateAndFetchesIt) {
  cli::FakeController fake;
  ScriptJobs(fake, 1, v1::JOB_STATE_SUCCEEDED);
  absl::StatusOr<std::unique_ptr<JobClient>> client =
      JobClient::Connect(fake.address());
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<JobOutcome> outcome =
      (*client)->SubmitAndWait(TinyJob(), absl::Seconds(10), true);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->job.id(), "job-1");
  EXPECT_EQ(outcome->job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(outcome->job.message(), "the end");
  EXPECT_GT(outcome->submit_to_done_seconds, 0);
  EXPECT_LT(outcome->submit_to_done_seconds, 10);
  ASSERT_EQ(fake.submitted().size(), 1u);
  EXPECT_EQ(fake.submitted()[0].reshard().tensor().shape(0), 1024);
}

TEST(JobClientTest, AFailedJobIsAnOutcomeNotAnError) {
  cli::FakeController fake;
  ScriptJobs(fake, 1, v1::JOB_STATE_FAILED);
  absl::StatusOr<std::unique_ptr<JobClient>> client =
      JobClient::Connect(fake.address());
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<JobOutcome> outcome =
      (*client)->SubmitAndWait(TinyJob(), absl::Seconds(10), false);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->job.state(), v1::JOB_STATE_FAILED);
}

TEST(JobClientTest, AStreamThatEndsBeforeTheJobDoesIsAnError) {
  cli::FakeController fake;  // no events scripted: the job stays QUEUED
  absl::StatusOr<std::unique_ptr<JobClient>> client =
      JobClient::Connect(fake.address());
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<JobOutcome> outcome =
      (*client)->SubmitAndWait(TinyJob(), absl::Seconds(10), false);
  EXPECT_FALSE(outcome.ok());
  EXPECT_THAT(outcome.status().message(), HasSubstr("job-1"));
  EXPECT_THAT(outcome.status().message(), HasSubstr("QUEUED"));
}

TEST(JobClientTest, SubmitErrorsKeepTheirCode) {
  cli::FakeController fake;
  fake.SetSubmitError(
      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad spec"));
  absl::StatusOr<std::unique_ptr<JobClient>> client =
      JobClient::Connect(fake.address());
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<JobOutcome> outcome =
      (*client)->SubmitAndWait(TinyJob(), absl::Seconds(10), false);
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outcome.status().message(), HasSubstr("bad spec"));
}

TEST(JobClientTest, UnreachableControllerIsUnavailableNamingTheAddress) {
  std::string address;
  {
    cli::FakeController gone;  // a port that was free a moment ago
    address = gone.address();
  }
  absl::StatusOr<std::unique_ptr<JobClient>> client =
      JobClient::Connect(address, absl::Milliseconds(300));
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(client.status().message(), HasSubstr(address));
}

TEST(RunClosedLoopLoadTest, EveryClientRunsItsJobsOneAfterAnother) {
  cli::FakeController fake;
  ScriptJobs(fake, 12, v1::JOB_STATE_SUCCEEDED);
  LoadOptions options;
  options.clients = 3;
  options.max_jobs_per_client = 4;
  options.duration = absl::Seconds(30);
  absl::StatusOr<LoadResult> result =
      RunClosedLoopLoad(fake.address(), TinyJob(), options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->succeeded, 12);
  EXPECT_EQ(result->failed, 0);
  EXPECT_TRUE(result->first_failure.empty()) << result->first_failure;
  EXPECT_THAT(result->latencies_seconds, SizeIs(12));
  EXPECT_EQ(fake.submitted().size(), 12u);
  EXPECT_GT(result->elapsed_seconds, 0);
  EXPECT_NEAR(result->jobs_per_second(), 12 / result->elapsed_seconds, 1e-9);
}

TEST(RunClosedLoopLoadTest, CountsFailuresAndKeepsTheFirstReason) {
  cli::FakeController fake;
  ScriptJobs(fake, 2, v1::JOB_STATE_FAILED);
  LoadOptions options;
  options.clients = 1;
  options.max_jobs_per_client = 2;
  absl::StatusOr<LoadResult> result =
      RunClosedLoopLoad(fake.address(), TinyJob(), options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->succeeded, 0);
  EXPECT_EQ(result->failed, 2);
  EXPECT_THAT(result->first_failure, HasSubstr("JOB_STATE_FAILED"));
  EXPECT_THAT(result->first_failure, HasSubstr("the end"));
}

TEST(RunClosedLoopLoadTest, StopsSubmittingWhenTheDurationIsOver) {
  cli::FakeController fake;
  ScriptJobs(fake, 1000, v1::JOB_STATE_SUCCEEDED);
  LoadOptions options;
  options.clients = 2;
  options.duration = absl::Milliseconds(200);
  absl::StatusOr<LoadResult> result =
      RunClosedLoopLoad(fake.address(), TinyJob(), options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->succeeded, 0);
  EXPECT_LT(result->elapsed_seconds, 5);
}

TEST(RunClosedLoopLoadTest, RejectsZeroClients) {
  LoadOptions options;
  options.clients = 0;
  absl::StatusOr<LoadResult> result =
      RunClosedLoopLoad("127.0.0.1:1", TinyJob(), options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("clients"));
}

}  // namespace
}  // namespace meshcast::bench
