#include "security/parse_error_interceptor.h"

#include <deque>
#include <mutex>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/stubs/logging.h"
#include "util/text_safety.h"

namespace meshcast::security {
namespace {

namespace gpb = ::google::protobuf;
using grpc::experimental::InterceptionHookPoints;

// The last string field protobuf refused on this thread while parsing.
thread_local std::string last_utf8_field;

gpb::LogHandler* previous_log_handler = nullptr;

// protobuf reports "String field 'pkg.Msg.field' contains invalid UTF-8
// data when parsing a protocol buffer. ..." at ERROR.
void CaptureUtf8Reports(gpb::LogLevel level, const char* filename, int line,
                        const std::string& message) {
  static constexpr absl::string_view kHead = "String field '";
  if (level == gpb::LOGLEVEL_ERROR && absl::StartsWith(message, kHead) &&
      absl::StrContains(message, "invalid UTF-8 data when parsing")) {
    const absl::string_view rest =
        absl::string_view(message).substr(kHead.size());
    last_utf8_field = std::string(rest.substr(0, rest.find('\'')));
    return;  // answered to the client; not one log line per hostile call
  }
  if (previous_log_handler != nullptr) {
    previous_log_handler(level, filename, line, message);
  }
}

void InstallLogCapture() {
  static std::once_flag once;
  std::call_once(once, [] {
    previous_log_handler = gpb::SetLogHandler(&CaptureUtf8Reports);
  });
}

// The request type of "/pkg.Service/Method", or null if unknown.
const gpb::Descriptor* RequestTypeOf(absl::string_view method) {
  if (absl::StartsWith(method, "/")) method.remove_prefix(1);
  const gpb::MethodDescriptor* descriptor =
      gpb::DescriptorPool::generated_pool()->FindMethodByName(
          absl::StrReplaceAll(method, {{"/", "."}}));
  return descriptor == nullptr ? nullptr : descriptor->input_type();
}

// "spec.reshard.src_spec.text": the shortest path of field names from
// `root` to the field named `full_name`; empty if none reaches it (then
// the report came from another parse on this thread).
std::string FieldPath(const gpb::Descriptor* root,
                      absl::string_view full_name) {
  std::deque<std::pair<const gpb::Descriptor*, std::string>> queue = {
      {root, ""}};
  absl::flat_hash_set<const gpb::Descriptor*> seen = {root};
  while (!queue.empty()) {
    auto [type, path] = queue.front();
    queue.pop_front();
    for (int i = 0; i < type->field_count(); ++i) {
      const gpb::FieldDescriptor* field = type->field(i);
      const std::string here =
          path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
      if (field->full_name() == full_name) return here;
      const gpb::Descriptor* next = field->message_type();
      if (next != nullptr && seen.insert(next).second) {
        queue.emplace_back(next, here);
      }
    }
  }
  return "";
}

class ParseErrorInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit ParseErrorInterceptor(std::string method)
      : method_(std::move(method)) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE)) {
      // No message: gRPC could not deserialize the request.
      if (methods->GetRecvMessage() == nullptr) {
        parse_failed_ = true;
        utf8_field_ = std::move(last_utf8_field);
      }
      last_utf8_field.clear();
    }
    if (parse_failed_ && methods->QueryInterceptionHookPoint(
                             InterceptionHookPoints::PRE_SEND_STATUS)) {
      // Synchronous methods answer a failed parse with INTERNAL, callback
      // ones with UNIMPLEMENTED; both with an empty message.
      const grpc::Status status = methods->GetSendStatus();
      if (status.error_code() == grpc::StatusCode::INTERNAL ||
          status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        methods->ModifySendStatus(
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                         ParseErrorMessage(method_, utf8_field_)));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  bool parse_failed_ = false;
  std::string utf8_field_;
};

class ParseErrorInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new ParseErrorInterceptor(info->method());
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewParseErrorInterceptorFactory() {
  InstallLogCapture();
  return std::make_unique<ParseErrorInterceptorFactory>();
}

std::string ParseErrorMessage(absl::string_view method,
                              absl::string_view utf8_field) {
  const gpb::Descriptor* request = RequestTypeOf(method);
  const std::string type =
      request != nullptr ? request->full_name()
                         : absl::StrCat("request of ", QuotePrefix(method));
  const std::string path = request != nullptr && !utf8_field.empty()
                               ? FieldPath(request, utf8_field)
                               : "";
  if (!path.empty()) {
    return absl::StrCat("string field ", path, " of ", type,
                        " is not valid UTF-8 (proto3 strings must be UTF-8; "
                        "send raw bytes in a bytes field); the request was "
                        "not processed");
  }
  return absl::StrCat(type,
                      " could not be parsed: a string field holds invalid "
                      "UTF-8, or the bytes are not a ",
                      type, " message; the request was not processed");
}

}  // namespace meshcast::security
