#include "cli/reshard_input.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// The flags of case 1, as `meshctl submit reshard` would set them.
ReshardInput Case1() {
  ReshardInput input;
  input.Set("shape", "64x64x256", "--shape");
  input.Set("dtype", "int32", "--dtype");
  input.Set("src_mesh", "2x4", "--src-mesh");
  input.Set("src_spec", "S0RR", "--src-spec");
  input.Set("dst_mesh", "2x4", "--dst-mesh");
  input.Set("dst_spec", "S0,R,R", "--dst-spec");
  return input;
}

std::string ErrorOf(const ReshardInput& input) {
  absl::StatusOr<v1::JobSpec> spec = BuildJobSpec(input);
  EXPECT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(spec.status().message());
}

TEST(ReshardInputTest, PlacedMeshesLeaveDevicesToTheController) {
  absl::StatusOr<v1::JobSpec> spec = BuildJobSpec(Case1());
  ASSERT_TRUE(spec.ok()) << spec.status();
  const v1::ReshardSpec& reshard = spec->reshard();
  EXPECT_THAT(reshard.tensor().shape(), ElementsAre(64, 64, 256));
  EXPECT_EQ(reshard.tensor().dtype(), v1::DTYPE_INT32);
  EXPECT_THAT(reshard.src_mesh().shape(), ElementsAre(2, 4));
  EXPECT_TRUE(reshard.src_mesh().devices().empty());
  EXPECT_EQ(reshard.src_mesh().first_host(), -1);
  EXPECT_EQ(reshard.src_spec().text(), "S0RR");
  EXPECT_EQ(reshard.dst_spec().text(), "S0RR");  // canonical form
  EXPECT_EQ(reshard.strategy(), "auto");
  EXPECT_FALSE(reshard.allow_overlap());
  EXPECT_FALSE(NeedsTopology(Case1()));
}

TEST(ReshardInputTest, DefaultsAndOptions) {
  ReshardInput input = Case1();
  input.values.erase("dtype");
  input.Set("strategy", "broadcast_lb", "--strategy");
  input.Set("allow_overlap", "true", "--allow-overlap");
  input.name = "case1";
  absl::StatusOr<v1::JobSpec> spec = BuildJobSpec(input);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "case1");
  EXPECT_EQ(spec->reshard().tensor().dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(spec->reshard().strategy(), "broadcast_lb");
  EXPECT_TRUE(spec->reshard().allow_overlap());
}

TEST(ReshardInputTest, ExplicitDevicesArePinned) {
  ReshardInput input = Case1();
  input.values.erase("dst_mesh");
  input.Set("dst_devices", "8,9,12,13", "--dst-devices");
  input.Set("dst_shape", "2x2", "--dst-shape");
  absl::StatusOr<v1::JobSpec> spec = BuildJobSpec(input);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->reshard().dst_mesh().devices(), ElementsAre(8, 9, 12, 13));
  EXPECT_THAT(spec->reshard().dst_mesh().shape(), ElementsAre(2, 2));
}

TEST(ReshardInputTest, PinnedHostMeshesResolveOnTheTopology) {
  ReshardInput input = Case1();
  input.Set("src_mesh", "2x4@0", "--src-mesh");
  input.Set("dst_mesh", "1x2@3", "--dst-mesh");
  ASSERT_TRUE(NeedsTopology(input));
  absl::StatusOr<v1::JobSpec> spec = BuildJobSpec(input);
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::Topology topology;
  topology.set_num_hosts(5);
  topology.set_devices_per_host(4);
  ASSERT_TRUE(PinMeshes(topology, input, &*spec).ok());
  EXPECT_THAT(spec->reshard().src_mesh().devices(),
              ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(spec->reshard().dst_mesh().devices(), ElementsAre(12, 13));

  // Larger than the cluster: the error names the flag.
  input.Set("dst_mesh", "2x4@4", "--dst-mesh");
  spec = BuildJobSpec(input);
  ASSERT_TRUE(spec.ok());
  const absl::Status status = PinMeshes(topology, input, &*spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), StartsWith("--dst-mesh: "));
}

TEST(ReshardInputTest, BadInputNamesTheFlag) {
  ReshardInput input = Case1();
  input.Set("src_spec", "S0XR", "--src-spec");
  EXPECT_THAT(ErrorOf(input), StartsWith("--src-spec: unknown token 'X'"));

  input = Case1();
  input.Set("dst_spec", "S0R", "--dst-spec");
  EXPECT_THAT(ErrorOf(input), StartsWith("--dst-spec: spec S0R has 2"));

  input = Case1();
  input.Set("dst_spec", "RRS1", "--dst-spec");
  input.Set("dst_mesh", "8", "--dst-mesh");
  EXPECT_THAT(ErrorOf(input), HasSubstr("--dst-spec: "));
  EXPECT_THAT(ErrorOf(input), HasSubstr("mesh axis 1"));

  input = Case1();
  input.Set("dtype", "int33", "--dtype");
  EXPECT_THAT(ErrorOf(input), StartsWith("--dtype: unknown dtype 'int33'"));

  input = Case1();
  input.Set("strategy", "fastest", "--strategy");
  EXPECT_THAT(ErrorOf(input), StartsWith("--strategy: "));
  EXPECT_THAT(ErrorOf(input), HasSubstr("meshcast"));

  input = Case1();
  input.Set("src_mesh", "2xfour", "--src-mesh");
  EXPECT_THAT(ErrorOf(input), StartsWith("--src-mesh: cannot parse"));

  input = Case1();
  input.Set("src_devices", "0,1", "--src-devices");
  EXPECT_THAT(ErrorOf(input), HasSubstr("not both"));

  input = Case1();
  input.values.erase("dst_mesh");
  input.Set("dst_devices", "0,1,2", "--dst-devices");
  input.Set("dst_shape", "2x2", "--dst-shape");
  EXPECT_THAT(ErrorOf(input), StartsWith("--dst-devices: lists 3 devices"));

  input = Case1();
  input.values.erase("shape");
  EXPECT_THAT(ErrorOf(input), StartsWith("--shape: required"));

  input = Case1();
  input.values.erase("dst_spec");
  EXPECT_THAT(ErrorOf(input), StartsWith("--dst-spec: required"));

  input = Case1();
  input.values.erase("src_mesh");
  EXPECT_THAT(ErrorOf(input), StartsWith("--src-mesh: required"));
}

TEST(ReshardInputTest, YamlFile) {
  ReshardInput input;
  const absl::Status status = ParseJobText(
      "name: from-yaml\n"
      "kind: reshard\n"
      "reshard:\n"
      "  shape: [96, 32, 170]\n"
      "  dtype: float16\n"
      "  src_mesh: 2x4\n"
      "  src_spec: S0RR\n"
      "  dst_mesh: {shape: [3, 4], devices: [8, 9, 10, 11, 12, 13, 14, 15, 16,"
      " 17, 18, 19]}\n"
      "  dst_spec: S0RR\n"
      "  strategy: meshcast\n"
      "  allow_overlap: false\n",
      /*json=*/false, "job.yaml", &input);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(input.name, "from-yaml");
  EXPECT_EQ(input.Origin("dst_devices"), "job.yaml: reshard.dst_mesh.devices");
  absl::StatusOr<v1::JobSpec> spec = BuildJobSpec(input);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->reshard().tensor().shape(), ElementsAre(96, 32, 170));
  EXPECT_EQ(spec->reshard().tensor().dtype(), v1::DTYPE_FLOAT16);
  EXPECT_EQ(spec->reshard().dst_mesh().devices_size(), 12);
  EXPECT_EQ(spec->reshard().strategy(), "meshcast");

  // Errors from file values name the key.
  input.Set("src_spec", "S2RR", "job.yaml: reshard.src_spec");
  EXPECT_THAT(ErrorOf(input), StartsWith("job.yaml: reshard.src_spec: "));
}

TEST(ReshardInputTest, JsonFileAndFlagOverride) {
  ReshardInput input;
  const absl::Status status = ParseJobText(
      R"({"name": "j", "reshard": {"shape": "64x64x64", "dtype": "int32",
          "src_mesh": "1x1", "src_spec": "RRR", "dst_mesh": "4x2",
          "dst_spec": "RRR", "allow_overlap": true}})",
      /*json=*/true, "job.json", &input);
  ASSERT_TRUE(status.ok()) << status;
  input.Set("strategy", "send_recv", "--strategy");
  absl::StatusOr<v1::JobSpec> spec = BuildJobSpec(input);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->reshard().strategy(), "send_recv");
  EXPECT_TRUE(spec->reshard().allow_overlap());
  EXPECT_THAT(spec->reshard().dst_mesh().shape(), ElementsAre(4, 2));
}

TEST(ReshardInputTest, BadFilesAreOneClearError) {
  ReshardInput input;
  absl::Status status =
      ParseJobText("reshard:\n  shpe: 4x4\n", false, "job.yaml", &input);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("job.yaml: reshard.shpe: unknown "
                         "key; allowed: shape, dtype"));
  status = ParseJobText("name: x\n", false, "job.yaml", &input);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("reshard section is missing"));
  status =
      ParseJobText("kind: allreduce\nreshard: {}\n", false, "j.yaml", &input);
  EXPECT_THAT(std::string(status.message()), HasSubstr("allowed: reshard"));
  status = ParseJobText("reshard: [1, 2\n", false, "j.yaml", &input);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("j.yaml: is not valid YAML"));
  status = ParseJobText("{\"reshard\": ", true, "j.json", &input);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("j.json: is not valid JSON"));
  status = ParseJobText("reshard:\n  src_mesh: {shape: [2, 2]}\n", false,
                        "j.yaml", &input);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("needs both shape and devices"));
  status = LoadJobFile("/nonexistent/job.yaml", &input);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("-f: cannot read job file"));
}

// A job file that lacks a required field is told by the file key, the flag
// being the other way to give it.
TEST(ReshardInputTest, MissingFieldsOfAFileNameTheFileKey) {
  const std::string full =
      "reshard:\n"
      "  shape: [64, 64]\n"
      "  src_mesh: 2x4\n"
      "  src_spec: S0R\n"
      "  dst_mesh: 2x4\n"
      "  dst_spec: RS0\n";
  const auto error_without = [&](const std::string& key) {
    std::string text = full;
    const size_t at = text.find("  " + key + ":");
    text.erase(at, text.find('\n', at) + 1 - at);
    ReshardInput input;
    const absl::Status parsed = ParseJobText(text, false, "job.yaml", &input);
    EXPECT_TRUE(parsed.ok()) << parsed;
    return ErrorOf(input);
  };
  EXPECT_THAT(error_without("dst_mesh"),
              StartsWith("job.yaml: reshard.dst_mesh: required (or "
                         "--dst-mesh): HxG (placed by the controller"));
  EXPECT_THAT(error_without("dst_mesh"),
              HasSubstr("{shape: [2, 2], devices: [0, 1, 4, 5]}"));
  EXPECT_THAT(error_without("src_spec"),
              StartsWith("job.yaml: reshard.src_spec: required (or "
                         "--src-spec), e.g. S0RR"));
  EXPECT_THAT(error_without("shape"),
              StartsWith("job.yaml: reshard.shape: required (or --shape), "
                         "e.g. shape: [1024, 1024, 512]"));
  // The flag supplies what the file lacks.
  ReshardInput input;
  ASSERT_TRUE(ParseJobText("reshard:\n  shape: [64, 64]\n  src_mesh: 2x4\n"
                           "  src_spec: S0R\n  dst_spec: RS0\n",
                           false, "job.yaml", &input)
                  .ok());
  input.Set("dst_mesh", "2x4", "--dst-mesh");
  EXPECT_TRUE(BuildJobSpec(input).ok());
}

// Meshes and specs may be written as lists; the other keys say which form
// they take.
TEST(ReshardInputTest, ListFormsOfMeshesAndSpecs) {
  ReshardInput input;
  absl::Status status = ParseJobText(
      "reshard:\n"
      "  shape: [64, 64, 64]\n"
      "  src_mesh: [2, 4]\n"
      "  src_spec: [S0, R, R]\n"
      "  dst_mesh: [8]\n"
      "  dst_spec: [R, S0, R]\n",
      false, "job.yaml", &input);
  ASSERT_TRUE(status.ok()) << status;
  absl::StatusOr<v1::JobSpec> spec = BuildJobSpec(input);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->reshard().src_mesh().shape(), ElementsAre(2, 4));
  EXPECT_TRUE(spec->reshard().src_mesh().devices().empty());
  EXPECT_EQ(spec->reshard().src_mesh().first_host(), -1);
  EXPECT_EQ(spec->reshard().src_spec().text(), "S0RR");
  EXPECT_THAT(spec->reshard().dst_mesh().shape(), ElementsAre(8));
  EXPECT_EQ(spec->reshard().dst_spec().text(), "RS0R");

  input = ReshardInput();
  status = ParseJobText(R"({"reshard": {"dtype": ["int32"]}})", true,
                        "job.json", &input);
  EXPECT_EQ(status.message(),
            "job.json: reshard.dtype: expected a single value, got a list; "
            "e.g. int32");
  status = ParseJobText("reshard:\n  src_mesh: [[2, 4]]\n", false, "job.yaml",
                        &input);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("job.yaml: reshard.src_mesh: expected a flat list "
                         "of values, e.g. [2, 4]"));
}

// A key given twice is refused, naming it, rather than the last one
// silently winning.
TEST(ReshardInputTest, DuplicateKeysAreRefused) {
  ReshardInput input;
  absl::Status status = ParseJobText(
      "reshard:\n  dtype: int32\n  shape: 4x4\n  dtype: int8\n", false,
      "job.yaml", &input);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "job.yaml: reshard.dtype: duplicate key (again on line 4); give "
            "each key once");
  status = ParseJobText("name: a\nreshard: {shape: 4x4}\nname: b\n", false,
                        "job.yaml", &input);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("job.yaml: name: duplicate key"));
  status = ParseJobText(
      "reshard:\n  src_mesh: {shape: [2], devices: [0, 1], shape: [1]}\n",
      false, "job.yaml", &input);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("job.yaml: reshard.src_mesh.shape: duplicate key"));

  status = ParseJobText(R"({"reshard": {"dtype": "int32", "dtype": "int8"}})",
                        true, "job.json", &input);
  EXPECT_EQ(status.message(),
            "job.json: reshard.dtype: duplicate key; give each key once");
  status = ParseJobText(
      R"({"name": "a", "reshard": {"src_mesh": {"shape": [2],
          "devices": [0, 1], "shape": [2]}}})",
      true, "job.json", &input);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("job.json: reshard.src_mesh.shape: duplicate key"));
  status = ParseJobText(R"({"reshard": {}, "name": "a", "reshard": {}})", true,
                        "job.json", &input);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("job.json: reshard: duplicate key"));
  // The same key in sibling mappings is no repeat.
  input = ReshardInput();
  status = ParseJobText(
      R"({"reshard": {"shape": [4, 4],
          "src_mesh": {"shape": [1, 2], "devices": [0, 1]},
          "dst_mesh": {"shape": [1, 2], "devices": [2, 3]},
          "src_spec": "S1R", "dst_spec": "RS1"}})",
      true, "job.json", &input);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(BuildJobSpec(input).ok());
}

TEST(ReshardInputTest, MultipleYamlDocumentsAreRefused) {
  ReshardInput input;
  absl::Status status = ParseJobText(
      "reshard: {shape: 4x4}\n---\nreshard: {shape: 8x8}\n", false, "job.yaml",
      &input);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("job.yaml: holds 2 YAML documents (separated by "
                         "'---'); a job file holds one job"));
  // Document markers around one job are fine.
  input = ReshardInput();
  status = ParseJobText("---\nreshard: {shape: 4x4}\n---\n", false, "job.yaml",
                        &input);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(input.Get("shape"), "4x4");
}

TEST(ReshardInputTest, InvalidJsonSaysWhere) {
  ReshardInput input;
  absl::Status status = ParseJobText(
      "{\"reshard\": {\"shape\": [4, 4],\n  \"dtype\": \"int32\",\n}}\n", true,
      "job.json", &input);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("job.json: is not valid JSON: line 3, column 1: "
                         "syntax error"));
  status = ParseJobText("{\"reshard\": [1, 2,]}", true, "job.json", &input);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("job.json: is not valid JSON: line 1, column 19: "));
  EXPECT_THAT(std::string(status.message()), HasSubstr("unexpected ']'"));
}

TEST(ReshardInputTest, ServerErrorsAreAttributedToFlags) {
  ReshardInput input = Case1();
  absl::Status status = AttributeServerError(
      absl::InvalidArgumentError("dst_mesh 3x4 needs 3 hosts with 4 free "
                                 "devices; cluster has 2 hosts x 4 devices"),
      input);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("--dst-mesh: dst_mesh 3x4 needs"));
  status = AttributeServerError(
      absl::InvalidArgumentError("reshard.tensor.dtype is not set"), input);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("--dtype: tensor.dtype"));
  status = AttributeServerError(absl::InternalError("boom"), input);
  EXPECT_EQ(status.message(), "boom");

  // A message labelled with the field does not repeat what the origin says.
  ReshardInput from_file;
  ASSERT_TRUE(ParseJobText("reshard:\n  dst_mesh: {shape: [1, 2], devices: "
                           "[98, 99]}\n",
                           false, "job.yaml", &from_file)
                  .ok());
  status = AttributeServerError(
      absl::InvalidArgumentError("reshard.dst_mesh.devices: device 99 is "
                                 "outside the cluster (ids 0..19)"),
      from_file);
  EXPECT_EQ(status.message(),
            "job.yaml: reshard.dst_mesh.devices: device 99 is outside the "
            "cluster (ids 0..19)");
}

TEST(ReshardInputTest, StrategyErrorNamesTheFlagOnce) {
  ReshardInput input = Case1();
  input.Set("strategy", "fastest", "--strategy");
  const std::string error = ErrorOf(input);
  EXPECT_THAT(error, StartsWith("--strategy: unknown strategy 'fastest'"));
  EXPECT_THAT(error, Not(HasSubstr("strategy: strategy")));
}

}  // namespace
}  // namespace meshcast::cli
