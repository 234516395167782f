#include "cli/job_ref.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "cli/command.h"
#include "cli/fake_controller.h"
#include "cli/job_commands.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace meshcast::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Jobs job-000001 .. job-0000<n>, as the controller numbers them.
std::vector<v1::Job> Jobs(int n) {
  std::vector<v1::Job> jobs;
  for (int i = n; i >= 1; --i) {  // newest first, as ListJobs answers
    v1::Job job;
    job.set_id(absl::StrFormat("job-%06d", i));
    job.set_state(v1::JOB_STATE_SUCCEEDED);
    jobs.push_back(job);
  }
  return jobs;
}

TEST(JobRefTest, FullIds) {
  EXPECT_TRUE(IsFullJobId("job-000042"));
  EXPECT_TRUE(IsFullJobId("job-1234567"));
  EXPECT_FALSE(IsFullJobId("job-42"));
  EXPECT_FALSE(IsFullJobId("42"));
  EXPECT_FALSE(IsFullJobId("job-00004x"));
  EXPECT_FALSE(IsFullJobId("task-000042"));
}

TEST(JobRefTest, NumberPrefixOrId) {
  const std::vector<v1::Job> jobs = Jobs(42);
  EXPECT_EQ(*MatchJobId("42", jobs), "job-000042");
  EXPECT_EQ(*MatchJobId("job-42", jobs), "job-000042");
  EXPECT_EQ(*MatchJobId("7", jobs), "job-000007");
  EXPECT_EQ(*MatchJobId("job-0042", jobs), "job-000042");  // a number
  // A prefix first (40..42 here), else the number.
  EXPECT_EQ(MatchJobId("job-00004", jobs).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*MatchJobId("job-00004", Jobs(39)), "job-000004");
  EXPECT_EQ(*MatchJobId("job-000042", jobs), "job-000042");
  // A unique prefix among fewer jobs.
  EXPECT_EQ(*MatchJobId("job-00003", Jobs(30)), "job-000030");
}

TEST(JobRefTest, AmbiguousListsTheCandidates) {
  const absl::StatusOr<std::string> id = MatchJobId("job-0000", Jobs(12));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(id.status().message(),
            "job 'job-0000' is ambiguous: 12 jobs match (job-000012, "
            "job-000011, job-000010, job-000009, job-000008, job-000007, "
            "job-000006, job-000005, job-000004, job-000003 and 2 more); give "
            "more of the id");
  const absl::StatusOr<std::string> two = MatchJobId("job-00001", Jobs(11));
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(std::string(two.status().message()),
              HasSubstr("2 jobs match (job-000011, job-000010)"));
}

TEST(JobRefTest, NotFound) {
  const absl::StatusOr<std::string> id = MatchJobId("99", Jobs(3));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(id.status().message()),
              StartsWith("job 99 not found"));
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("'meshctl list'"));
  EXPECT_EQ(MatchJobId("nope", Jobs(3)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(MatchJobId("", Jobs(3)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Every command that takes a JOB resolves it the same way.
class JobRefCommandTest : public ::testing::Test {
 protected:
  JobRefCommandTest() {
    context_.getenv = [](const std::string&) { return std::nullopt; };
    const std::vector<v1::Job> jobs = Jobs(12);
    for (auto it = jobs.rbegin(); it != jobs.rend(); ++it) fake_.AddJob(*it);
  }
  std::vector<std::string> Args(std::vector<std::string> args) {
    args.insert(args.end(), {"--controller", fake_.address()});
    return args;
  }
  FakeController fake_;
  CommandContext context_;
};

TEST_F(JobRefCommandTest, GetTakesANumberOrPrefix) {
  for (const std::string& ref : {"7", "job-7", "job-000007"}) {
    const CommandResult result =
        RunGetCommand(Args({ref, "-o", "json"}), context_);
    ASSERT_EQ(result.exit_code, kExitOk) << ref << ": " << result.err;
    EXPECT_EQ(nlohmann::json::parse(result.out)["id"], "job-000007") << ref;
  }
  CommandResult result = RunGetCommand(Args({"job-0000"}), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("meshctl get: job 'job-0000' is "
                                     "ambiguous: 12 jobs match (job-000012, "));
  result = RunGetCommand(Args({"77"}), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("meshctl get: job 77 not found"));
  // A full id goes to the controller as it is.
  result = RunGetCommand(Args({"job-000077"}), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_EQ(result.err, "meshctl get: job job-000077 not found\n");
}

TEST_F(JobRefCommandTest, CancelWatchAndTraceResolveToo) {
  v1::Job running;
  running.set_id("job-000013");
  running.set_state(v1::JOB_STATE_RUNNING);
  fake_.AddJob(running);
  CommandResult result = RunCancelCommand(Args({"13", "-o", "json"}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_EQ(nlohmann::json::parse(result.out)["id"], "job-000013");

  v1::JobEvent done;
  done.set_job_id("job-000012");
  done.set_state(v1::JOB_STATE_SUCCEEDED);
  fake_.SetWatchEvents("job-000012", {done});
  result = RunWatchCommand(Args({"job-12"}), context_);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, StartsWith("job job-000012 SUCCEEDED"));

  result = RunTraceCommand(Args({"job-0000"}), context_);
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("is ambiguous"));
  result = RunTraceCommand(Args({"5"}), context_);
  // Found (job-000005), but it has no timings: the trace's own error.
  EXPECT_EQ(result.exit_code, kExitFailure);
  EXPECT_THAT(result.err, StartsWith("meshctl trace: job job-000005 "));
}

}  // namespace
}  // namespace meshcast::cli
