#include "cli/job_file_safetensors.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/safetensors_header.h"
#include "planner/mesh.h"
#include "planner/sharding.h"
#include "planner/tensor.h"
#include "proto/dtype_convert.h"
#include "util/status_macros.h"

namespace meshcast::cli {
namespace {

using Json = nlohmann::json;

constexpr char kField[] = "reshard_model.safetensors";
constexpr char kAllowedDTypes[] = "BF16, F16, F32, F64, I8, U8, I32, I64";

absl::Status Invalid(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

// A regular expression and the text it was written as.
struct Pattern {
  std::string text;
  std::regex regex;
  bool Finds(const std::string& name) const {
    return std::regex_search(name, regex);
  }
};

// Specs for the tensors a rule (or the default) applies to.
struct Rule {
  std::string field;             // reshard_model.safetensors.rules[1]
  std::optional<Pattern> match;  // none for the default
  std::string src_text, dst_text;
  ShardingSpec src, dst;
};

struct Source {
  std::string path;
  std::vector<Rule> rules;
  std::optional<Rule> fallback;  // `default`
  std::optional<Pattern> include;
};

absl::StatusOr<std::string> Text(const Json& value, const std::string& field,
                                 absl::string_view expected) {
  if (!value.is_string()) {
    return Invalid(field, absl::StrCat("expected ", expected));
  }
  return value.get<std::string>();
}

absl::StatusOr<Pattern> ReadPattern(const Json& value,
                                    const std::string& field) {
  Pattern pattern;
  ASSIGN_OR_RETURN(pattern.text,
                   Text(value, field,
                        "a regular expression over tensor names as text, "
                        "e.g. \"q_proj|k_proj\""));
  try {
    pattern.regex = std::regex(pattern.text, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return Invalid(field, absl::StrCat("'", pattern.text,
                                       "' is not an ECMAScript regular "
                                       "expression: ",
                                       e.what()));
  }
  return pattern;
}

absl::StatusOr<ShardingSpec> ReadSpec(const Json& value,
                                      const std::string& field,
                                      std::string* text) {
  ASSIGN_OR_RETURN(*text, Text(value, field,
                               "a sharding spec as text, e.g. \"R,S1\" or "
                               "\"R\""));
  absl::StatusOr<ShardingSpec> spec = ShardingSpec::Parse(*text);
  if (!spec.ok()) return Invalid(field, spec.status().message());
  return spec;
}

// Keys outside `allowed` are errors listing them; those in `required` must
// be there.
absl::Status CheckKeys(const Json& value, const std::string& field,
                       const std::vector<std::string>& allowed,
                       const std::vector<std::string>& required) {
  if (!value.is_object()) {
    return Invalid(field, absl::StrCat("expected a mapping {",
                                       absl::StrJoin(allowed, ", "), "}"));
  }
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end()) {
      return Invalid(
          absl::StrCat(field, ".", it.key()),
          absl::StrCat("unknown key; allowed: ", absl::StrJoin(allowed, ", ")));
    }
  }
  for (const std::string& key : required) {
    if (!value.contains(key)) {
      return Invalid(absl::StrCat(field, ".", key), "required");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Rule> ReadRule(const Json& value, const std::string& field,
                              bool is_default) {
  const std::vector<std::string> keys =
      is_default ? std::vector<std::string>{"src_spec", "dst_spec"}
                 : std::vector<std::string>{"match", "src_spec", "dst_spec"};
  RETURN_IF_ERROR(CheckKeys(value, field, keys, keys));
  Rule rule;
  rule.field = field;
  if (!is_default) {
    ASSIGN_OR_RETURN(rule.match, ReadPattern(value["match"], field + ".match"));
  }
  ASSIGN_OR_RETURN(rule.src, ReadSpec(value["src_spec"], field + ".src_spec",
                                      &rule.src_text));
  ASSIGN_OR_RETURN(rule.dst, ReadSpec(value["dst_spec"], field + ".dst_spec",
                                      &rule.dst_text));
  return rule;
}

absl::StatusOr<Source> ReadSource(const Json& section) {
  RETURN_IF_ERROR(CheckKeys(section, kField,
                            {"path", "rules", "default", "include"}, {"path"}));
  Source source;
  const std::string path_field = absl::StrCat(kField, ".path");
  ASSIGN_OR_RETURN(source.path, Text(section["path"], path_field,
                                     "a file name: model.safetensors or "
                                     "model.safetensors.index.json"));
  if (section.contains("rules")) {
    const Json& rules = section["rules"];
    if (!rules.is_array()) {
      return Invalid(absl::StrCat(kField, ".rules"),
                     "expected a list of {match, src_spec, dst_spec}");
    }
    for (size_t i = 0; i < rules.size(); ++i) {
      ASSIGN_OR_RETURN(
          Rule rule, ReadRule(rules[i], absl::StrCat(kField, ".rules[", i, "]"),
                              /*is_default=*/false));
      source.rules.push_back(std::move(rule));
    }
  }
  if (section.contains("default")) {
    ASSIGN_OR_RETURN(source.fallback, ReadRule(section["default"],
                                               absl::StrCat(kField, ".default"),
                                               /*is_default=*/true));
  }
  if (source.rules.empty() && !source.fallback.has_value()) {
    return Invalid(kField,
                   "give rules, a default or both (e.g. default: "
                   "{src_spec: \"R\", dst_spec: \"R\"})");
  }
  if (section.contains("include")) {
    ASSIGN_OR_RETURN(
        source.include,
        ReadPattern(section["include"], absl::StrCat(kField, ".include")));
  }
  return source;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string TensorText(const SafetensorsTensor& t) {
  return absl::StrCat("tensor '", t.name, "' (", t.file, ")");
}

absl::StatusOr<TensorSpec> TensorOf(const SafetensorsTensor& t) {
  static constexpr std::pair<const char*, DType> kDTypes[] = {
      {"BF16", DType::kBFloat16}, {"F16", DType::kFloat16},
      {"F32", DType::kFloat32},   {"F64", DType::kFloat64},
      {"I8", DType::kInt8},       {"U8", DType::kUInt8},
      {"I32", DType::kInt32},     {"I64", DType::kInt64}};
  TensorSpec tensor;
  tensor.shape = t.shape;
  bool found = false;
  for (const auto& [name, dtype] : kDTypes) {
    if (t.dtype == name) {
      tensor.dtype = dtype;
      found = true;
    }
  }
  if (!found) {
    return Invalid(kField, absl::StrCat(TensorText(t), " has dtype ", t.dtype,
                                        "; allowed: ", kAllowedDTypes,
                                        " (leave it out with include)"));
  }
  bool empty = t.shape.empty();
  for (int64_t extent : t.shape) empty = empty || extent < 1;
  if (empty) {
    return Invalid(
        kField, absl::StrCat(TensorText(t), " has shape ", ShapeText(t.shape),
                             "; allowed: rank >= 1 with every "
                             "extent >= 1 (leave it out with "
                             "include)"));
  }
  return tensor;
}

// `spec` for a tensor of `tensor`'s rank: as written, or an all-R spec
// repeated per dimension.
absl::StatusOr<std::string> SpecForRank(const ShardingSpec& spec,
                                        const std::string& text,
                                        const std::string& field,
                                        const SafetensorsTensor& t) {
  const int rank = static_cast<int>(t.shape.size());
  if (spec.rank() == rank) return text;
  bool replicated = true;
  for (const DimSharding& dim : spec.dims) {
    replicated = replicated && dim.mesh_axes.empty();
  }
  if (replicated) {
    return absl::StrJoin(std::vector<std::string>(rank, "R"), ",");
  }
  return Invalid(
      field,
      absl::StrCat("'", text, "' has ", spec.rank(), " dimensions but ",
                   TensorText(t), " has shape ", ShapeText(t.shape), " (", rank,
                   "); only an all-R spec adapts to the rank: put "
                   "a rule for it first (first match wins) or "
                   "narrow this rule's match"));
}

// The spec's axes against the mesh, when the job gives the mesh.
absl::Status CheckOnMesh(const std::string& text, const std::string& field,
                         const TensorSpec& tensor, const SafetensorsTensor& t,
                         const v1::DeviceMesh& mesh,
                         absl::string_view mesh_field) {
  if (mesh.shape_size() == 0) return absl::OkStatus();  // the kind says so
  ASSIGN_OR_RETURN(const ShardingSpec spec, ShardingSpec::Parse(text));
  const std::vector<int> shape(mesh.shape().begin(), mesh.shape().end());
  const absl::Status valid = spec.Validate(tensor, UnplacedMesh(shape));
  if (valid.ok()) return absl::OkStatus();
  return Invalid(field, absl::StrCat("'", text, "' for ", TensorText(t), " on ",
                                     mesh_field, " ", absl::StrJoin(shape, "x"),
                                     ": ", valid.message()));
}

absl::StatusOr<v1::ModelTensor> Expand(const SafetensorsTensor& t,
                                       const Source& source,
                                       const v1::ReshardModelSpec& spec) {
  ASSIGN_OR_RETURN(const TensorSpec tensor, TensorOf(t));
  const Rule* rule = nullptr;
  for (const Rule& each : source.rules) {
    if (each.match->Finds(t.name)) {
      rule = &each;
      break;
    }
  }
  if (rule == nullptr && source.fallback.has_value()) rule = &*source.fallback;
  if (rule == nullptr) {
    return Invalid(
        kField, absl::StrCat(TensorText(t), " with shape ", ShapeText(t.shape),
                             " matches no rule and there is no "
                             "default; add a rule for it or a "
                             "default: {src_spec: \"R\", "
                             "dst_spec: \"R\"}"));
  }
  v1::ModelTensor out;
  out.set_name(t.name);
  for (int64_t extent : t.shape) out.add_shape(extent);
  out.set_dtype(DTypeToProto(tensor.dtype));
  ASSIGN_OR_RETURN(
      const std::string src,
      SpecForRank(rule->src, rule->src_text, rule->field + ".src_spec", t));
  ASSIGN_OR_RETURN(
      const std::string dst,
      SpecForRank(rule->dst, rule->dst_text, rule->field + ".dst_spec", t));
  RETURN_IF_ERROR(CheckOnMesh(src, rule->field + ".src_spec", tensor, t,
                              spec.src_mesh(), "src_mesh"));
  if (spec.dst_meshes_size() > 0) {
    RETURN_IF_ERROR(CheckOnMesh(dst, rule->field + ".dst_spec", tensor, t,
                                spec.dst_meshes(0), "dst_meshes"));
  }
  out.mutable_src_spec()->set_text(src);
  out.mutable_dst_spec()->set_text(dst);
  return out;
}

}  // namespace

absl::Status ExpandSafetensors(const nlohmann::json& section,
                               const std::string& folder,
                               v1::ReshardModelSpec* spec) {
  ASSIGN_OR_RETURN(const Source source, ReadSource(section));
  std::filesystem::path path(source.path);
  if (path.is_relative()) path = std::filesystem::path(folder) / path;
  absl::StatusOr<std::vector<SafetensorsTensor>> tensors =
      ReadSafetensors(path.string());
  if (!tensors.ok()) {
    return absl::Status(
        tensors.status().code(),
        absl::StrCat(kField, ".path: ", tensors.status().message()));
  }
  if (tensors->empty()) {
    return Invalid(absl::StrCat(kField, ".path"),
                   absl::StrCat(path.string(), " holds no tensors"));
  }
  google::protobuf::RepeatedPtrField<v1::ModelTensor> expanded;
  for (const SafetensorsTensor& t : *tensors) {
    if (source.include.has_value() && !source.include->Finds(t.name)) continue;
    ASSIGN_OR_RETURN(*expanded.Add(), Expand(t, source, *spec));
  }
  if (expanded.empty()) {
    return Invalid(
        absl::StrCat(kField, ".include"),
        absl::StrCat("'", source.include->text, "' matches none of the ",
                     tensors->size(), " tensors of ", path.string()));
  }
  for (const v1::ModelTensor& listed : spec->tensors()) {
    *expanded.Add() = listed;
  }
  spec->mutable_tensors()->Swap(&expanded);
  return absl::OkStatus();
}

}  // namespace meshcast::cli
