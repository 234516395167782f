#include "planner/kinds/reshard/reshard_request.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::ReshardSpec GoodSpec() {
  v1::ReshardSpec spec;
  spec.mutable_tensor()->add_shape(16);
  spec.mutable_tensor()->add_shape(8);
  spec.mutable_tensor()->set_dtype(v1::DTYPE_FLOAT32);
  spec.mutable_src_mesh()->add_shape(2);
  spec.mutable_src_mesh()->add_shape(2);
  spec.mutable_src_mesh()->set_first_host(-1);
  spec.mutable_src_spec()->set_text("S0R");
  spec.mutable_dst_mesh()->add_shape(1);
  spec.mutable_dst_mesh()->add_shape(2);
  spec.mutable_dst_mesh()->set_first_host(2);
  spec.mutable_dst_spec()->set_text("RS1");
  return spec;
}

TEST(ReshardRequestTest, ConvertsAGoodSpec) {
  absl::StatusOr<ReshardRequest> r = ReshardRequestFromProto(GoodSpec());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->tensor.shape, ElementsAre(16, 8));
  EXPECT_EQ(r->tensor.dtype, DType::kFloat32);
  EXPECT_EQ(r->src_spec.ToString(), "S0R");
  EXPECT_EQ(r->dst_spec.ToString(), "RS1");
  EXPECT_THAT(r->src_mesh.shape, ElementsAre(2, 2));
  EXPECT_EQ(r->dst_mesh.first_host, 2);
  EXPECT_EQ(r->strategy, Strategy::kAuto);
  EXPECT_FALSE(r->allow_overlap);
}

TEST(ReshardRequestTest, FirstHostZeroPinsAndUnsetPlacesAnywhere) {
  v1::ReshardSpec spec = GoodSpec();
  spec.mutable_dst_mesh()->set_first_host(0);
  spec.mutable_src_mesh()->clear_first_host();
  absl::StatusOr<ReshardRequest> r = ReshardRequestFromProto(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->dst_mesh.first_host, 0);
  EXPECT_EQ(r->src_mesh.first_host, -1);
  EXPECT_EQ(r->dst_mesh.ToString(), "1x2@0");
  EXPECT_EQ(r->src_mesh.ToString(), "2x2");
}

TEST(ReshardRequestTest, SpecFromDims) {
  v1::ReshardSpec spec = GoodSpec();
  spec.mutable_src_spec()->clear_text();
  spec.mutable_src_spec()->add_dims()->add_mesh_axes(0);
  spec.mutable_src_spec()->add_dims();
  absl::StatusOr<ReshardRequest> r = ReshardRequestFromProto(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->src_spec.ToString(), "S0R");
  spec.mutable_src_spec()->mutable_dims(1)->add_mesh_axes(0);
  r = ReshardRequestFromProto(spec);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
  EXPECT_THAT(r.status().message(), HasSubstr("used twice"));
}

TEST(ReshardRequestTest, StrategyByName) {
  v1::ReshardSpec spec = GoodSpec();
  spec.set_strategy("broadcast_lb");
  absl::StatusOr<ReshardRequest> r = ReshardRequestFromProto(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->strategy, Strategy::kBroadcastLb);
}

struct BadCase {
  const char* name;
  void (*mutate)(v1::ReshardSpec*);
  const char* expected;  // substring of the error
};

class ReshardRequestBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ReshardRequestBadTest, IsRejectedWithAClearError) {
  v1::ReshardSpec spec = GoodSpec();
  GetParam().mutate(&spec);
  absl::StatusOr<ReshardRequest> r = ReshardRequestFromProto(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ReshardRequestBadTest,
    ::testing::Values(
        BadCase{
            "UnknownToken",
            [](v1::ReshardSpec* s) { s->mutable_src_spec()->set_text("X0R"); },
            "src_spec: unknown token"},
        BadCase{
            "RankMismatch",
            [](v1::ReshardSpec* s) { s->mutable_dst_spec()->set_text("RRR"); },
            "dst_spec RRR has 3 entries but the tensor has 2 dimensions"},
        BadCase{"AxisBeyondMesh",
                [](v1::ReshardSpec* s) {
                  s->mutable_dst_mesh()->clear_shape();
                  s->mutable_dst_mesh()->add_shape(2);
                  s->mutable_dst_spec()->set_text("RS1");
                },
                "uses mesh axis 1"},
        BadCase{"NoDType",
                [](v1::ReshardSpec* s) {
                  s->mutable_tensor()->set_dtype(v1::DTYPE_UNSPECIFIED);
                },
                "reshard.tensor.dtype is not set; one of int8"},
        BadCase{"UnknownDType",
                [](v1::ReshardSpec* s) {
                  s->mutable_tensor()->set_dtype(static_cast<v1::DType>(99));
                },
                "unknown value 99"},
        BadCase{"NegativeFirstHost",
                [](v1::ReshardSpec* s) {
                  s->mutable_dst_mesh()->set_first_host(-2);
                },
                "dst_mesh.first_host is -2; allowed: a host index >= 0"},
        BadCase{"UnknownStrategy",
                [](v1::ReshardSpec* s) { s->set_strategy("teleport"); },
                "teleport"},
        BadCase{
            "ZeroExtent",
            [](v1::ReshardSpec* s) { s->mutable_tensor()->set_shape(0, 0); },
            "extent < 1"},
        BadCase{"HugeTensor",
                [](v1::ReshardSpec* s) {
                  s->mutable_tensor()->set_shape(0, int64_t{1} << 40);
                  s->mutable_tensor()->set_shape(1, int64_t{1} << 40);
                },
                "too large"},
        BadCase{"NoTensor", [](v1::ReshardSpec* s) { s->clear_tensor(); },
                "reshard.tensor is required"},
        BadCase{"EmptySpec", [](v1::ReshardSpec* s) { s->clear_dst_spec(); },
                "dst_spec is empty"},
        BadCase{
            "NegativeMeshExtent",
            [](v1::ReshardSpec* s) { s->mutable_src_mesh()->set_shape(0, -2); },
            "src_mesh.shape"},
        BadCase{
            "DeviceCountMismatch",
            [](v1::ReshardSpec* s) { s->mutable_src_mesh()->add_devices(0); },
            "src_mesh.devices has 1 ids but shape 2x2 needs 4"}),
    [](const ::testing::TestParamInfo<BadCase>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace meshcast
