#include "util/grpc_status.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace meshcast {
namespace {

// Every code of google.rpc.Code, as each library names it.
const std::vector<std::pair<absl::StatusCode, grpc::StatusCode>>& AllCodes() {
  static const auto* codes =
      new std::vector<std::pair<absl::StatusCode, grpc::StatusCode>>{
          {absl::StatusCode::kOk, grpc::StatusCode::OK},
          {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
          {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN},
          {absl::StatusCode::kInvalidArgument,
           grpc::StatusCode::INVALID_ARGUMENT},
          {absl::StatusCode::kDeadlineExceeded,
           grpc::StatusCode::DEADLINE_EXCEEDED},
          {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
          {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
          {absl::StatusCode::kPermissionDenied,
           grpc::StatusCode::PERMISSION_DENIED},
          {absl::StatusCode::kResourceExhausted,
           grpc::StatusCode::RESOURCE_EXHAUSTED},
          {absl::StatusCode::kFailedPrecondition,
           grpc::StatusCode::FAILED_PRECONDITION},
          {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED},
          {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE},
          {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
          {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL},
          {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
          {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
          {absl::StatusCode::kUnauthenticated,
           grpc::StatusCode::UNAUTHENTICATED},
      };
  return *codes;
}

TEST(GrpcStatusTest, TheTableHasEveryCodeOnce) {
  ASSERT_EQ(AllCodes().size(), 17u);
  for (size_t i = 0; i < AllCodes().size(); ++i) {
    EXPECT_EQ(static_cast<int>(AllCodes()[i].first), static_cast<int>(i));
    EXPECT_EQ(static_cast<int>(AllCodes()[i].second), static_cast<int>(i));
  }
}

TEST(GrpcStatusTest, EveryCodeMapsBothWays) {
  for (const auto& [absl_code, grpc_code] : AllCodes()) {
    SCOPED_TRACE(absl::StatusCodeToString(absl_code));
    EXPECT_EQ(AbslCodeOf(grpc_code), absl_code);
    EXPECT_EQ(GrpcCodeOf(absl_code), grpc_code);
  }
}

TEST(GrpcStatusTest, ErrorsKeepCodeAndMessageBothWays) {
  for (const auto& [absl_code, grpc_code] : AllCodes()) {
    if (absl_code == absl::StatusCode::kOk) continue;
    SCOPED_TRACE(absl::StatusCodeToString(absl_code));
    const std::string message =
        "job 'j1': \xC3\xA9 and a\nnewline " + absl::StatusCodeToString(absl_code);

    const grpc::Status to = ToGrpcStatus(absl::Status(absl_code, message));
    EXPECT_EQ(to.error_code(), grpc_code);
    EXPECT_EQ(to.error_message(), message);

    const absl::Status from = FromGrpcStatus(grpc::Status(grpc_code, message));
    EXPECT_EQ(from.code(), absl_code);
    EXPECT_EQ(from.message(), message);

    // And round trips in both directions.
    EXPECT_EQ(FromGrpcStatus(ToGrpcStatus(absl::Status(absl_code, message))),
              absl::Status(absl_code, message));
    const grpc::Status back =
        ToGrpcStatus(FromGrpcStatus(grpc::Status(grpc_code, message)));
    EXPECT_EQ(back.error_code(), grpc_code);
    EXPECT_EQ(back.error_message(), message);
  }
}

TEST(GrpcStatusTest, ContextPrefixesTheMessage) {
  const absl::Status status =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::NOT_FOUND, "no job j9"),
                     "controller GetJob");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "controller GetJob: no job j9");
}

TEST(GrpcStatusTest, OkIsOkWithoutMessage) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "KvSet").ok());
  EXPECT_EQ(FromGrpcStatus(grpc::Status::OK, "KvSet"), absl::OkStatus());
  const grpc::Status ok = ToGrpcStatus(absl::OkStatus());
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.error_message(), "");
}

TEST(GrpcStatusTest, UnknownCodesBecomeUnknownKeepingTheMessage) {
  const absl::Status from =
      FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(42), "new"));
  EXPECT_EQ(from.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(from.message(), "new");
  const grpc::Status to =
      ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(42), "newer"));
  EXPECT_EQ(to.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(to.error_message(), "newer");
  EXPECT_EQ(AbslCodeOf(static_cast<grpc::StatusCode>(17)),
            absl::StatusCode::kUnknown);
  EXPECT_EQ(GrpcCodeOf(static_cast<absl::StatusCode>(17)),
            grpc::StatusCode::UNKNOWN);
}

}  // namespace
}  // namespace meshcast
