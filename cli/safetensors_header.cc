#include "cli/safetensors_header.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "util/status_macros.h"

namespace meshcast::cli {
namespace {

using Json = nlohmann::json;

struct DTypeBits {
  const char* name;
  int bits;
};

// Every dtype of the format, with its width.
constexpr DTypeBits kDTypes[] = {
    {"BOOL", 8},    {"F4", 4},          {"F6_E2M3", 6},     {"F6_E3M2", 6},
    {"U8", 8},      {"I8", 8},          {"F8_E5M2", 8},     {"F8_E4M3", 8},
    {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},
    {"U16", 16},    {"F16", 16},        {"BF16", 16},       {"I32", 32},
    {"U32", 32},    {"F32", 32},        {"C64", 64},        {"F64", 64},
    {"I64", 64},    {"U64", 64},
};

absl::Status Invalid(absl::string_view file, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", message));
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// JSON text -> JSON, refusing a key repeated in one object (nlohmann would
// keep the last one silently).
absl::StatusOr<Json> ParseStrictJson(absl::string_view text,
                                     const std::string& file) {
  std::vector<std::set<std::string>> seen;  // keys of the open objects
  std::optional<std::string> duplicate;
  const Json::parser_callback_t note_keys =
      [&](int depth, Json::parse_event_t event, Json& parsed) {
        const size_t level = static_cast<size_t>(depth);
        if (event == Json::parse_event_t::object_start) {
          seen.resize(level + 2);  // its keys come at depth + 1
          seen[level + 1].clear();
        } else if (event == Json::parse_event_t::key) {
          seen.resize(std::max(seen.size(), level + 1));
          const std::string key = parsed.get<std::string>();
          if (!seen[level].insert(key).second && !duplicate.has_value()) {
            duplicate = key;
          }
        }
        return true;
      };
  Json root;
  try {
    root = Json::parse(text.begin(), text.end(), note_keys);
  } catch (const Json::exception& e) {
    absl::string_view why = e.what();
    if (const size_t at = why.find("] "); at != absl::string_view::npos) {
      why.remove_prefix(at + 2);  // "[json.exception.parse_error.101] "
    }
    return Invalid(file, absl::StrCat("is not valid JSON: ", why));
  }
  if (duplicate.has_value()) {
    return Invalid(file, absl::StrCat("key '", *duplicate,
                                      "' appears twice in one object"));
  }
  return root;
}

// A JSON integer in [0, int64 max].
bool NonNegativeInt(const Json& value, int64_t* out) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return false;
    }
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (!value.is_number_integer()) return false;
  *out = value.get<int64_t>();
  return *out >= 0;
}

absl::Status ReadMetadata(const Json& value, const std::string& file) {
  if (!value.is_object()) {
    return Invalid(file, "__metadata__: expected a mapping of text to text");
  }
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!it.value().is_string()) {
      return Invalid(file, absl::StrCat("__metadata__.", it.key(),
                                        ": expected text (the format's "
                                        "metadata is text -> text)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ReadInts(const Json& value,
                                              absl::string_view origin,
                                              absl::string_view example) {
  if (!value.is_array()) {
    return Invalid(origin, absl::StrCat("expected a list of integers >= 0, "
                                        "e.g. ",
                                        example));
  }
  std::vector<int64_t> out;
  for (const Json& item : value) {
    int64_t v = 0;
    if (!NonNegativeInt(item, &v)) {
      return Invalid(origin, absl::StrCat(item.dump(),
                                          " is not an integer "
                                          ">= 0; e.g. ",
                                          example));
    }
    out.push_back(v);
  }
  return out;
}

// The bytes `shape` of `bits`-wide elements take; error if not whole bytes
// or beyond int64.
absl::StatusOr<int64_t> ShapeBytes(const std::vector<int64_t>& shape, int bits,
                                   absl::string_view origin) {
  int64_t elements = 1;
  for (int64_t extent : shape) {
    if (extent != 0 &&
        elements > std::numeric_limits<int64_t>::max() / bits / extent) {
      return Invalid(origin,
                     absl::StrCat("shape ", ShapeText(shape), " is too large"));
    }
    elements *= extent;
  }
  const int64_t total_bits = elements * bits;
  if (total_bits % 8 != 0) {
    return Invalid(origin,
                   absl::StrCat("shape ", ShapeText(shape), " of ", bits,
                                "-bit elements is not a whole number of "
                                "bytes"));
  }
  return total_bits / 8;
}

absl::StatusOr<SafetensorsTensor> ReadEntry(const std::string& name,
                                            const Json& value,
                                            const std::string& file) {
  const std::string origin = absl::StrCat(file, ": tensor '", name, "'");
  if (!value.is_object()) {
    return Invalid(origin, "expected a mapping {dtype, shape, data_offsets}");
  }
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" &&
        it.key() != "data_offsets") {
      return Invalid(origin, absl::StrCat("unknown key '", it.key(),
                                          "'; allowed: dtype, shape, "
                                          "data_offsets"));
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) {
      return Invalid(origin, absl::StrCat(key,
                                          " is missing (every entry has "
                                          "dtype, shape, data_offsets)"));
    }
  }
  SafetensorsTensor tensor;
  tensor.name = name;
  tensor.file = file;
  if (!value["dtype"].is_string()) {
    return Invalid(origin, absl::StrCat("dtype: expected one of ",
                                        SafetensorsDTypeNames()));
  }
  tensor.dtype = value["dtype"].get<std::string>();
  const int bits = SafetensorsDTypeBits(tensor.dtype);
  if (bits == 0) {
    return Invalid(origin, absl::StrCat("dtype '", tensor.dtype,
                                        "' is not one of the format's: ",
                                        SafetensorsDTypeNames()));
  }
  ASSIGN_OR_RETURN(tensor.shape,
                   ReadInts(value["shape"], absl::StrCat(origin, ": shape"),
                            "[4096, 4096]"));
  ASSIGN_OR_RETURN(
      const std::vector<int64_t> offsets,
      ReadInts(value["data_offsets"], absl::StrCat(origin, ": data_offsets"),
               "[0, 1024]"));
  if (offsets.size() != 2 || offsets[0] > offsets[1]) {
    return Invalid(origin,
                   absl::StrCat("data_offsets ", ShapeText(offsets),
                                " is not [begin, end] with begin <= end"));
  }
  tensor.begin = offsets[0];
  tensor.end = offsets[1];
  ASSIGN_OR_RETURN(const int64_t bytes, ShapeBytes(tensor.shape, bits, origin));
  if (tensor.end - tensor.begin != bytes) {
    return Invalid(origin,
                   absl::StrCat("data_offsets ", ShapeText(offsets), " hold ",
                                tensor.end - tensor.begin, " bytes; shape ",
                                ShapeText(tensor.shape), " of ", tensor.dtype,
                                " needs ", bytes));
  }
  return tensor;
}

// The tensors, sorted, must cover [0, data_bytes) exactly.
absl::Status CheckTiling(const std::vector<SafetensorsTensor>& tensors,
                         uint64_t data_bytes, const std::string& file) {
  int64_t cursor = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (t.begin != cursor) {
      return Invalid(
          file, absl::StrCat("tensor '", t.name, "': data_offsets [", t.begin,
                             ", ", t.end, "] ",
                             t.begin < cursor ? "overlap" : "leave a gap after",
                             " the tensors before it, which end at ", cursor,
                             " (the tensors must tile the data)"));
    }
    cursor = t.end;
  }
  if (static_cast<uint64_t>(cursor) != data_bytes) {
    return Invalid(file,
                   absl::StrCat("the tensors end at byte ", cursor,
                                " of the data, but the file holds ", data_bytes,
                                " bytes of data after its "
                                "header (truncated or padded?)"));
  }
  return absl::OkStatus();
}

// Opens a regular file and returns its size.
absl::StatusOr<uint64_t> OpenRegular(const std::string& path,
                                     std::ifstream& in) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status)) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: no such file"));
  }
  if (!std::filesystem::is_regular_file(status)) {
    return Invalid(path, "is not a regular file");
  }
  const uintmax_t size = std::filesystem::file_size(path, error);
  in.open(path, std::ios::binary);
  if (error || !in) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  return static_cast<uint64_t>(size);
}

absl::StatusOr<std::string> ReadBytes(std::ifstream& in, uint64_t count,
                                      const std::string& path) {
  std::string bytes(count, '\0');
  if (!in.read(bytes.data(), static_cast<std::streamsize>(count))) {
    return Invalid(path, absl::StrCat("cannot read ", count, " bytes"));
  }
  return bytes;
}

// Shard names are relative paths inside the index's folder.
absl::Status CheckShardName(const std::string& tensor, const std::string& shard,
                            const std::string& index) {
  const std::filesystem::path path(shard);
  bool climbs = false;
  for (const auto& part : path) climbs = climbs || part == "..";
  if (shard.empty() || path.is_absolute() || climbs) {
    return Invalid(index,
                   absl::StrCat("weight_map.", tensor, ": '", shard,
                                "' is not a file name relative to the index "
                                "(e.g. model-00001-of-00002.safetensors)"));
  }
  return absl::OkStatus();
}

// weight_map: shard -> the tensors the index puts in it.
absl::StatusOr<std::map<std::string, std::set<std::string>>> ReadWeightMap(
    const Json& root, const std::string& path) {
  if (!root.is_object() || !root.contains("weight_map") ||
      !root["weight_map"].is_object() || root["weight_map"].empty()) {
    return Invalid(path,
                   "expected a safetensors index: {\"weight_map\": {tensor: "
                   "shard file, ...}} with at least one tensor");
  }
  std::map<std::string, std::set<std::string>> shards;
  const Json& map = root["weight_map"];
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it.value().is_string()) {
      return Invalid(path, absl::StrCat("weight_map.", it.key(),
                                        ": expected the shard's file name"));
    }
    const std::string shard = it.value().get<std::string>();
    RETURN_IF_ERROR(CheckShardName(it.key(), shard, path));
    shards[shard].insert(it.key());
  }
  return shards;
}

// One shard's header against what weight_map says it holds.
absl::Status CheckShard(const std::vector<SafetensorsTensor>& tensors,
                        const std::string& shard,
                        const std::set<std::string>& listed,
                        const Json& weight_map, const std::string& index) {
  std::set<std::string> held;
  for (const SafetensorsTensor& t : tensors) {
    held.insert(t.name);
    if (listed.count(t.name) > 0) continue;
    if (weight_map.contains(t.name)) {
      return Invalid(index, absl::StrCat("weight_map puts '", t.name, "' in ",
                                         weight_map[t.name].get<std::string>(),
                                         ", but ", shard, " holds it"));
    }
    return Invalid(index, absl::StrCat(shard, " holds '", t.name,
                                       "', which weight_map does not list"));
  }
  for (const std::string& name : listed) {
    if (held.count(name) == 0) {
      return Invalid(index, absl::StrCat("weight_map puts '", name, "' in ",
                                         shard, ", which does not hold it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int SafetensorsDTypeBits(absl::string_view dtype) {
  for (const DTypeBits& d : kDTypes) {
    if (dtype == d.name) return d.bits;
  }
  return 0;
}

std::string SafetensorsDTypeNames() {
  std::vector<std::string> names;
  for (const DTypeBits& d : kDTypes) names.push_back(d.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<std::vector<SafetensorsTensor>> ParseSafetensorsHeader(
    absl::string_view json, uint64_t data_bytes, const std::string& file) {
  if (json.empty() || json.front() != '{') {
    return Invalid(file,
                   "the header is not a JSON object (it must start "
                   "with '{')");
  }
  ASSIGN_OR_RETURN(const Json root, ParseStrictJson(json, file));
  std::vector<SafetensorsTensor> tensors;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      RETURN_IF_ERROR(ReadMetadata(it.value(), file));
      continue;
    }
    ASSIGN_OR_RETURN(SafetensorsTensor tensor,
                     ReadEntry(it.key(), it.value(), file));
    tensors.push_back(std::move(tensor));
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.begin, a.end, a.name) <
                     std::tie(b.begin, b.end, b.name);
            });
  RETURN_IF_ERROR(CheckTiling(tensors, data_bytes, file));
  return tensors;
}

absl::StatusOr<std::vector<SafetensorsTensor>> ReadSafetensorsFile(
    const std::string& path) {
  std::ifstream in;
  ASSIGN_OR_RETURN(const uint64_t size, OpenRegular(path, in));
  if (size < 8) {
    return Invalid(path, absl::StrCat("is ", size,
                                      " bytes long; a "
                                      "safetensors file starts with an "
                                      "8-byte header length"));
  }
  ASSIGN_OR_RETURN(const std::string prefix, ReadBytes(in, 8, path));
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) {
    header_bytes = (header_bytes << 8) | static_cast<unsigned char>(prefix[i]);
  }
  if (header_bytes > kMaxSafetensorsHeaderBytes) {
    return Invalid(
        path, absl::StrCat("header length ", header_bytes,
                           " is over the bound of ", kMaxSafetensorsHeaderBytes,
                           " bytes (not a safetensors file?)"));
  }
  if (header_bytes > size - 8) {
    return Invalid(path, absl::StrCat("header length ", header_bytes,
                                      " runs past the end of the file (", size,
                                      " bytes)"));
  }
  ASSIGN_OR_RETURN(const std::string header, ReadBytes(in, header_bytes, path));
  return ParseSafetensorsHeader(header, size - 8 - header_bytes, path);
}

absl::StatusOr<std::vector<SafetensorsTensor>> ReadSafetensorsIndex(
    const std::string& path) {
  std::ifstream in;
  ASSIGN_OR_RETURN(const uint64_t size, OpenRegular(path, in));
  if (size > kMaxSafetensorsHeaderBytes) {
    return Invalid(path, absl::StrCat("is ", size,
                                      " bytes; an index is at "
                                      "most ",
                                      kMaxSafetensorsHeaderBytes));
  }
  ASSIGN_OR_RETURN(const std::string text, ReadBytes(in, size, path));
  ASSIGN_OR_RETURN(const Json root, ParseStrictJson(text, path));
  using ShardMap = std::map<std::string, std::set<std::string>>;
  ASSIGN_OR_RETURN(const ShardMap shards, ReadWeightMap(root, path));
  const std::filesystem::path folder =
      std::filesystem::path(path).parent_path();
  std::vector<SafetensorsTensor> out;
  for (const auto& [shard, listed] : shards) {
    ASSIGN_OR_RETURN(std::vector<SafetensorsTensor> tensors,
                     ReadSafetensorsFile((folder / shard).string()));
    RETURN_IF_ERROR(
        CheckShard(tensors, shard, listed, root["weight_map"], path));
    for (SafetensorsTensor& t : tensors) out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::vector<SafetensorsTensor>> ReadSafetensors(
    const std::string& path) {
  if (absl::EndsWithIgnoreCase(path, ".json")) {
    return ReadSafetensorsIndex(path);
  }
  return ReadSafetensorsFile(path);
}

}  // namespace meshcast::cli
