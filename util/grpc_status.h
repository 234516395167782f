// gRPC status <-> absl::Status, one mapping for every RPC boundary: the
// controller's and workers' services answer with ToGrpcStatus, and every
// client (the controller's worker client, the workers' KV store, meshctl,
// the benchmarks) turns an RPC's grpc::Status back with FromGrpcStatus.
//
//   if (!job.ok()) return ToGrpcStatus(job.status());          // service
//   RETURN_IF_ERROR(FromGrpcStatus(stub->Call(&ctx, req, &resp),
//                                  "controller KvSet 'k'"));   // client
//
// Codes map one to one (both follow google.rpc.Code: the same 17 codes with
// the same numbers); a code outside them (a peer newer than this build)
// becomes UNKNOWN, keeping its message. Messages pass through unchanged,
// except that FromGrpcStatus with `context` prefixes "context: ". An OK
// status of either kind converts to OK and drops any message. What is not
// carried: absl payloads and gRPC's binary error details.
//
// Thread safety: pure functions.
#ifndef MESHCAST_UTIL_GRPC_STATUS_H_
#define MESHCAST_UTIL_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace meshcast {

// The absl code of a gRPC code (kUnknown for one outside google.rpc.Code).
absl::StatusCode AbslCodeOf(grpc::StatusCode code);
// The gRPC code of an absl code (UNKNOWN for one outside google.rpc.Code).
grpc::StatusCode GrpcCodeOf(absl::StatusCode code);

// The same code and message; OK for OK.
absl::Status FromGrpcStatus(const grpc::Status& status);
// The same code; the message prefixed with "context: " (e.g. the call and
// its peer), so that a caller's error says which RPC failed. OK for OK.
absl::Status FromGrpcStatus(const grpc::Status& status,
                            absl::string_view context);

// The same code and message; grpc::Status::OK for OK.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace meshcast

#endif  // MESHCAST_UTIL_GRPC_STATUS_H_
