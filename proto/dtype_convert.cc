#include "proto/dtype_convert.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace meshcast {
namespace {

// Each planner dtype with its API value, in the API's order.
struct DTypePair {
  DType dtype;
  v1::DType proto;
};
constexpr DTypePair kDTypes[] = {
    {DType::kInt8, v1::DTYPE_INT8},         {DType::kUInt8, v1::DTYPE_UINT8},
    {DType::kInt32, v1::DTYPE_INT32},       {DType::kInt64, v1::DTYPE_INT64},
    {DType::kFloat16, v1::DTYPE_FLOAT16},   {DType::kBFloat16, v1::DTYPE_BFLOAT16},
    {DType::kFloat32, v1::DTYPE_FLOAT32},   {DType::kFloat64, v1::DTYPE_FLOAT64},
};

}  // namespace

std::string AllowedDTypeNames() {
  std::vector<std::string> names;
  for (const DTypePair& pair : kDTypes) names.push_back(DTypeName(pair.dtype));
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<DType> DTypeFromProto(int dtype, absl::string_view field) {
  for (const DTypePair& pair : kDTypes) {
    if (pair.proto == dtype) return pair.dtype;
  }
  if (dtype == v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is not set; one of ", AllowedDTypeNames()));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field, " has unknown value ", dtype, "; one of ", AllowedDTypeNames()));
}

v1::DType DTypeToProto(DType dtype) {
  for (const DTypePair& pair : kDTypes) {
    if (pair.dtype == dtype) return pair.proto;
  }
  return v1::DTYPE_UNSPECIFIED;
}

int DTypeProtoSize(int dtype) {
  absl::StatusOr<DType> converted = DTypeFromProto(dtype, "dtype");
  return converted.ok() ? DTypeSize(*converted) : 0;
}

}  // namespace meshcast
