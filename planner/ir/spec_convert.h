// Conversions between the public API (meshcast.v1 protos) and the planner's
// domain types. Conversions from protos validate what a client may have got
// wrong and name the field in the error; conversions to protos cannot fail.
//
// Thread safety: pure functions.
#ifndef MESHCAST_PLANNER_IR_SPEC_CONVERT_H_
#define MESHCAST_PLANNER_IR_SPEC_CONVERT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/placement.h"
#include "meshcast/v1/types.pb.h"
#include "planner/mesh.h"
#include "planner/sharding.h"
#include "planner/tensor.h"
#include "planner/topology.h"
#include "proto/dtype_convert.h"

namespace meshcast {

// DType conversions live in proto/dtype_convert.h (shared with the worker
// and meshctl).

// Rejects an empty shape, extents < 1 and element counts whose byte size
// would overflow.
absl::StatusOr<TensorSpec> TensorFromProto(const v1::TensorSpec& proto,
                                           absl::string_view field);
v1::TensorSpec TensorToProto(const TensorSpec& tensor);

// Uses `text` when set ("S0RR"), else `dims`.
absl::StatusOr<ShardingSpec> ShardingFromProto(const v1::ShardingSpec& proto,
                                               absl::string_view field);
v1::ShardingSpec ShardingToProto(const ShardingSpec& spec);

// A mesh as requested (shape, optional devices, optional first host).
absl::StatusOr<MeshRequest> MeshRequestFromProto(const v1::DeviceMesh& proto,
                                                 absl::string_view field);
v1::DeviceMesh MeshToProto(const DeviceMesh& mesh);

v1::Topology TopologyToProto(const Topology& topology);
v1::CollectiveCalibration CalibrationToProto(const CollectiveCalibration& c);
CollectiveCalibration CalibrationFromProto(
    const v1::CollectiveCalibration& proto);

void BoxToProto(const Box& box,
                google::protobuf::RepeatedPtrField<v1::Interval>* out);
Box BoxFromProto(const google::protobuf::RepeatedPtrField<v1::Interval>& in);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_IR_SPEC_CONVERT_H_
