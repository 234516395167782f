// ParseErrorInterceptor: a gRPC server interceptor that answers a request
// which does not parse with INVALID_ARGUMENT and a message, instead of
// gRPC's INTERNAL with an empty message.
//
// Why an interceptor: a proto3 `string` field must hold UTF-8, and the
// protobuf runtime checks that while parsing. A request with invalid UTF-8
// in any string field (at any depth) therefore fails to parse inside gRPC,
// before any handler runs, and gRPC 1.51 then sends INTERNAL with the empty
// InitializationErrorString() (UNIMPLEMENTED with no message for a method
// on the callback API, like Controller.KvGet). The interceptor sees the failed
// parse (no received message at POST_RECV_MESSAGE) and rewrites that status at
// PRE_SEND_STATUS:
//   INVALID_ARGUMENT "meshcast.v1.KvSetRequest.key: string field is not
//   valid UTF-8 (proto3 strings must be UTF-8; the request was not parsed)"
// The field is the one the protobuf runtime names when it refuses the
// string (it reports it through its log, which this component captures per
// thread; gRPC parses and intercepts a request on the same thread). When no
// such report matches the request's type (wire bytes that are not a valid
// message at all), the message says so without naming a field. The value
// itself is never quoted.
//
//   std::vector<std::unique_ptr<
//       grpc::experimental::ServerInterceptorFactoryInterface>> creators;
//   creators.push_back(NewParseErrorInterceptorFactory());
//   builder.experimental().SetInterceptorCreators(std::move(creators));
//
// Installs, once per process, a protobuf log handler that keeps the UTF-8
// parse reports (instead of printing one line per hostile request) and
// passes every other message to the previous handler.
//
// Thread safety: the factory and its interceptors are used by gRPC from any
// thread; each interceptor belongs to one call.
#ifndef MESHCAST_SECURITY_PARSE_ERROR_INTERCEPTOR_H_
#define MESHCAST_SECURITY_PARSE_ERROR_INTERCEPTOR_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/support/server_interceptor.h"

namespace meshcast::security {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewParseErrorInterceptorFactory();

// The message for a request of gRPC method `method` ("/pkg.Service/Name")
// that failed to parse; `utf8_field` is the full name of the string field
// protobuf refused ("pkg.Message.field"), or empty. Exposed for tests.
std::string ParseErrorMessage(absl::string_view method,
                              absl::string_view utf8_field);

}  // namespace meshcast::security

#endif  // MESHCAST_SECURITY_PARSE_ERROR_INTERCEPTOR_H_
