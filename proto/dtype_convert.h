// DType conversions between the public API (meshcast.v1.DType) and the
// planner's DType, shared by the controller, the worker and meshctl so that
// every component accepts the same values and words the same errors.
//
//   ASSIGN_OR_RETURN(DType dtype,
//                    DTypeFromProto(spec.dtype(), "reshard.tensor.dtype"));
//   tensor->set_dtype(DTypeToProto(DType::kBFloat16));
//
// Thread safety: pure functions.
#ifndef MESHCAST_PROTO_DTYPE_CONVERT_H_
#define MESHCAST_PROTO_DTYPE_CONVERT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshcast/v1/types.pb.h"
#include "planner/tensor.h"

namespace meshcast {

// Every dtype name, for error messages: "int8, uint8, ...".
std::string AllowedDTypeNames();

// INVALID_ARGUMENT naming `field` and the allowed names when `dtype` is
// unset or not a known value (a newer client may send one).
absl::StatusOr<DType> DTypeFromProto(int dtype, absl::string_view field);

v1::DType DTypeToProto(DType dtype);

// Bytes of one element of `dtype`; 0 when it is unset or unknown.
int DTypeProtoSize(int dtype);

}  // namespace meshcast

#endif  // MESHCAST_PROTO_DTYPE_CONVERT_H_
