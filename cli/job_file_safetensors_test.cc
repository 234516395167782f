#include "cli/job_file_safetensors.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/job_file.h"
#include "cli/plan_command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace meshcast::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A folder of its own under the test's temporary directory.
std::string Folder(const std::string& name) {
  const std::string folder =
      ::testing::TempDir() + "/job_file_safetensors_test_" + name;
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  return folder;
}

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};

int64_t Bytes(const Entry& e) {
  int64_t n = e.dtype == "F32"   ? 4
              : e.dtype == "I16" ? 2
              : e.dtype == "U8"  ? 1
                                 : 2;
  for (int64_t extent : e.shape) n *= extent;
  return n;
}

// A .safetensors file of `entries` in this order: the header, then zeros.
void WriteSafetensors(const std::string& path,
                      const std::vector<Entry>& entries) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  int64_t offset = 0;
  for (const Entry& e : entries) {
    header[e.name] = {{"dtype", e.dtype},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + Bytes(e)}}};
    offset += Bytes(e);
  }
  const std::string text = header.dump();
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) {
    out.put(static_cast<char>(uint64_t{text.size()} >> (8 * i)));
  }
  out << text << std::string(offset, '\0');
}

// A small llama-like layer, in data order (not name order).
const std::vector<Entry>& Layer() {
  static const auto* entries = new std::vector<Entry>{
      {"model.embed_tokens.weight", "BF16", {64, 16}},
      {"model.layers.0.self_attn.q_proj.weight", "BF16", {16, 16}},
      {"model.layers.0.self_attn.o_proj.weight", "BF16", {16, 16}},
      {"model.layers.0.mlp.down_proj.weight", "F32", {32, 16}},
      {"model.layers.0.input_layernorm.weight", "BF16", {16}},
      {"lm_head.weight", "BF16", {16, 64}},
  };
  return *entries;
}

constexpr char kRules[] =
    "    rules:\n"
    "      - {match: \"q_proj|k_proj|v_proj\", src_spec: \"R,S1\", "
    "dst_spec: \"R,S1\"}\n"
    "      - {match: \"o_proj|down_proj\", src_spec: \"S1,R\", "
    "dst_spec: \"S1,R\"}\n"
    "      - {match: \"proj|lm_head\", src_spec: \"S0,R\", dst_spec: "
    "\"R,R\"}\n";

// A job file beside the model, reading `path` with `section` (indented
// four spaces); returns the job file's path.
std::string WriteJob(const std::string& folder, const std::string& section,
                     const std::string& extra = "") {
  const std::string job = folder + "/job.yaml";
  std::ofstream(job) << "name: weights\n"
                        "reshard_model:\n"
                        "  src_mesh: \"2x4\"\n"
                        "  dst_meshes: [\"1x4\", \"1x4\"]\n"
                        "  safetensors:\n"
                     << section << extra;
  return job;
}

struct Want {
  std::string name;
  std::vector<int64_t> shape;
  v1::DType dtype;
  std::string src, dst;
};

void ExpectTensors(const v1::ReshardModelSpec& spec,
                   const std::vector<Want>& want) {
  ASSERT_EQ(spec.tensors_size(), static_cast<int>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    const v1::ModelTensor& t = spec.tensors(static_cast<int>(i));
    EXPECT_EQ(t.name(), want[i].name) << i;
    EXPECT_THAT(t.shape(), ElementsAreArray(want[i].shape)) << t.name();
    EXPECT_EQ(t.dtype(), want[i].dtype) << t.name();
    EXPECT_EQ(t.src_spec().text(), want[i].src) << t.name();
    EXPECT_EQ(t.dst_spec().text(), want[i].dst) << t.name();
  }
}

// Rules in order (the first match wins), the default at each tensor's rank,
// data order, listed tensors after the file's.
TEST(JobFileSafetensorsTest, RulesThenDefaultInDataOrder) {
  const std::string folder = Folder("rules");
  WriteSafetensors(folder + "/model.safetensors", Layer());
  const std::string job = WriteJob(
      folder,
      std::string("    path: model.safetensors\n") + kRules +
          "    default: {src_spec: \"R\", dst_spec: \"R\"}\n",
      "  tensors:\n"
      "    - {name: extra, shape: \"8x8\", src_spec: \"S0,R\", dst_spec: "
      "\"R,S1\"}\n");
  absl::StatusOr<JobFile> file = LoadJobSpecFile(job);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->kind, "reshard_model");
  const v1::ReshardModelSpec& spec = file->spec.reshard_model();
  EXPECT_THAT(spec.src_mesh().shape(), ElementsAre(2, 4));
  ExpectTensors(
      spec, {{"model.embed_tokens.weight",
              {64, 16},
              v1::DTYPE_BFLOAT16,
              "R,R",
              "R,R"},
             {"model.layers.0.self_attn.q_proj.weight",
              {16, 16},
              v1::DTYPE_BFLOAT16,
              "R,S1",
              "R,S1"},
             {"model.layers.0.self_attn.o_proj.weight",
              {16, 16},
              v1::DTYPE_BFLOAT16,
              "S1,R",
              "S1,R"},
             {"model.layers.0.mlp.down_proj.weight",
              {32, 16},
              v1::DTYPE_FLOAT32,
              "S1,R",
              "S1,R"},
             {"model.layers.0.input_layernorm.weight",
              {16},
              v1::DTYPE_BFLOAT16,
              "R",
              "R"},
             {"lm_head.weight", {16, 64}, v1::DTYPE_BFLOAT16, "S0,R", "R,R"},
             {"extra", {8, 8}, v1::DTYPE_UNSPECIFIED, "S0,R", "R,S1"}});
}

// include keeps the tensors it finds; an all-R rule spec adapts to rank.
TEST(JobFileSafetensorsTest, IncludeFiltersAndReplicationAdaptsToRank) {
  const std::string folder = Folder("include");
  WriteSafetensors(folder + "/model.safetensors", Layer());
  absl::StatusOr<JobFile> file = LoadJobSpecFile(WriteJob(
      folder,
      "    path: model.safetensors\n"
      "    include: \"layers\\\\.0\\\\.(self_attn|input_layernorm)\"\n"
      "    rules:\n"
      "      - {match: \"norm\", src_spec: \"R,R\", dst_spec: \"R\"}\n"
      "      - {match: \".\", src_spec: \"S1,R\", dst_spec: \"R,S1\"}\n"));
  ASSERT_TRUE(file.ok()) << file.status();
  ExpectTensors(file->spec.reshard_model(),
                {{"model.layers.0.self_attn.q_proj.weight",
                  {16, 16},
                  v1::DTYPE_BFLOAT16,
                  "S1,R",
                  "R,S1"},
                 {"model.layers.0.self_attn.o_proj.weight",
                  {16, 16},
                  v1::DTYPE_BFLOAT16,
                  "S1,R",
                  "R,S1"},
                 {"model.layers.0.input_layernorm.weight",
                  {16},
                  v1::DTYPE_BFLOAT16,
                  "R",
                  "R"}});
}

// An index with two shards, read from a job file in another folder.
TEST(JobFileSafetensorsTest, IndexOfTwoShards) {
  const std::string folder = Folder("index");
  std::filesystem::create_directories(folder + "/ckpt");
  WriteSafetensors(folder + "/ckpt/model-00002-of-00002.safetensors",
                   {{"lm_head.weight", "BF16", {16, 64}}});
  WriteSafetensors(folder + "/ckpt/model-00001-of-00002.safetensors",
                   {{"embed", "F32", {64, 16}}, {"norm", "U8", {16}}});
  std::ofstream(folder + "/ckpt/model.safetensors.index.json")
      << R"({"metadata": {"total_size": 6160}, "weight_map": {
             "embed": "model-00001-of-00002.safetensors",
             "lm_head.weight": "model-00002-of-00002.safetensors",
             "norm": "model-00001-of-00002.safetensors"}})";
  absl::StatusOr<JobFile> file = LoadJobSpecFile(
      WriteJob(folder,
               "    path: ckpt/model.safetensors.index.json\n"
               "    rules: [{match: \"^embed$\", src_spec: \"S1,R\", "
               "dst_spec: \"S1,R\"}]\n"
               "    default: {src_spec: \"R\", dst_spec: \"R\"}\n"));
  ASSERT_TRUE(file.ok()) << file.status();
  ExpectTensors(
      file->spec.reshard_model(),
      {{"embed", {64, 16}, v1::DTYPE_FLOAT32, "S1,R", "S1,R"},
       {"norm", {16}, v1::DTYPE_UINT8, "R", "R"},
       {"lm_head.weight", {16, 64}, v1::DTYPE_BFLOAT16, "R,R", "R,R"}});
}

// The error of a job file beside Layer()'s model with `section`.
std::string ErrorOf(const std::string& name, const std::string& section,
                    const std::vector<Entry>& entries = Layer()) {
  const std::string folder = Folder(name);
  WriteSafetensors(folder + "/model.safetensors", entries);
  const std::string job = WriteJob(folder, section);
  absl::StatusOr<JobFile> file = LoadJobSpecFile(job);
  EXPECT_FALSE(file.ok()) << name;
  if (file.ok()) return "";
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string prefix = job + ": ";
  const std::string message(file.status().message());
  EXPECT_THAT(message, StartsWith(prefix));
  return message.substr(std::min(prefix.size(), message.size()));
}

TEST(JobFileSafetensorsTest, ErrorsNameTheFieldAndTheTensor) {
  EXPECT_EQ(ErrorOf("unmatched",
                    std::string("    path: model.safetensors\n") + kRules),
            "reshard_model.safetensors: tensor 'model.embed_tokens.weight' "
            "(" +
                ::testing::TempDir() +
                "/job_file_safetensors_test_unmatched/model.safetensors) with "
                "shape [64, 16] matches no rule and there is no default; add "
                "a rule for it or a default: {src_spec: \"R\", dst_spec: "
                "\"R\"}");
  EXPECT_THAT(
      ErrorOf("rank",
              "    path: model.safetensors\n"
              "    rules: [{match: \"weight\", src_spec: \"R\", "
              "dst_spec: \"R,S1\"}]\n"),
      StartsWith("reshard_model.safetensors.rules[0].dst_spec: 'R,S1' has 2 "
                 "dimensions but tensor "
                 "'model.layers.0.input_layernorm.weight' ("));
  EXPECT_THAT(
      ErrorOf("rank",
              "    path: model.safetensors\n"
              "    rules: [{match: \"weight\", src_spec: \"R\", "
              "dst_spec: \"R,S1\"}]\n"),
      HasSubstr("has shape [16] (1); only an all-R spec adapts to the rank: "
                "put a rule for it first (first match wins) or narrow this "
                "rule's match"));
  EXPECT_THAT(
      ErrorOf("regex",
              "    path: model.safetensors\n"
              "    default: {src_spec: R, dst_spec: R}\n"
              "    rules: [{match: \"q_proj\", src_spec: \"R,S1\", "
              "dst_spec: \"R,S1\"}, {match: \"(o_proj\", src_spec: "
              "\"R\", dst_spec: \"R\"}]\n"),
      StartsWith("reshard_model.safetensors.rules[1].match: '(o_proj' is not "
                 "an ECMAScript regular expression: "));
  EXPECT_EQ(ErrorOf("key",
                    "    path: model.safetensors\n"
                    "    rules: [{match: x, src: R, dst_spec: R}]\n"),
            "reshard_model.safetensors.rules[0].src: unknown key; allowed: "
            "match, src_spec, dst_spec");
  EXPECT_EQ(ErrorOf("missing",
                    "    path: model.safetensors\n"
                    "    default: {src_spec: R}\n"),
            "reshard_model.safetensors.default.dst_spec: required");
  EXPECT_EQ(ErrorOf("nopath", "    default: {src_spec: R, dst_spec: R}\n"),
            "reshard_model.safetensors.path: required");
  EXPECT_EQ(ErrorOf("norules", "    path: model.safetensors\n"),
            "reshard_model.safetensors: give rules, a default or both (e.g. "
            "default: {src_spec: \"R\", dst_spec: \"R\"})");
  EXPECT_EQ(ErrorOf("section", "    colour: red\n"),
            "reshard_model.safetensors.colour: unknown key; allowed: path, "
            "rules, default, include");
  EXPECT_THAT(ErrorOf("spec",
                      "    path: model.safetensors\n"
                      "    default: {src_spec: \"X1\", dst_spec: R}\n"),
              StartsWith("reshard_model.safetensors.default.src_spec: "));
  EXPECT_EQ(ErrorOf("include",
                    "    path: model.safetensors\n"
                    "    include: \"^bias$\"\n"
                    "    default: {src_spec: R, dst_spec: R}\n"),
            "reshard_model.safetensors.include: '^bias$' matches none of the "
            "6 tensors of " +
                ::testing::TempDir() +
                "/job_file_safetensors_test_include/model.safetensors");
  // A spec whose axes the mesh lacks, named with the rule.
  EXPECT_THAT(ErrorOf("axes",
                      "    path: model.safetensors\n"
                      "    default: {src_spec: R, dst_spec: \"S2,R\"}\n"),
              StartsWith("reshard_model.safetensors.default.dst_spec: 'S2,R' "
                         "for tensor 'model.embed_tokens.weight' ("));
}

TEST(JobFileSafetensorsTest, UnsupportedTensorsAreNamed) {
  const std::vector<Entry> entries = {
      {"w", "BF16", {4, 4}}, {"mask", "I16", {4}}, {"step", "U8", {}}};
  EXPECT_THAT(ErrorOf("dtype",
                      "    path: model.safetensors\n"
                      "    default: {src_spec: R, dst_spec: R}\n",
                      entries),
              StartsWith("reshard_model.safetensors: tensor 'mask' ("));
  EXPECT_THAT(ErrorOf("dtype",
                      "    path: model.safetensors\n"
                      "    default: {src_spec: R, dst_spec: R}\n",
                      entries),
              HasSubstr(") has dtype I16; allowed: BF16, F16, F32, F64, I8, "
                        "U8, I32, I64 (leave it out with include)"));
  EXPECT_THAT(ErrorOf("scalar",
                      "    path: model.safetensors\n"
                      "    include: \"^(w|step)$\"\n"
                      "    default: {src_spec: R, dst_spec: R}\n",
                      entries),
              HasSubstr(") has shape []; allowed: rank >= 1 with every "
                        "extent >= 1 (leave it out with include)"));
  // Left out, they are no trouble.
  const std::string folder = Folder("left_out");
  WriteSafetensors(folder + "/model.safetensors", entries);
  absl::StatusOr<JobFile> file =
      LoadJobSpecFile(WriteJob(folder,
                               "    path: model.safetensors\n"
                               "    include: \"^w$\"\n"
                               "    default: {src_spec: R, dst_spec: R}\n"));
  ASSERT_TRUE(file.ok()) << file.status();
  ExpectTensors(file->spec.reshard_model(),
                {{"w", {4, 4}, v1::DTYPE_BFLOAT16, "R,R", "R,R"}});
}

// The header's own errors come after the path field; text that is not a
// file reads no files.
TEST(JobFileSafetensorsTest, HeaderErrorsAndTextWithoutAFolder) {
  const std::string folder = Folder("header");
  std::ofstream(folder + "/model.safetensors") << "1234";
  const std::string job = WriteJob(folder,
                                   "    path: model.safetensors\n"
                                   "    default: {src_spec: R, dst_spec: R}\n");
  absl::StatusOr<JobFile> file = LoadJobSpecFile(job);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().message(),
            job + ": reshard_model.safetensors.path: " + folder +
                "/model.safetensors: is 4 bytes long; a safetensors file "
                "starts with an 8-byte header length");

  WriteSafetensors(folder + "/model.safetensors", {});
  file = LoadJobSpecFile(job);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().message(),
            job + ": reshard_model.safetensors.path: " + folder +
                "/model.safetensors holds no tensors");

  file = ParseJobSpecText(
      "reshard_model: {src_mesh: 1x2, dst_meshes: [1x2], safetensors: "
      "{path: model.safetensors, default: {src_spec: R, dst_spec: R}}}\n",
      /*json=*/false, "job.yaml");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().message(),
            "job.yaml: reshard_model.safetensors: is read only from a job "
            "file (meshctl -f FILE), relative to its folder");
}

// `meshctl plan -f` plans the expanded job offline.
TEST(JobFileSafetensorsTest, PlanCommandPlansTheExpandedJob) {
  const std::string folder = Folder("plan");
  WriteSafetensors(folder + "/model.safetensors", Layer());
  const std::string job =
      WriteJob(folder, std::string("    path: model.safetensors\n") + kRules +
                           "    default: {src_spec: \"R\", dst_spec: \"R\"}\n");
  const CommandResult result =
      RunPlanCommand({"-f", job, "--cluster", "4x4", "--output", "json"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  const nlohmann::json json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json["kind"], "reshard_model");
  EXPECT_GT(json["predicted_seconds"].get<double>(), 0);
  EXPECT_FALSE(json["plan"]["steps"].empty());
}

}  // namespace
}  // namespace meshcast::cli
