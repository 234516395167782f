#include "cli/job_file.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(JobFileTest, CollectiveYamlInTheJobSpecForm) {
  absl::StatusOr<JobFile> file = ParseJobSpecText(
      "name: fabric\n"
      "verify: sample\n"
      "collective:\n"
      "  op: all_reduce\n"
      "  mesh: {shape: [2, 4]}\n"
      "  size: 256MiB\n"
      "  dtype: DTYPE_FLOAT32\n"
      "  reduction: max\n"
      "  iterations: 5\n",
      /*json=*/false, "job.yaml");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_FALSE(file->compact);
  EXPECT_EQ(file->kind, "collective");
  EXPECT_EQ(file->name, "fabric");
  EXPECT_EQ(file->verify, v1::VERIFY_MODE_SAMPLE);
  const v1::CollectiveSpec& c = file->spec.collective();
  EXPECT_EQ(c.op(), "all_reduce");
  EXPECT_THAT(c.mesh().shape(), ElementsAre(2, 4));
  EXPECT_FALSE(c.mesh().has_first_host());
  EXPECT_EQ(c.size(), "256MiB");
  EXPECT_EQ(c.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(c.reduction(), "max");
  EXPECT_EQ(c.iterations(), 5);
}

// The issue's pipeline form: a list of stages, each with a mesh and two
// layouts as text, and a byte count with a unit.
TEST(JobFileTest, PipelineStagesInCompactNotation) {
  absl::StatusOr<JobFile> file = ParseJobSpecText(
      "pipeline:\n"
      "  stages:\n"
      "    - {mesh: \"1x2\", input_spec: \"S0,R\", output_spec: \"R,S1\"}\n"
      "    - {mesh: [1, 4], input_spec: \"R,R\"}\n"
      "  microbatches: 8\n"
      "  memory_limit_bytes: 2MiB\n"
      "  schedule: eager_1f1b\n",
      /*json=*/false, "job.yaml");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->kind, "pipeline");
  const v1::PipelineSpec& p = file->spec.pipeline();
  ASSERT_EQ(p.stages_size(), 2);
  EXPECT_THAT(p.stages(0).mesh().shape(), ElementsAre(1, 2));
  EXPECT_EQ(p.stages(0).input_spec().text(), "S0,R");
  EXPECT_EQ(p.stages(0).output_spec().text(), "R,S1");
  EXPECT_THAT(p.stages(1).mesh().shape(), ElementsAre(1, 4));
  EXPECT_EQ(p.stages(1).input_spec().text(), "R,R");
  EXPECT_EQ(p.memory_limit_bytes(), 2 << 20);
  EXPECT_EQ(p.schedule(), "eager_1f1b");

  absl::StatusOr<JobFile> bad = ParseJobSpecText(
      "pipeline: {stages: [{mesh: 1x2}], memory_limit_bytes: 2 apples}\n",
      /*json=*/false, "job.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("memory_limit_bytes"));
}

TEST(JobFileTest, CollectiveJsonWithCompactNotations) {
  absl::StatusOr<JobFile> file = ParseJobSpecText(
      R"({"name": "x", "collective": {"op": "all_gather", "mesh": "2x4@1",
          "size": "1MiB", "dtype": "bf16"}})",
      /*json=*/true, "job.json");
  ASSERT_TRUE(file.ok()) << file.status();
  const v1::CollectiveSpec& c = file->spec.collective();
  EXPECT_THAT(c.mesh().shape(), ElementsAre(2, 4));
  EXPECT_EQ(c.mesh().first_host(), 1);
  EXPECT_EQ(c.dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_FALSE(file->verify.has_value());

  file = ParseJobSpecText(
      "collective: {op: broadcast, mesh: [8], size: '4096'}\n", false,
      "job.yaml");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(file->spec.collective().mesh().shape(), ElementsAre(8));
  EXPECT_EQ(file->spec.collective().size(), "4096");
  EXPECT_FALSE(file->name.has_value());
}

TEST(JobFileTest, ReshardInTheJobSpecForm) {
  absl::StatusOr<JobFile> file = ParseJobSpecText(
      R"({"reshard": {"tensor": {"shape": [64, 64, 256], "dtype": "int32"},
          "src_mesh": {"shape": [2, 4]}, "src_spec": {"text": "S0RR"},
          "dst_mesh": "2x4@2", "dst_spec": "RS0R", "strategy": "meshcast"},
          "verify": "VERIFY_MODE_OFF"})",
      /*json=*/true, "job.json");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_FALSE(file->compact);
  EXPECT_EQ(file->kind, "reshard");
  const v1::ReshardSpec& r = file->spec.reshard();
  EXPECT_THAT(r.tensor().shape(), ElementsAre(64, 64, 256));
  EXPECT_EQ(r.tensor().dtype(), v1::DTYPE_INT32);
  EXPECT_EQ(r.src_spec().text(), "S0RR");
  EXPECT_EQ(r.dst_spec().text(), "RS0R");
  EXPECT_EQ(r.dst_mesh().first_host(), 2);
  EXPECT_EQ(file->verify, v1::VERIFY_MODE_OFF);
}

TEST(JobFileTest, CompactReshardFormStillReads) {
  absl::StatusOr<JobFile> file = ParseJobSpecText(
      "name: case6\n"
      "kind: reshard\n"
      "verify: off\n"
      "reshard:\n"
      "  shape: [96, 32, 170]\n"
      "  dtype: int32\n"
      "  src_mesh: 2x4\n"
      "  dst_mesh: {shape: [3, 4], devices: [8, 9, 10, 11, 12, 13, 14, 15, "
      "16, 17, 18, 19]}\n"
      "  src_spec: S0RR\n"
      "  dst_spec: [S0, R, R]\n"
      "  allow_overlap: false\n",
      /*json=*/false, "job.yaml");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->compact);
  EXPECT_EQ(file->kind, "reshard");
  EXPECT_EQ(file->name, "case6");
  EXPECT_EQ(file->verify, v1::VERIFY_MODE_OFF);
  EXPECT_EQ(file->reshard.Get("shape"), "96x32x170");
  EXPECT_EQ(file->reshard.Get("dst_spec"), "S0,R,R");
  EXPECT_EQ(file->reshard.Get("dst_devices"), "8,9,10,11,12,13,14,15,16,17,18,19");
  EXPECT_EQ(file->reshard.Get("allow_overlap"), "false");
  EXPECT_EQ(file->reshard.Origin("src_mesh"), "job.yaml: reshard.src_mesh");
}

// Found by fuzz/job_file_fuzz: a byte that is not UTF-8 inside a YAML
// scalar used to escape as an uncaught exception (meshctl aborted).
TEST(JobFileTest, InvalidUtf8IsAnErrorNamingTheFile) {
  for (const bool json : {false, true}) {
    const std::string text =
        json ? "{\"name\": \"tp\xff\"}" : "name: tp\ntp_overlap: {m: \xff" "64}\n";
    absl::StatusOr<JobFile> file = ParseJobSpecText(text, json, "job.yaml");
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(file.status().message()),
                StartsWith("job.yaml: is not valid UTF-8"));
  }
}

// Found by fuzz/job_file_fuzz: streams on which the YAML library reports
// empty documents forever (it used to exhaust memory) end with an answer.
TEST(JobFileTest, MalformedYamlStreamsEnd) {
  for (const std::string text :
       {std::string(","), std::string("a: 1\n,\n"),
        std::string(",\xd9\x91: 3M, k: 128, mesh: n 64,\xd9\x91: 3M, k: "
                    "128, mesh: ntial}\n"),
        // A NUL inside a flow mapping: the YAML library hands back text
        // that is not UTF-8, which the JSON library then throws on.
        std::string("n: x\nkind: retp_ovdshard\nreshard\0N{shap,\x17dtypee6 "
                    ":4x6RS0, dtype: float32}\n2}\n", 77)}) {
    absl::StatusOr<JobFile> file = ParseJobSpecText(text, false, "job.yaml");
    if (!file.ok()) {
      EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(JobFileTest, ErrorsNameTheFileAndKey) {
  // A compact-form error keeps its documented wording.
  absl::StatusOr<JobFile> file = ParseJobSpecText(
      "reshard: {shape: 4x4, colour: red}\n", false, "job.yaml");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()),
              StartsWith("job.yaml: reshard.colour: unknown key"));

  file = ParseJobSpecText(
      R"({"collective": {"op": "all_reduce", "sizee": "1MiB"}})", true,
      "job.json");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(file.status().message()), StartsWith("job.json: "));
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("sizee"));

  file = ParseJobSpecText("collective: {op: all_reduce}\nverify: most\n",
                          false, "job.yaml");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().message(),
            "job.yaml: verify: 'most' is not one of full, sample, off, checksum");

  file = ParseJobSpecText("kind: reshard\ncollective: {op: all_reduce}\n",
                          false, "job.yaml");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()),
              StartsWith("job.yaml: kind: 'reshard' but the file describes a "
                         "collective job"));

  file = ParseJobSpecText("collective: {mesh: 2x4@x}\n", false, "job.yaml");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()),
              StartsWith("job.yaml: collective.mesh: cannot parse mesh"));

  file = ParseJobSpecText("collective: {dtype: float13}\n", false, "job.yaml");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()),
              StartsWith("job.yaml: collective.dtype: "));
}

TEST(JobFileTest, MeshText) {
  absl::StatusOr<v1::DeviceMesh> mesh = ParseMeshText("2x4", "--mesh");
  ASSERT_TRUE(mesh.ok());
  EXPECT_THAT(mesh->shape(), ElementsAre(2, 4));
  EXPECT_FALSE(mesh->has_first_host());
  mesh = ParseMeshText("2x4@3", "--mesh");
  ASSERT_TRUE(mesh.ok());
  EXPECT_EQ(mesh->first_host(), 3);
  mesh = ParseMeshText("8", "--mesh");
  ASSERT_TRUE(mesh.ok());
  EXPECT_THAT(mesh->shape(), ElementsAre(8));
  for (const char* bad : {"", "2x", "0x4", "2x4@", "8@1", "axb"}) {
    mesh = ParseMeshText(bad, "--mesh");
    ASSERT_FALSE(mesh.ok()) << bad;
    EXPECT_THAT(std::string(mesh.status().message()), StartsWith("--mesh: ")) << bad;
  }
}

TEST(JobFileTest, VerifyModes) {
  EXPECT_EQ(*ParseVerifyMode("full", "--verify"), v1::VERIFY_MODE_FULL);
  EXPECT_EQ(*ParseVerifyMode("sample", "--verify"), v1::VERIFY_MODE_SAMPLE);
  EXPECT_EQ(*ParseVerifyMode("OFF", "--verify"), v1::VERIFY_MODE_OFF);
  EXPECT_FALSE(ParseVerifyMode("partial", "--verify").ok());
}

}  // namespace
}  // namespace meshcast::cli
