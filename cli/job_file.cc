#include "cli/job_file.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/job_file_safetensors.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "planner/kinds/job_kind.h"
#include "planner/tensor.h"
#include "proto/dtype_convert.h"
#include "util/bytes_text.h"
#include "util/status_macros.h"

namespace meshcast::cli {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(const std::string& origin, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", message));
}

// "2x4" -> {2, 4}; false when an entry is not a positive integer.
bool ParseExtents(absl::string_view text, std::vector<int>* extents) {
  extents->clear();
  for (absl::string_view part : absl::StrSplit(text, 'x')) {
    int extent = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &extent) ||
        extent < 1) {
      return false;
    }
    extents->push_back(extent);
  }
  return !extents->empty();
}

Json MeshJson(const v1::DeviceMesh& mesh) {
  Json out{{"shape", std::vector<int>(mesh.shape().begin(),
                                      mesh.shape().end())}};
  if (mesh.has_first_host()) out["first_host"] = mesh.first_host();
  return out;
}

// Rewrites the compact notations of the JobSpec form into the JSON mapping
// (see job_file.h). `key` is the key `value` sits under; `path` names it in
// errors.
absl::Status Normalize(const std::string& key, const std::string& path,
                       Json& value) {
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      RETURN_IF_ERROR(Normalize(it.key(),
                                path.empty() ? it.key()
                                             : absl::StrCat(path, ".", it.key()),
                                it.value()));
    }
    return absl::OkStatus();
  }
  if (key == "dst_meshes" && value.is_array()) {
    // The replicas of a reshard_model job: each as a mesh ("1x2", [1, 2]).
    for (size_t i = 0; i < value.size(); ++i) {
      RETURN_IF_ERROR(
          Normalize("mesh", absl::StrCat(path, "[", i, "]"), value[i]));
    }
    return absl::OkStatus();
  }
  if (value.is_array() && !value.empty() && value.front().is_object()) {
    // A list of objects (pipeline.stages): each element as the key's.
    for (size_t i = 0; i < value.size(); ++i) {
      RETURN_IF_ERROR(
          Normalize(key, absl::StrCat(path, "[", i, "]"), value[i]));
    }
    return absl::OkStatus();
  }
  if (key == "mesh" || key == "src_mesh" || key == "dst_mesh") {
    if (value.is_string()) {
      ASSIGN_OR_RETURN(v1::DeviceMesh mesh,
                       ParseMeshText(value.get<std::string>(), path));
      value = MeshJson(mesh);
    } else if (value.is_array()) {
      value = Json{{"shape", value}};  // [2, 4]: placed by the controller
    }
    return absl::OkStatus();
  }
  if ((key == "src_spec" || key == "dst_spec" || key == "input_spec" ||
       key == "output_spec") &&
      value.is_string()) {
    value = Json{{"text", value}};
    return absl::OkStatus();
  }
  if (key == "dtype" && value.is_string() &&
      !absl::StartsWith(value.get<std::string>(), "DTYPE_")) {
    absl::StatusOr<DType> dtype = ParseDType(value.get<std::string>());
    if (!dtype.ok()) return Invalid(path, dtype.status().message());
    value = v1::DType_Name(DTypeToProto(*dtype));
    return absl::OkStatus();
  }
  if (absl::EndsWith(key, "_bytes") && value.is_string()) {
    // A byte count with a unit: 8GiB, 512MiB (util/bytes_text.h).
    absl::StatusOr<int64_t> bytes = ParseBytes(value.get<std::string>());
    if (!bytes.ok()) return Invalid(path, bytes.status().message());
    value = *bytes;
    return absl::OkStatus();
  }
  if (key == "shape" && value.is_string()) {
    // A tensor's shape as 64x64x256.
    std::vector<int> extents;
    if (ParseExtents(value.get<std::string>(), &extents)) value = extents;
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

// Takes reshard_model.safetensors out of `root`, for ExpandSafetensors
// once the rest is a spec.
std::optional<Json> TakeSafetensors(Json& root) {
  const auto model = root.find("reshard_model");
  if (model == root.end() || !model->is_object()) return std::nullopt;
  const auto section = model->find("safetensors");
  if (section == model->end()) return std::nullopt;
  Json taken = std::move(*section);
  model->erase("safetensors");
  return taken;
}

// Puts the safetensors section's tensors into the spec.
absl::Status ExpandSafetensorsSection(
    const Json& section, const std::string& label,
    const std::optional<std::string>& folder, JobFile* file) {
  if (!folder.has_value()) {
    return Invalid(absl::StrCat(label, ": reshard_model.safetensors"),
                   "is read only from a job file (meshctl -f FILE), "
                   "relative to its folder");
  }
  const absl::Status expanded = ExpandSafetensors(
      section, *folder, file->spec.mutable_reshard_model());
  if (expanded.ok()) return expanded;
  return absl::Status(expanded.code(),
                      absl::StrCat(label, ": ", expanded.message()));
}

// The form-1 reading of `root`.
absl::Status ReadSpecForm(Json root, const std::string& label,
                          const std::optional<std::string>& folder,
                          JobFile* file) {
  std::string kind;
  if (root.contains("kind")) {
    if (!root["kind"].is_string()) {
      return Invalid(absl::StrCat(label, ": kind"),
                     "expected the name of a job kind, e.g. reshard");
    }
    kind = root["kind"].get<std::string>();
    root.erase("kind");
  }
  if (root.contains("verify") && root["verify"].is_string() &&
      !absl::StartsWith(root["verify"].get<std::string>(), "VERIFY_MODE_")) {
    ASSIGN_OR_RETURN(
        const v1::VerifyMode mode,
        ParseVerifyMode(root["verify"].get<std::string>(),
                        absl::StrCat(label, ": verify")));
    root["verify"] = v1::VerifyMode_Name(mode);
  }
  const std::optional<Json> safetensors = TakeSafetensors(root);
  {
    absl::Status normalized = Normalize("", "", root);
    if (!normalized.ok()) {
      return Invalid(label, normalized.message());
    }
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const google::protobuf::util::Status parsed =
      google::protobuf::util::JsonStringToMessage(root.dump(), &file->spec,
                                                  options);
  if (!parsed.ok()) {
    return Invalid(label,
                   absl::StrCat("not a meshcast.v1.JobSpec (protobuf JSON "
                                "mapping, proto field names): ",
                                std::string(parsed.message())));
  }
  absl::StatusOr<const JobKind*> spec_kind = FindJobKind(file->spec);
  if (!spec_kind.ok()) {
    return Invalid(label, absl::StrCat(spec_kind.status().message(),
                                       " (e.g. collective: {op: all_reduce, "
                                       "mesh: 2x4, size: 256MiB})"));
  }
  file->kind = (*spec_kind)->name();
  if (!kind.empty() && kind != file->kind) {
    return Invalid(absl::StrCat(label, ": kind"),
                   absl::StrCat("'", kind, "' but the file describes a ",
                                file->kind, " job"));
  }
  if (safetensors.has_value()) {
    RETURN_IF_ERROR(
        ExpandSafetensorsSection(*safetensors, label, folder, file));
  }
  if (root.contains("name")) file->name = file->spec.name();
  if (root.contains("verify")) file->verify = file->spec.verify();
  return absl::OkStatus();
}

// True for the compact reshard form: a reshard section without "tensor".
bool IsCompactForm(const Json& root) {
  if (!root.is_object()) return false;
  for (const JobKind* kind : AllJobKinds()) {
    if (kind->name() != "reshard" && root.contains(kind->name())) return false;
  }
  if (root.contains("kind") && root["kind"] != "reshard") return false;
  const auto reshard = root.find("reshard");
  // Without a reshard section the compact form's reader says what is
  // missing.
  if (reshard == root.end()) return true;
  return !reshard->is_object() || !reshard->contains("tensor");
}

}  // namespace

absl::StatusOr<v1::VerifyMode> ParseVerifyMode(const std::string& text,
                                               const std::string& origin) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "full") return v1::VERIFY_MODE_FULL;
  if (lower == "sample") return v1::VERIFY_MODE_SAMPLE;
  if (lower == "off") return v1::VERIFY_MODE_OFF;
  if (lower == "checksum") return v1::VERIFY_MODE_CHECKSUM;
  return Invalid(origin, absl::StrCat("'", text,
                                      "' is not one of full, sample, off, "
                                      "checksum"));
}

absl::StatusOr<v1::DeviceMesh> ParseMeshText(const std::string& text,
                                             const std::string& origin) {
  absl::string_view body = absl::StripAsciiWhitespace(text);
  v1::DeviceMesh mesh;
  const size_t at = body.find('@');
  if (at != absl::string_view::npos) {
    int host = -1;
    if (!absl::SimpleAtoi(body.substr(at + 1), &host) || host < 0) {
      return Invalid(origin,
                     absl::StrCat("cannot parse mesh '", text,
                                  "': bad first host '", body.substr(at + 1),
                                  "'; expected HxG, HxG@h or N, e.g. 2x4 "
                                  "(placed by the controller) or 2x4@1"));
    }
    mesh.set_first_host(host);
    body = body.substr(0, at);
  }
  std::vector<int> extents;
  if (!ParseExtents(body, &extents)) {
    return Invalid(origin, absl::StrCat("cannot parse mesh '", text,
                                        "'; expected HxG, HxG@h or N, e.g. "
                                        "2x4 (placed by the controller), "
                                        "2x4@1 (hosts 1 and 2) or 8"));
  }
  if (mesh.has_first_host() && extents.size() != 2) {
    return Invalid(origin,
                   absl::StrCat("a pinned mesh is HxG@h (two extents), got '",
                                text, "'"));
  }
  for (int extent : extents) mesh.add_shape(extent);
  return mesh;
}

namespace {

absl::StatusOr<JobFile> ParseJobSpecTextOrThrow(
    const std::string& text, bool json, const std::string& label,
    const std::optional<std::string>& folder) {
  JobFile file;
  file.label = label;
  // The compact form reads YAML scalars as text (its documented behaviour);
  // the JSON mapping needs typed ones, so YAML is parsed for the form it is.
  ASSIGN_OR_RETURN(Json typed,
                   ParseJobDocument(text, json, label, /*typed_scalars=*/true));
  if (!typed.is_object()) {
    return Invalid(label,
                   "expected a mapping: a JobSpec ({name, verify, collective "
                   "| reshard}) or the compact reshard form ({name, kind, "
                   "reshard})");
  }
  if (!IsCompactForm(typed)) {
    RETURN_IF_ERROR(ReadSpecForm(std::move(typed), label, folder, &file));
    return file;
  }
  file.compact = true;
  file.kind = "reshard";
  ASSIGN_OR_RETURN(Json root,
                   json ? std::move(typed)
                        : ParseJobDocument(text, json, label,
                                           /*typed_scalars=*/false));
  if (root.contains("verify")) {
    const Json& verify = root["verify"];
    if (!verify.is_string()) {
      return Invalid(absl::StrCat(label, ": verify"),
                     "expected one of full, sample, off, checksum");
    }
    ASSIGN_OR_RETURN(file.verify,
                     ParseVerifyMode(verify.get<std::string>(),
                                     absl::StrCat(label, ": verify")));
    root.erase("verify");
  }
  RETURN_IF_ERROR(ReadCompactJob(root, label, &file.reshard));
  if (root.contains("name")) file.name = file.reshard.name;
  return file;
}

}  // namespace

absl::StatusOr<JobFile> ParseJobSpecText(
    const std::string& text, bool json, const std::string& label,
    const std::optional<std::string>& folder) {
  // The JSON and YAML libraries report some problems by exception (e.g. a
  // YAML escape that decodes to bytes that are not UTF-8, found by
  // fuzz/job_file_fuzz); none may leave this module.
  try {
    return ParseJobSpecTextOrThrow(text, json, label, folder);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": cannot be read: ", e.what()));
  }
}

absl::StatusOr<JobFile> LoadJobSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("-f: cannot read job file '", path, "'"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const std::string folder = std::filesystem::path(path).parent_path();
  return ParseJobSpecText(text, IsJsonJobFile(path, text), path, folder);
}

}  // namespace meshcast::cli
