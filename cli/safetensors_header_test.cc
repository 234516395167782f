#include "cli/safetensors_header.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshcast::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A folder of its own under the test's temporary directory.
std::string Folder(const std::string& name) {
  const std::string folder =
      ::testing::TempDir() + "/safetensors_header_test_" + name;
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  return folder;
}

// `length` as the 8-byte little-endian prefix, then `header`, then
// `data_bytes` zero bytes.
void WriteRaw(const std::string& path, uint64_t length,
              const std::string& header, uint64_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(length >> (8 * i)));
  out << header << std::string(data_bytes, '\0');
}

// A well-formed file: the header's own length, then its data.
void WriteSafetensors(const std::string& path, const std::string& header,
                      uint64_t data_bytes) {
  WriteRaw(path, header.size(), header, data_bytes);
}

std::string ErrorOf(const std::string& path) {
  absl::StatusOr<std::vector<SafetensorsTensor>> tensors =
      ReadSafetensors(path);
  EXPECT_FALSE(tensors.ok()) << path << " read";
  if (tensors.ok()) return "";
  EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(tensors.status().message());
}

// A header's tensors come back in data order, whatever order the JSON
// lists them in, with the metadata skipped.
TEST(SafetensorsHeaderTest, ReadsTheHeaderInDataOrder) {
  const std::string path = Folder("order") + "/model.safetensors";
  // Padded with spaces to 8 bytes, as the format's writer does.
  WriteSafetensors(path,
                   R"({"__metadata__": {"format": "pt"},
                       "a.weight": {"dtype": "F32", "shape": [2, 3],
                                    "data_offsets": [8, 32]},
                       "b.bias": {"dtype": "BF16", "shape": [4],
                                  "data_offsets": [0, 8]},
                       "c.empty": {"dtype": "I64", "shape": [0, 5],
                                   "data_offsets": [32, 32]}}     )",
                   32);
  absl::StatusOr<std::vector<SafetensorsTensor>> tensors =
      ReadSafetensors(path);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 3u);
  const SafetensorsTensor& b = (*tensors)[0];
  EXPECT_EQ(b.name, "b.bias");
  EXPECT_EQ(b.dtype, "BF16");
  EXPECT_THAT(b.shape, ElementsAre(4));
  EXPECT_EQ(b.begin, 0);
  EXPECT_EQ(b.end, 8);
  EXPECT_EQ(b.file, path);
  const SafetensorsTensor& a = (*tensors)[1];
  EXPECT_EQ(a.name, "a.weight");
  EXPECT_EQ(a.dtype, "F32");
  EXPECT_THAT(a.shape, ElementsAre(2, 3));
  EXPECT_EQ(a.begin, 8);
  EXPECT_EQ(a.end, 32);
  EXPECT_EQ((*tensors)[2].name, "c.empty");
  EXPECT_THAT((*tensors)[2].shape, ElementsAre(0, 5));
}

// Only the header is read: a (sparse) 1 GiB file of one tensor reads at
// once.
TEST(SafetensorsHeaderTest, NeverReadsTheData) {
  const std::string path = Folder("sparse") + "/big.safetensors";
  const std::string header =
      R"({"w": {"dtype": "BF16", "shape": [16384, 32768],)"
      R"( "data_offsets": [0, 1073741824]}})";
  WriteSafetensors(path, header, 0);
  std::filesystem::resize_file(path, 8 + header.size() + (uint64_t{1} << 30));
  absl::StatusOr<std::vector<SafetensorsTensor>> tensors =
      ReadSafetensorsFile(path);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 1u);
  EXPECT_THAT((*tensors)[0].shape, ElementsAre(16384, 32768));
}

TEST(SafetensorsHeaderTest, MalformedFilesAreRefusedByName) {
  const std::string folder = Folder("malformed");
  const std::string path = folder + "/bad.safetensors";
  const std::string ok_entry =
      R"("w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";

  std::ofstream(path, std::ios::binary) << "12345";
  EXPECT_EQ(ErrorOf(path),
            path +
                ": is 5 bytes long; a safetensors file starts with an "
                "8-byte header length");

  WriteRaw(path, uint64_t{200} << 20, "{}", 0);
  EXPECT_EQ(ErrorOf(path), path +
                               ": header length 209715200 is over the "
                               "bound of 104857600 bytes (not a "
                               "safetensors file?)");

  WriteRaw(path, 64, "{}", 0);
  EXPECT_EQ(ErrorOf(path), path +
                               ": header length 64 runs past the end of "
                               "the file (10 bytes)");

  WriteSafetensors(path, "{" + ok_entry, 8);
  EXPECT_THAT(ErrorOf(path), StartsWith(path + ": is not valid JSON: "));

  WriteSafetensors(path, "[1, 2]", 0);
  EXPECT_EQ(ErrorOf(path), path +
                               ": the header is not a JSON object (it "
                               "must start with '{')");

  WriteSafetensors(path, "{" + ok_entry + ", " + ok_entry + "}", 8);
  EXPECT_EQ(ErrorOf(path), path + ": key 'w' appears twice in one object");

  WriteSafetensors(path, R"({"w": {"dtype": "F32", "shape": [2]}})", 8);
  EXPECT_EQ(ErrorOf(path), path +
                               ": tensor 'w': data_offsets is missing "
                               "(every entry has dtype, shape, "
                               "data_offsets)");

  WriteSafetensors(path,
                   R"({"w": {"dtype": "F32", "shape": [2], "offsets": 1,)"
                   R"( "data_offsets": [0, 8]}})",
                   8);
  EXPECT_EQ(ErrorOf(path), path +
                               ": tensor 'w': unknown key 'offsets'; "
                               "allowed: dtype, shape, data_offsets");

  WriteSafetensors(path,
                   R"({"w": {"dtype": "F12", "shape": [2],)"
                   R"( "data_offsets": [0, 8]}})",
                   8);
  EXPECT_THAT(ErrorOf(path),
              StartsWith(path + ": tensor 'w': dtype 'F12' is not one of the "
                                "format's: BOOL, F4, "));

  WriteSafetensors(path,
                   R"({"w": {"dtype": "F32", "shape": [2, -1],)"
                   R"( "data_offsets": [0, 8]}})",
                   8);
  EXPECT_EQ(ErrorOf(path), path +
                               ": tensor 'w': shape: -1 is not an integer "
                               ">= 0; e.g. [4096, 4096]");

  WriteSafetensors(path,
                   R"({"w": {"dtype": "F32", "shape": [3],)"
                   R"( "data_offsets": [0, 8]}})",
                   8);
  EXPECT_EQ(ErrorOf(path), path +
                               ": tensor 'w': data_offsets [0, 8] hold 8 "
                               "bytes; shape [3] of F32 needs 12");

  WriteSafetensors(path,
                   R"({"w": {"dtype": "F32", "shape": [2],)"
                   R"( "data_offsets": [8, 0]}})",
                   8);
  EXPECT_EQ(ErrorOf(path), path +
                               ": tensor 'w': data_offsets [8, 0] is not "
                               "[begin, end] with begin <= end");

  WriteSafetensors(path, R"({"__metadata__": {"step": 7}, )" + ok_entry + "}",
                   8);
  EXPECT_EQ(ErrorOf(path), path +
                               ": __metadata__.step: expected text (the "
                               "format's metadata is text -> text)");

  // 3 four-bit elements are not whole bytes.
  WriteSafetensors(path,
                   R"({"w": {"dtype": "F4", "shape": [3],)"
                   R"( "data_offsets": [0, 2]}})",
                   2);
  EXPECT_EQ(ErrorOf(path), path +
                               ": tensor 'w': shape [3] of 4-bit elements "
                               "is not a whole number of bytes");
}

// The tensors must tile the data: no gap, no overlap, nothing after.
TEST(SafetensorsHeaderTest, OffsetsMustTileTheData) {
  const std::string path = Folder("tiling") + "/bad.safetensors";
  const std::string a =
      R"("a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]})";
  WriteSafetensors(
      path,
      "{" + a +
          R"(, "b": {"dtype": "U8", "shape": [4], "data_offsets": [6, 10]}})",
      10);
  EXPECT_EQ(ErrorOf(path),
            path +
                ": tensor 'b': data_offsets [6, 10] leave a gap after the "
                "tensors before it, which end at 4 (the tensors must tile "
                "the data)");
  WriteSafetensors(
      path,
      "{" + a +
          R"(, "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
      6);
  EXPECT_THAT(ErrorOf(path), HasSubstr("tensor 'b': data_offsets [2, 6] "
                                       "overlap the tensors before it"));
  WriteSafetensors(path, "{" + a + "}", 5);
  EXPECT_EQ(ErrorOf(path),
            path +
                ": the tensors end at byte 4 of the data, but the file "
                "holds 5 bytes of data after its header (truncated or "
                "padded?)");
  WriteSafetensors(path, "{" + a + "}", 4);
  EXPECT_TRUE(ReadSafetensors(path).ok());
}

TEST(SafetensorsHeaderTest, MissingFilesAndFolders) {
  const std::string folder = Folder("missing");
  absl::StatusOr<std::vector<SafetensorsTensor>> tensors =
      ReadSafetensors(folder + "/none.safetensors");
  ASSERT_FALSE(tensors.ok());
  EXPECT_EQ(tensors.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(tensors.status().message(),
            folder + "/none.safetensors: cannot open: no such file");
  EXPECT_EQ(ErrorOf(folder), folder + ": is not a regular file");
}

// An index: each shard's header once, shards in name order.
TEST(SafetensorsHeaderTest, IndexReadsEveryShard) {
  const std::string folder = Folder("index");
  WriteSafetensors(folder + "/model-00002-of-00002.safetensors",
                   R"({"lm_head": {"dtype": "BF16", "shape": [8, 4],)"
                   R"( "data_offsets": [0, 64]}})",
                   64);
  WriteSafetensors(folder + "/model-00001-of-00002.safetensors",
                   R"({"norm": {"dtype": "F32", "shape": [4],)"
                   R"( "data_offsets": [16, 32]},)"
                   R"( "embed": {"dtype": "F32", "shape": [2, 2],)"
                   R"( "data_offsets": [0, 16]}})",
                   32);
  const std::string index = folder + "/model.safetensors.index.json";
  std::ofstream(index) << R"({"metadata": {"total_size": 96},
      "weight_map": {"embed": "model-00001-of-00002.safetensors",
                     "lm_head": "model-00002-of-00002.safetensors",
                     "norm": "model-00001-of-00002.safetensors"}})";
  absl::StatusOr<std::vector<SafetensorsTensor>> tensors =
      ReadSafetensors(index);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 3u);
  EXPECT_EQ((*tensors)[0].name, "embed");
  EXPECT_EQ((*tensors)[0].file, folder + "/model-00001-of-00002.safetensors");
  EXPECT_EQ((*tensors)[1].name, "norm");
  EXPECT_EQ((*tensors)[2].name, "lm_head");
  EXPECT_EQ((*tensors)[2].dtype, "BF16");
  EXPECT_THAT((*tensors)[2].shape, ElementsAre(8, 4));
  EXPECT_EQ((*tensors)[2].file, folder + "/model-00002-of-00002.safetensors");
}

TEST(SafetensorsHeaderTest, IndexMustAgreeWithItsShards) {
  const std::string folder = Folder("index_bad");
  WriteSafetensors(folder + "/a.safetensors",
                   R"({"x": {"dtype": "U8", "shape": [1],)"
                   R"( "data_offsets": [0, 1]}})",
                   1);
  WriteSafetensors(folder + "/two.safetensors",
                   R"({"p": {"dtype": "U8", "shape": [1],)"
                   R"( "data_offsets": [0, 1]},)"
                   R"( "q": {"dtype": "U8", "shape": [1],)"
                   R"( "data_offsets": [1, 2]}})",
                   2);
  const std::string index = folder + "/model.safetensors.index.json";
  const auto write = [&](const std::string& text) {
    std::ofstream(index) << text;
    return index;
  };
  EXPECT_TRUE(
      ReadSafetensors(write(R"({"weight_map": {"x": "a.safetensors"}})")).ok());
  EXPECT_EQ(ErrorOf(write(R"({"weight_map": {"x": "a.safetensors",
                                             "z": "a.safetensors"}})")),
            index +
                ": weight_map puts 'z' in a.safetensors, which does not "
                "hold it");
  EXPECT_EQ(ErrorOf(write(R"({"weight_map": {"x": "two.safetensors",
                                             "p": "a.safetensors",
                                             "q": "two.safetensors"}})")),
            index +
                ": weight_map puts 'x' in two.safetensors, but "
                "a.safetensors holds it");
  EXPECT_EQ(ErrorOf(write(R"({"weight_map": {"p": "two.safetensors"}})")),
            index +
                ": two.safetensors holds 'q', which weight_map does not "
                "list");
  for (const std::string shard : {"../a.safetensors", "/a.safetensors", ""}) {
    EXPECT_EQ(ErrorOf(write(R"({"weight_map": {"x": ")" + shard + R"("}})")),
              index + ": weight_map.x: '" + shard +
                  "' is not a file name relative to the index (e.g. "
                  "model-00001-of-00002.safetensors)");
  }
  EXPECT_EQ(ErrorOf(write(R"({"metadata": {"total_size": 1}})")),
            index +
                ": expected a safetensors index: {\"weight_map\": "
                "{tensor: shard file, ...}} with at least one tensor");
  EXPECT_EQ(ErrorOf(write(R"({"weight_map": {"x": 1}})")),
            index + ": weight_map.x: expected the shard's file name");
  EXPECT_THAT(ErrorOf(write(R"({"weight_map": {"x": "a.safetensors")")),
              StartsWith(index + ": is not valid JSON: "));
  // A shard's own error names the shard.
  WriteRaw(folder + "/short.safetensors", 99, "{}", 0);
  EXPECT_THAT(ErrorOf(write(R"({"weight_map": {"x": "short.safetensors"}})")),
              StartsWith(folder + "/short.safetensors: header length 99"));
  absl::StatusOr<std::vector<SafetensorsTensor>> gone =
      ReadSafetensors(write(R"({"weight_map": {"x": "gone.safetensors"}})"));
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(gone.status().message()),
              HasSubstr("gone.safetensors: cannot open"));
}

TEST(SafetensorsHeaderTest, DTypeWidths) {
  EXPECT_EQ(SafetensorsDTypeBits("BF16"), 16);
  EXPECT_EQ(SafetensorsDTypeBits("F8_E4M3"), 8);
  EXPECT_EQ(SafetensorsDTypeBits("F4"), 4);
  EXPECT_EQ(SafetensorsDTypeBits("I64"), 64);
  EXPECT_EQ(SafetensorsDTypeBits("bf16"), 0);
  EXPECT_THAT(SafetensorsDTypeNames(), HasSubstr("BF16, I32, U32, F32"));
}

}  // namespace
}  // namespace meshcast::cli
