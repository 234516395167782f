#include "proto/dtype_convert.h"

#include "absl/strings/ascii.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::HasSubstr;

TEST(DTypeConvertTest, EveryApiValueRoundTrips) {
  int known = 0;
  for (int value = v1::DType_MIN; value <= v1::DType_MAX; ++value) {
    if (!v1::DType_IsValid(value) || value == v1::DTYPE_UNSPECIFIED) continue;
    absl::StatusOr<DType> dtype = DTypeFromProto(value, "dtype");
    ASSERT_TRUE(dtype.ok()) << v1::DType_Name(static_cast<v1::DType>(value)) << ": " << dtype.status();
    EXPECT_EQ(DTypeToProto(*dtype), value);
    // The API's name is the planner's, upper-cased with a prefix.
    EXPECT_EQ(v1::DType_Name(static_cast<v1::DType>(value)),
              "DTYPE_" + absl::AsciiStrToUpper(DTypeName(*dtype)));
    ++known;
  }
  EXPECT_EQ(known, 8);
}

TEST(DTypeConvertTest, UnsetAndUnknownNameTheFieldAndTheChoices) {
  absl::StatusOr<DType> unset =
      DTypeFromProto(v1::DTYPE_UNSPECIFIED, "reshard.tensor.dtype");
  EXPECT_TRUE(absl::IsInvalidArgument(unset.status()));
  EXPECT_THAT(unset.status().message(),
              HasSubstr("reshard.tensor.dtype is not set; one of int8, uint8"));
  absl::StatusOr<DType> unknown = DTypeFromProto(99, "plan.tensors[0].dtype");
  EXPECT_TRUE(absl::IsInvalidArgument(unknown.status()));
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("plan.tensors[0].dtype has unknown value 99; one of"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("bfloat16"));
}

}  // namespace
}  // namespace meshcast
