#include "cli/reshard_input.h"

#include <algorithm>
#include <exception>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "planner/mesh.h"
#include "planner/sharding.h"
#include "planner/strategy.h"
#include "planner/tensor.h"
#include "proto/dtype_convert.h"
#include "planner/topology.h"
#include "util/status_macros.h"
#include "util/text_safety.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace meshcast::cli {
namespace {

using Json = nlohmann::json;

// Meshes larger than this many devices are certainly typos.
constexpr int64_t kMaxMeshDevices = 1 << 20;

std::string FlagName(const std::string& field) {
  return absl::StrCat("--", absl::StrReplaceAll(field, {{"_", "-"}}));
}

// `status` with `origin` (flag or file key) in front. Planner messages
// sometimes start with a field name of their own ("strategy: ...",
// "mesh: ..."); the origin replaces it rather than repeating it.
absl::Status Tagged(const std::string& origin, const absl::Status& status,
                    absl::string_view field = "") {
  if (status.ok()) return status;
  absl::string_view message = status.message();
  if (!field.empty()) absl::ConsumePrefix(&message, absl::StrCat(field, ": "));
  absl::ConsumePrefix(&message, "mesh: ");
  absl::ConsumePrefix(&message, "devices: ");
  return absl::Status(status.code(), absl::StrCat(origin, ": ", message));
}

absl::Status Invalid(const std::string& origin, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", message));
}

// A required field that was not given. With a job file the error names the
// file key (the flag may still supply it); without one, the flag.
// `flag_form` and `file_form` say what to write in each.
absl::Status Missing(const ReshardInput& input, const std::string& field,
                     absl::string_view flag_form, absl::string_view file_form) {
  if (input.file.empty()) {
    return Invalid(FlagName(field), absl::StrCat("required", flag_form));
  }
  return Invalid(absl::StrCat(input.file, ": reshard.", field),
                 absl::StrCat("required (or ", FlagName(field), ")",
                              file_form));
}

absl::StatusOr<std::vector<int>> ParseIntList(const std::string& text,
                                              absl::string_view separators,
                                              int min_value,
                                              const std::string& origin,
                                              absl::string_view example) {
  std::vector<int> values;
  for (absl::string_view part :
       absl::StrSplit(text, absl::ByAnyChar(separators))) {
    part = absl::StripAsciiWhitespace(part);
    int value = 0;
    if (!absl::SimpleAtoi(part, &value) || value < min_value) {
      return Invalid(
          origin, absl::StrCat("cannot parse '", text, "': bad entry '", part,
                               "'; expected integers >= ", min_value, ", e.g. ",
                               example));
    }
    values.push_back(value);
  }
  return values;
}

// A mesh as written: its shape, its explicit devices (or none) and the
// pinned first host of an HxG@h mesh (or -1).
struct MeshText {
  std::vector<int> shape;
  std::vector<int> devices;
  int pinned_host = -1;
  std::string origin;  // flag or key, for errors
};

absl::StatusOr<MeshText> ParseMeshField(const ReshardInput& input,
                                        const std::string& side) {
  const std::string mesh_field = side + "_mesh";
  const std::string devices_field = side + "_devices";
  const std::string shape_field = side + "_shape";
  const bool has_mesh = input.Has(mesh_field);
  const bool has_devices = input.Has(devices_field);
  const bool has_shape = input.Has(shape_field);
  MeshText mesh;
  if (has_mesh && (has_devices || has_shape)) {
    return Invalid(input.Origin(mesh_field),
                   absl::StrCat("give either ", FlagName(mesh_field), " or ",
                                FlagName(devices_field), " with ",
                                FlagName(shape_field), ", not both"));
  }
  if (has_mesh) {
    mesh.origin = input.Origin(mesh_field);
    const std::string text = input.Get(mesh_field);
    absl::string_view body = text;
    const size_t at = body.find('@');
    if (at != absl::string_view::npos) {
      const std::string host_text(body.substr(at + 1));
      if (!absl::SimpleAtoi(host_text, &mesh.pinned_host) ||
          mesh.pinned_host < 0) {
        return Invalid(mesh.origin,
                       absl::StrCat("cannot parse mesh '", text,
                                    "': bad first host '", host_text,
                                    "'; expected HxG, HxG@h or N, e.g. 2x4 "
                                    "(placed by the controller) or 2x4@1"));
      }
      body = body.substr(0, at);
    }
    ASSIGN_OR_RETURN(mesh.shape,
                     ParseIntList(std::string(body), "x", 1, mesh.origin,
                                  "2x4 (placed), 2x4@1 (pinned) or 8"));
    if (mesh.pinned_host >= 0 && mesh.shape.size() != 2) {
      return Invalid(mesh.origin,
                     absl::StrCat("a pinned mesh is HxG@h (two extents), got '",
                                  text, "'"));
    }
  } else if (has_devices && has_shape) {
    mesh.origin = input.Origin(devices_field);
    ASSIGN_OR_RETURN(mesh.shape,
                     ParseIntList(input.Get(shape_field), "x", 1,
                                  input.Origin(shape_field), "2x2"));
    ASSIGN_OR_RETURN(mesh.devices, ParseIntList(input.Get(devices_field), ",",
                                                0, mesh.origin, "0,1,4,5"));
  } else if (has_devices || has_shape) {
    const std::string& given = has_devices ? devices_field : shape_field;
    const std::string& missing = has_devices ? shape_field : devices_field;
    return Invalid(
        input.Origin(given),
        absl::StrCat(FlagName(missing), " is required with ", FlagName(given),
                     ", e.g. ", FlagName(devices_field), " 0,1,4,5 ",
                     FlagName(shape_field), " 2x2"));
  } else {
    constexpr absl::string_view kForms =
        ": HxG (placed by the controller, e.g. 2x4), HxG@h (pinned, e.g. "
        "2x4@0), or ";
    return Missing(input, mesh_field,
                   absl::StrCat(kForms, FlagName(devices_field), " with ",
                                FlagName(shape_field)),
                   absl::StrCat(kForms,
                                "a device list {shape: [2, 2], devices: [0, "
                                "1, 4, 5]}"));
  }
  int64_t count = 1;
  for (int extent : mesh.shape) {
    count *= extent;
    if (count > kMaxMeshDevices) {
      return Invalid(mesh.origin, absl::StrCat("mesh has more than ",
                                               kMaxMeshDevices, " devices"));
    }
  }
  if (!mesh.devices.empty()) {
    if (static_cast<int64_t>(mesh.devices.size()) != count) {
      return Invalid(
          mesh.origin,
          absl::StrCat("lists ", mesh.devices.size(), " devices but shape ",
                       absl::StrJoin(mesh.shape, "x"), " needs ", count));
    }
    std::vector<int> sorted = mesh.devices;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return Invalid(mesh.origin, "lists a device twice");
    }
  }
  return mesh;
}

v1::DeviceMesh MeshToProto(const MeshText& mesh) {
  v1::DeviceMesh proto;
  for (int extent : mesh.shape) proto.add_shape(extent);
  for (int device : mesh.devices) proto.add_devices(device);
  proto.set_first_host(mesh.devices.empty() ? mesh.pinned_host : -1);
  return proto;
}

absl::StatusOr<ShardingSpec> ParseSpecField(const ReshardInput& input,
                                            const std::string& field,
                                            const TensorSpec& tensor,
                                            const MeshText& mesh) {
  if (!input.Has(field)) {
    constexpr absl::string_view kForm =
        ", e.g. S0RR (one entry per tensor dimension: R, S0, S1 or S01)";
    return Missing(input, field, kForm, kForm);
  }
  absl::StatusOr<ShardingSpec> spec = ShardingSpec::Parse(input.Get(field));
  if (!spec.ok()) return Tagged(input.Origin(field), spec.status());
  DeviceMesh shape_only;
  shape_only.shape = mesh.shape;
  RETURN_IF_ERROR(
      Tagged(input.Origin(field), spec->Validate(tensor, shape_only)));
  return spec;
}

absl::StatusOr<bool> ParseBool(const std::string& text,
                               const std::string& origin) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "true" || lower == "yes" || lower == "1") return true;
  if (lower == "false" || lower == "no" || lower == "0" || lower.empty()) {
    return false;
  }
  return Invalid(origin, absl::StrCat("'", text,
                                      "' is not a boolean; allowed: true, "
                                      "false"));
}

// ---- job files ----------------------------------------------------------

// "reshard.src_mesh" from the keys leading to a value ("[]" marks a list
// item: "a[].b").
std::string KeyPath(const std::vector<std::string>& keys) {
  return absl::StrReplaceAll(absl::StrJoin(keys, "."), {{".[]", "[]"}});
}

absl::Status DuplicateKey(const std::string& label,
                          const std::vector<std::string>& keys,
                          absl::string_view where) {
  return Invalid(absl::StrCat(label, ": ", KeyPath(keys)),
                 absl::StrCat("duplicate key", where,
                              "; give each key once"));
}

// YAML scalars carry no type; numbers and booleans become their text so that
// YAML and JSON files go through the same checks. yaml-cpp keeps every entry
// of a mapping that repeats a key, so a repeat is refused here instead of
// one value silently replacing the other. Throws what yaml-cpp throws (e.g.
// for a key that is not a scalar).
// A plain (unquoted) YAML scalar as the JSON value YAML 1.2's core schema
// reads it: null, a boolean, an integer, a number, else text. Quoted
// scalars stay text ("2" is a string).
Json TypedScalar(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (node.Tag() != "?") return text;  // quoted: "!"
  if (text.empty() || text == "~" || text == "null" || text == "Null" ||
      text == "NULL") {
    return nullptr;
  }
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  int64_t integer = 0;
  if (absl::SimpleAtoi(text, &integer)) return integer;
  double number = 0;
  if (text.find_first_not_of("0123456789+-.eE") == std::string::npos &&
      absl::SimpleAtod(text, &number)) {
    return number;
  }
  return text;
}

absl::StatusOr<Json> YamlToJson(const YAML::Node& node,
                                const std::string& label,
                                std::vector<std::string>& keys, bool typed) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      if (typed) return TypedScalar(node);
      return node.Scalar();
    case YAML::NodeType::Sequence: {
      Json array = Json::array();
      for (const YAML::Node& item : node) {
        ASSIGN_OR_RETURN(Json value, YamlToJson(item, label, keys, typed));
        array.push_back(std::move(value));
      }
      return array;
    }
    case YAML::NodeType::Map: {
      Json object = Json::object();
      for (const auto& entry : node) {
        const std::string key = entry.first.as<std::string>();
        keys.push_back(key);
        if (object.contains(key)) {
          return DuplicateKey(
              label, keys,
              absl::StrCat(" (again on line ", entry.first.Mark().line + 1,
                           ")"));
        }
        ASSIGN_OR_RETURN(object[key],
                         YamlToJson(entry.second, label, keys, typed));
        keys.pop_back();
      }
      return object;
    }
    default:
      return nullptr;
  }
}

// Records, per document of a YAML stream, whether its root is null —
// without building the documents.
class DocumentCounter : public YAML::EventHandler {
 public:
  std::vector<bool> null_roots;

  void OnDocumentStart(const YAML::Mark&) override { depth_ = 0; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override { Root(true); }
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { Root(false); }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Root(false);
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Root(false);
    ++depth_;
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Root(false);
    ++depth_;
  }
  void OnMapEnd() override { --depth_; }

 private:
  void Root(bool null) {
    if (depth_ == 0) null_roots.push_back(null);
  }
  int depth_ = 0;
};

// The documents of `text`, at most `limit` of them. Not YAML::LoadAll:
// Debian's yaml-cpp (0.7) loops forever on some malformed streams (it keeps
// reporting empty documents), eating memory until the process dies; a
// bound turns that into an error.
std::vector<bool> NullRootsOfDocuments(const std::string& text, int limit) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentCounter counter;
  for (int i = 0; i < limit && parser.HandleNextDocument(counter); ++i) {
  }
  return counter.null_roots;
}

absl::StatusOr<Json> ParseYamlText(const std::string& text,
                                   const std::string& label, bool typed) {
  constexpr int kMaxDocuments = 16;
  // yaml-cpp reports errors by exception; they stop here.
  try {
    std::vector<bool> null_roots = NullRootsOfDocuments(text, kMaxDocuments);
    // A trailing "---" adds an empty document; anything more is a second
    // job that would otherwise be dropped without a word.
    while (null_roots.size() > 1 && null_roots.back()) null_roots.pop_back();
    if (null_roots.size() > 1) {
      return Invalid(
          label,
          absl::StrCat("holds ",
                       null_roots.size() >= kMaxDocuments
                           ? absl::StrCat(kMaxDocuments, " or more")
                           : absl::StrCat(null_roots.size()),
                       " YAML documents (separated by '---'); a job "
                       "file holds one job: submit each from its own "
                       "file"));
    }
    if (null_roots.empty()) return Json(nullptr);
    const YAML::Node document = YAML::Load(text);
    std::vector<std::string> keys;
    return YamlToJson(document, label, keys, typed);
  } catch (const std::exception& e) {
    return Invalid(label, absl::StrCat("is not valid YAML: ", e.what()));
  }
}

// "line L, column C" of the 1-based byte offset `byte` in `text`.
std::string LineColumn(const std::string& text, size_t byte) {
  const size_t end = std::min(byte > 0 ? byte - 1 : 0, text.size());
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return absl::StrCat("line ", line, ", column ", end - line_start + 1);
}

absl::StatusOr<Json> ParseJsonText(const std::string& text,
                                   const std::string& label) {
  // nlohmann keeps the last of repeated keys; the parser callback sees every
  // key, so a repeat is noted (per object, by nesting depth) and refused
  // after the parse.
  std::vector<std::set<std::string>> seen;  // keys of the open objects
  std::vector<std::string> keys;            // path to the current key
  std::optional<std::vector<std::string>> duplicate;
  const Json::parser_callback_t note_keys =
      [&](int depth, Json::parse_event_t event, Json& parsed) {
        const size_t level = static_cast<size_t>(depth);
        switch (event) {
          case Json::parse_event_t::object_start:
            // Its keys are reported at depth + 1.
            seen.resize(level + 2);
            seen[level + 1].clear();
            break;
          case Json::parse_event_t::array_start:
            // An object inside it is an item, not a key.
            keys.resize(level);
            keys.push_back("[]");
            break;
          case Json::parse_event_t::key: {
            // The key at depth L is the L-th element of the path.
            seen.resize(std::max(seen.size(), level + 1));
            keys.resize(std::max<size_t>(level, 1));
            keys.back() = parsed.get<std::string>();
            if (!seen[level].insert(keys.back()).second &&
                !duplicate.has_value()) {
              duplicate = keys;
            }
            break;
          }
          default:
            break;
        }
        return true;
      };
  Json root;
  try {
    root = Json::parse(text, note_keys);
  } catch (const Json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1,
    // column 9: syntax error ..."; keep the explanation, with the position
    // worked out from the byte offset.
    absl::string_view why = e.what();
    if (const size_t syntax = why.find("syntax error");
        syntax != absl::string_view::npos) {
      why.remove_prefix(syntax);
    }
    return Invalid(label, absl::StrCat("is not valid JSON: ",
                                       LineColumn(text, e.byte), ": ", why));
  } catch (const Json::exception& e) {
    return Invalid(label, absl::StrCat("is not valid JSON: ", e.what()));
  }
  if (duplicate.has_value()) return DuplicateKey(label, *duplicate, "");
  return root;
}

// Scalars as text, whatever JSON type they have. `example` shows the
// accepted form in the error for a list or mapping.
absl::StatusOr<std::string> ScalarText(const Json& value,
                                       const std::string& origin,
                                       absl::string_view example = "") {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
  if (value.is_number()) return value.dump();
  const char* got = value.is_array()    ? "a list"
                    : value.is_object() ? "a mapping"
                                        : "nothing";
  return Invalid(origin, absl::StrCat("expected a single value, got ", got,
                                      example.empty() ? "" : "; e.g. ",
                                      example));
}

// A list of integers ([1, 2] or "1,2" or "1x2") as text joined by `join`.
absl::StatusOr<std::string> ListText(const Json& value,
                                     const std::string& origin,
                                     absl::string_view join) {
  if (!value.is_array()) return ScalarText(value, origin);
  std::vector<std::string> parts;
  for (const Json& item : value) {
    if (item.is_array() || item.is_object() || item.is_null()) {
      return Invalid(origin, "expected a flat list of values, e.g. [2, 4]");
    }
    ASSIGN_OR_RETURN(std::string text, ScalarText(item, origin));
    parts.push_back(std::move(text));
  }
  if (parts.empty()) return Invalid(origin, "the list is empty");
  return absl::StrJoin(parts, join);
}

std::string AllowedReshardKeys() {
  std::vector<std::string> keys;
  for (const char* field : kReshardFields) {
    const std::string key = field;
    if (absl::EndsWith(key, "_devices") || absl::EndsWith(key, "_shape")) {
      continue;  // file meshes carry devices inside the mesh entry
    }
    keys.push_back(key);
  }
  return absl::StrJoin(keys, ", ");
}

absl::Status ReadReshardSection(const Json& reshard, const std::string& label,
                                ReshardInput* input) {
  if (!reshard.is_object()) {
    return Invalid(
        absl::StrCat(label, ": reshard"),
        absl::StrCat("expected a mapping with keys ", AllowedReshardKeys()));
  }
  for (auto it = reshard.begin(); it != reshard.end(); ++it) {
    const std::string key = it.key();
    const std::string origin = absl::StrCat(label, ": reshard.", key);
    const Json& value = it.value();
    if (key == "src_mesh" || key == "dst_mesh") {
      const std::string side = key.substr(0, 3);
      if (value.is_object()) {
        for (auto m = value.begin(); m != value.end(); ++m) {
          if (m.key() != "shape" && m.key() != "devices") {
            return Invalid(absl::StrCat(origin, ".", m.key()),
                           "unknown key; allowed: shape, devices");
          }
        }
        if (!value.contains("shape") || !value.contains("devices")) {
          return Invalid(origin,
                         "a mesh mapping needs both shape and devices, e.g. "
                         "{shape: [2, 2], devices: [0, 1, 4, 5]}");
        }
        ASSIGN_OR_RETURN(std::string shape,
                         ListText(value["shape"], origin + ".shape", "x"));
        ASSIGN_OR_RETURN(std::string devices,
                         ListText(value["devices"], origin + ".devices", ","));
        input->Set(side + "_shape", shape, origin + ".shape");
        input->Set(side + "_devices", devices, origin + ".devices");
      } else {
        // "2x4", "2x4@0", or the extents as a list ([2, 4]: placed).
        ASSIGN_OR_RETURN(std::string text, ListText(value, origin, "x"));
        input->Set(key, text, origin);
      }
      continue;
    }
    if (key == "shape") {
      ASSIGN_OR_RETURN(std::string text, ListText(value, origin, "x"));
      input->Set(key, text, origin);
      continue;
    }
    if (key == "src_spec" || key == "dst_spec") {
      // "S0RR", "S0,R,R" or one list entry per dimension ([S0, R, R]).
      ASSIGN_OR_RETURN(std::string text, ListText(value, origin, ","));
      input->Set(key, text, origin);
      continue;
    }
    if (key == "dtype" || key == "strategy" || key == "allow_overlap" ||
        key == "src_buffer" || key == "dst_buffer") {
      ASSIGN_OR_RETURN(std::string text,
                       ScalarText(value, origin,
                                  key == "dtype"      ? "int32"
                                  : key == "strategy" ? "meshcast"
                                  : key == "allow_overlap"
                                      ? "false"
                                      : "train/weights"));
      input->Set(key, text, origin);
      continue;
    }
    return Invalid(
        origin, absl::StrCat("unknown key; allowed: ", AllowedReshardKeys()));
  }
  return absl::OkStatus();
}

}  // namespace

void ReshardInput::Set(const std::string& field, std::string value,
                       std::string origin) {
  values[field] = std::move(value);
  origins[field] = std::move(origin);
}

void ReshardInput::Erase(const std::string& field) {
  values.erase(field);
  origins.erase(field);
}

bool ReshardInput::Has(const std::string& field) const {
  return values.count(field) > 0;
}

std::string ReshardInput::Get(const std::string& field) const {
  auto it = values.find(field);
  return it == values.end() ? "" : it->second;
}

std::string ReshardInput::Origin(const std::string& field) const {
  auto it = origins.find(field);
  return it == origins.end() ? FlagName(field) : it->second;
}

absl::StatusOr<nlohmann::json> ParseJobDocument(const std::string& text,
                                               bool json,
                                               const std::string& label,
                                               bool typed_scalars) {
  // JSON and YAML are text: bytes that are not UTF-8 are refused here, by
  // name, rather than surfacing later as a library exception.
  if (!IsValidUtf8(text)) {
    return Invalid(label, "is not valid UTF-8 text (JSON and YAML must be)");
  }
  if (json) return ParseJsonText(text, label);
  return ParseYamlText(text, label, typed_scalars);
}

bool IsJsonJobFile(const std::string& path, const std::string& text) {
  const absl::string_view stripped = absl::StripLeadingAsciiWhitespace(text);
  return absl::EndsWithIgnoreCase(path, ".json") ||
         absl::StartsWith(stripped, "{");
}

absl::Status ParseJobText(const std::string& text, bool json,
                          const std::string& label, ReshardInput* input) {
  ASSIGN_OR_RETURN(const Json root,
                   ParseJobDocument(text, json, label, /*typed_scalars=*/false));
  return ReadCompactJob(root, label, input);
}

absl::Status ReadCompactJob(const nlohmann::json& root,
                            const std::string& label, ReshardInput* input) {
  input->file = label;
  if (!root.is_object()) {
    return Invalid(label,
                   "expected a mapping with keys name, kind and reshard");
  }
  bool has_reshard = false;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& key = it.key();
    const std::string origin = absl::StrCat(label, ": ", key);
    if (key == "name") {
      ASSIGN_OR_RETURN(input->name, ScalarText(it.value(), origin));
    } else if (key == "kind") {
      ASSIGN_OR_RETURN(std::string kind, ScalarText(it.value(), origin));
      if (kind != "reshard") {
        return Invalid(origin, absl::StrCat("unknown kind '", kind,
                                            "'; allowed: reshard"));
      }
    } else if (key == "reshard") {
      has_reshard = true;
      RETURN_IF_ERROR(ReadReshardSection(it.value(), label, input));
    } else {
      return Invalid(origin, "unknown key; allowed: name, kind, reshard");
    }
  }
  if (!has_reshard) {
    return Invalid(label, "the reshard section is missing");
  }
  return absl::OkStatus();
}

absl::Status LoadJobFile(const std::string& path, ReshardInput* input) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("-f: cannot read job file '", path, "'"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  return ParseJobText(text, IsJsonJobFile(path, text), path, input);
}

absl::StatusOr<v1::JobSpec> BuildJobSpec(const ReshardInput& input) {
  v1::JobSpec spec;
  spec.set_name(input.name);
  v1::ReshardSpec* reshard = spec.mutable_reshard();

  if (!input.Has("shape")) {
    return Missing(input, "shape", ", e.g. --shape 1024x1024x512",
                   ", e.g. shape: [1024, 1024, 512]");
  }
  TensorSpec tensor;
  absl::StatusOr<std::vector<int64_t>> shape = ParseShape(input.Get("shape"));
  if (!shape.ok()) return Tagged(input.Origin("shape"), shape.status());
  tensor.shape = *std::move(shape);
  if (input.Has("dtype")) {
    absl::StatusOr<DType> dtype = ParseDType(input.Get("dtype"));
    if (!dtype.ok()) return Tagged(input.Origin("dtype"), dtype.status());
    tensor.dtype = *dtype;
  }
  for (int64_t extent : tensor.shape)
    reshard->mutable_tensor()->add_shape(extent);
  reshard->mutable_tensor()->set_dtype(DTypeToProto(tensor.dtype));

  ASSIGN_OR_RETURN(MeshText src, ParseMeshField(input, "src"));
  ASSIGN_OR_RETURN(MeshText dst, ParseMeshField(input, "dst"));
  ASSIGN_OR_RETURN(ShardingSpec src_spec,
                   ParseSpecField(input, "src_spec", tensor, src));
  ASSIGN_OR_RETURN(ShardingSpec dst_spec,
                   ParseSpecField(input, "dst_spec", tensor, dst));
  *reshard->mutable_src_mesh() = MeshToProto(src);
  *reshard->mutable_dst_mesh() = MeshToProto(dst);
  reshard->mutable_src_spec()->set_text(src_spec.ToString());
  reshard->mutable_dst_spec()->set_text(dst_spec.ToString());

  std::string strategy = "auto";
  if (input.Has("strategy")) {
    absl::StatusOr<Strategy> parsed = ParseStrategy(input.Get("strategy"));
    if (!parsed.ok()) {
      return Tagged(input.Origin("strategy"), parsed.status(), "strategy");
    }
    strategy = StrategyName(*parsed);
  }
  reshard->set_strategy(strategy);
  if (input.Has("allow_overlap")) {
    ASSIGN_OR_RETURN(bool allow, ParseBool(input.Get("allow_overlap"),
                                           input.Origin("allow_overlap")));
    reshard->set_allow_overlap(allow);
  }
  // User buffers (docs/user_buffers.md); the kind checks the pair.
  if (input.Has("src_buffer")) reshard->set_src_buffer(input.Get("src_buffer"));
  if (input.Has("dst_buffer")) reshard->set_dst_buffer(input.Get("dst_buffer"));
  return spec;
}

bool NeedsTopology(const ReshardInput& input) {
  for (const char* field : {"src_mesh", "dst_mesh"}) {
    if (input.Has(field) && absl::StrContains(input.Get(field), "@")) {
      return true;
    }
  }
  return false;
}

absl::Status PinMeshes(const v1::Topology& topology, const ReshardInput& input,
                       v1::JobSpec* spec) {
  Topology planner_topology;
  planner_topology.num_hosts = topology.num_hosts();
  planner_topology.devices_per_host = topology.devices_per_host();
  for (const std::string side : {"src", "dst"}) {
    const std::string field = side + "_mesh";
    if (!input.Has(field) || !absl::StrContains(input.Get(field), "@")) {
      continue;
    }
    if (topology.num_hosts() < 1 || topology.devices_per_host() < 1) {
      return absl::FailedPreconditionError(
          absl::StrCat(input.Origin(field),
                       ": the cluster has no workers yet, so a pinned mesh "
                       "cannot be placed"));
    }
    absl::StatusOr<DeviceMesh> mesh =
        ParseMesh(input.Get(field), planner_topology, input.Origin(field));
    if (!mesh.ok()) return mesh.status();
    v1::DeviceMesh* proto = side == "src"
                                ? spec->mutable_reshard()->mutable_src_mesh()
                                : spec->mutable_reshard()->mutable_dst_mesh();
    proto->clear_devices();
    for (int device : mesh->devices) proto->add_devices(device);
    proto->set_first_host(-1);
  }
  return absl::OkStatus();
}

absl::Status AttributeServerError(const absl::Status& status,
                                  const ReshardInput& input) {
  if (status.ok()) return status;
  absl::string_view message = status.message();
  absl::ConsumePrefix(&message, "reshard.");
  struct Prefix {
    const char* server_field;
    const char* input_field;
  };
  // The controller names proto fields; longest prefixes first.
  static constexpr Prefix kPrefixes[] = {
      {"tensor.dtype", "dtype"}, {"tensor", "shape"},
      {"src_mesh", "src_mesh"},  {"dst_mesh", "dst_mesh"},
      {"src_spec", "src_spec"},  {"dst_spec", "dst_spec"},
      {"strategy", "strategy"},
  };
  for (const Prefix& prefix : kPrefixes) {
    if (!absl::StartsWith(message, prefix.server_field)) continue;
    std::string field = prefix.input_field;
    if (absl::EndsWith(field, "_mesh") && !input.Has(field)) {
      field = field.substr(0, 3) + "_devices";
    }
    // A message that starts with the field as a label ("dst_mesh.devices:
    // device 99 ...") loses the label: the origin names the field already.
    if (const size_t colon = message.find(": ");
        colon != absl::string_view::npos &&
        message.substr(0, colon).find(' ') == absl::string_view::npos) {
      message.remove_prefix(colon + 2);
    }
    return absl::Status(status.code(),
                        absl::StrCat(input.Origin(field), ": ", message));
  }
  return status;
}

}  // namespace meshcast::cli
