// Requests with invalid UTF-8 in a string field, sent through a real
// in-process gRPC server, get INVALID_ARGUMENT naming the field.
#include "security/parse_error_interceptor.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshcast/v1/controller.grpc.pb.h"

namespace meshcast::security {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Answers KvSet and SubmitJob with OK, so that any error comes from the
// parse.
class EchoController : public v1::Controller::Service {
 public:
  grpc::Status KvSet(grpc::ServerContext*, const v1::KvSetRequest*,
                     v1::KvSetResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*,
                         v1::SubmitJobResponse*) override {
    return grpc::Status::OK;
  }
};

class ParseErrorInterceptorTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    if (GetParam()) {
      std::vector<std::unique_ptr<
          grpc::experimental::ServerInterceptorFactoryInterface>>
          creators;
      creators.push_back(NewParseErrorInterceptorFactory());
      builder.experimental().SetInterceptorCreators(std::move(creators));
    }
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override { server_->Shutdown(); }

  // Sends `bytes` as the request of `method` and returns the status.
  grpc::Status SendRaw(const std::string& method, const std::string& bytes) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    absl::Notification done;
    grpc::Status result;
    stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status status) {
                     result = std::move(status);
                     done.Notify();
                   });
    done.WaitForNotification();
    return result;
  }

  EchoController service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

// The wire form of a message whose string fields hold anything: proto3
// serialization does not refuse invalid UTF-8 (it only logs).
std::string Wire(const google::protobuf::Message& message) {
  std::string out;
  EXPECT_TRUE(message.SerializeToString(&out));
  return out;
}

TEST_P(ParseErrorInterceptorTest, InvalidUtf8IsInvalidArgumentNamingTheField) {
  v1::KvSetRequest set;
  set.set_key("job/j1/\xFF\xFE");
  grpc::Status status = SendRaw("/meshcast.v1.Controller/KvSet", Wire(set));
  if (!GetParam()) {
    // What gRPC does on its own: INTERNAL, no message.
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
    EXPECT_EQ(status.error_message(), "");
    return;
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("string field key of meshcast.v1.KvSetRequest is not "
                        "valid UTF-8"));
  EXPECT_THAT(status.error_message(), Not(HasSubstr("\xFF")));

  // A nested field is named by its path from the request.
  v1::SubmitJobRequest submit;
  submit.mutable_spec()->set_name("bad\xC0\xAF");
  status = SendRaw("/meshcast.v1.Controller/SubmitJob", Wire(submit));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(
      status.error_message(),
      HasSubstr("string field spec.name of meshcast.v1.SubmitJobRequest"));

  // Bytes that are no message at all: still INVALID_ARGUMENT, no field.
  status = SendRaw("/meshcast.v1.Controller/SubmitJob", "\x0a\xff\xff\xff");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("meshcast.v1.SubmitJobRequest could not be parsed"));

  // A valid request still reaches the handler.
  set.set_key("job/j1/ok");
  EXPECT_TRUE(SendRaw("/meshcast.v1.Controller/KvSet", Wire(set)).ok());
}

INSTANTIATE_TEST_SUITE_P(WithAndWithout, ParseErrorInterceptorTest,
                         ::testing::Bool());

TEST(ParseErrorMessageTest, NamesThePathOrSaysItCannot) {
  EXPECT_THAT(ParseErrorMessage("/meshcast.v1.Controller/RegisterWorker",
                                "meshcast.v1.WorkerInfo.name"),
              HasSubstr("string field worker.name of "
                        "meshcast.v1.RegisterWorkerRequest"));
  // A report about a type the request does not contain is not trusted.
  EXPECT_THAT(ParseErrorMessage("/meshcast.v1.Controller/KvSet",
                                "meshcast.v1.WorkerInfo.name"),
              HasSubstr("meshcast.v1.KvSetRequest could not be parsed"));
  EXPECT_THAT(ParseErrorMessage("/no.Such/Method", ""),
              HasSubstr("request of \"/no.Such/Method\""));
}

}  // namespace
}  // namespace meshcast::security
