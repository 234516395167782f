#include "security/authorizer.h"

#include <string>

#include "gtest/gtest.h"

namespace meshcast::security {
namespace {

using Kind = Principal::Kind;

struct Row {
  const char* method;
  // Expected for: anonymous, admin, user, worker, controller.
  bool anonymous, admin, user, worker, controller;
};

// An independent statement of the rules of docs/security.md.
constexpr Row kExpected[] = {
    {"/meshcast.v1.Controller/RegisterWorker", 1, 0, 0, 1, 0},
    {"/meshcast.v1.Controller/Heartbeat", 1, 0, 0, 1, 0},
    {"/meshcast.v1.Controller/ReportProgress", 1, 0, 0, 1, 0},
    {"/meshcast.v1.Controller/KvSet", 1, 0, 0, 1, 0},
    {"/meshcast.v1.Controller/KvGet", 1, 0, 0, 1, 0},
    {"/meshcast.v1.Controller/SubmitJob", 1, 1, 1, 0, 0},
    {"/meshcast.v1.Controller/GetJob", 1, 1, 1, 0, 0},
    {"/meshcast.v1.Controller/ListJobs", 1, 1, 1, 0, 0},
    {"/meshcast.v1.Controller/WatchJob", 1, 1, 1, 0, 0},
    {"/meshcast.v1.Controller/CancelJob", 1, 1, 1, 0, 0},
    {"/meshcast.v1.Controller/Plan", 1, 1, 1, 0, 0},
    {"/meshcast.v1.Controller/GetCluster", 1, 1, 0, 0, 0},
    {"/meshcast.v1.Worker/RunTask", 1, 0, 0, 0, 1},
    {"/meshcast.v1.Worker/AbortTask", 1, 0, 0, 0, 1},
    {"/meshcast.v1.Worker/GetStatus", 1, 0, 0, 0, 1},
};

TEST(AuthorizerTest, MatchesTheTable) {
  for (const Row& row : kExpected) {
    const std::pair<Kind, bool> cases[] = {
        {Kind::kAnonymous, row.anonymous}, {Kind::kAdmin, row.admin},
        {Kind::kUser, row.user},           {Kind::kWorker, row.worker},
        {Kind::kController, row.controller}};
    for (const auto& [kind, allowed] : cases) {
      const absl::Status status = Authorize(row.method, Principal{kind, "x"});
      EXPECT_EQ(status.ok(), allowed)
          << row.method << " as " << KindName(kind) << ": " << status;
      if (!allowed) {
        EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
      }
    }
  }
}

TEST(AuthorizerTest, UnknownMethodsAreDeniedEvenToAdmins) {
  const absl::Status status = Authorize("/meshcast.v1.Controller/DropAll",
                                        Principal{Kind::kAdmin, "root"});
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(Authorize("GetJob", Principal{Kind::kAdmin, "root"}).ok());
}

TEST(CanAccessJobTest, UsersSeeOnlyTheirOwnJobs) {
  EXPECT_TRUE(CanAccessJob(Principal{Kind::kUser, "alice"}, "alice"));
  EXPECT_FALSE(CanAccessJob(Principal{Kind::kUser, "alice"}, "bob"));
  EXPECT_FALSE(CanAccessJob(Principal{Kind::kUser, "alice"}, ""));
  EXPECT_FALSE(CanAccessJob(Principal{Kind::kUser, ""}, ""));
  EXPECT_TRUE(CanAccessJob(Principal{Kind::kAdmin, "root"}, "bob"));
  EXPECT_TRUE(CanAccessJob(Principal{}, "bob"));
  EXPECT_FALSE(CanAccessJob(Principal{Kind::kWorker, "bob"}, "bob"));
  EXPECT_TRUE(CanAccessEveryJob(Principal{Kind::kAdmin, "root"}));
  EXPECT_TRUE(CanAccessEveryJob(Principal{}));
  EXPECT_FALSE(CanAccessEveryJob(Principal{Kind::kUser, "alice"}));
  EXPECT_FALSE(CanAccessEveryJob(Principal{Kind::kWorker, "w0"}));
}

}  // namespace
}  // namespace meshcast::security
