#include "cli/collective_input.h"

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "planner/kinds/job_kind.h"
#include "planner/tensor.h"
#include "proto/dtype_convert.h"
#include "util/status_macros.h"

namespace meshcast::cli {

// "--bytes" for the field "size".
std::string CollectiveFlagOf(absl::string_view field) {
  if (field == "dtype") return "--dtype";
  for (const auto& [flag, name] : kCollectiveFlags) {
    if (field == name) return absl::StrCat("--", flag);
  }
  return absl::StrCat("--", field);
}

void AddCollectiveFlags(FlagSet& flags,
                        std::map<std::string, std::string>& text) {
  flags.String("op", &text["op"], "OP",
               "collective: all_reduce, all_gather, reduce_scatter,\n"
               "all_to_all or broadcast (required)");
  flags.String("mesh", &text["mesh"], "HxG[@h]",
               "collective: its mesh, 2x4 (placed), 2x4@1 (pinned) or 8");
  flags.String("bytes", &text["size"], "SIZE",
               "collective: size as nccl-tests counts it, e.g. 256MiB");
  flags.String("reduction", &text["reduction"], "OP",
               "collective: sum (default) or max");
  flags.String("iterations", &text["iterations"], "N",
               "collective: times it runs back to back (default 1)");
}

absl::StatusOr<v1::CollectiveSpec> BuildCollectiveSpec(
    const FlagSet& flags, const std::map<std::string, std::string>& text,
    const JobFile* file, std::map<std::string, std::string>* origins) {
  v1::CollectiveSpec spec;
  if (file != nullptr) {
    spec = file->spec.collective();
    for (const char* field :
         {"op", "mesh", "size", "dtype", "reduction", "iterations"}) {
      (*origins)[field] = absl::StrCat(file->label, ": collective.", field);
    }
  }
  const auto given = [&](const char* flag) { return flags.IsSet(flag); };
  const auto value = [&](const char* field) { return text.at(field); };
  for (const auto& [flag, field] : kCollectiveFlags) {
    if (!given(flag)) continue;
    const std::string origin = absl::StrCat("--", flag);
    (*origins)[field] = origin;
    const std::string field_name = field;
    if (field_name == "op") {
      spec.set_op(value(field));
    } else if (field_name == "mesh") {
      ASSIGN_OR_RETURN(*spec.mutable_mesh(),
                       ParseMeshText(value(field), origin));
    } else if (field_name == "size") {
      spec.set_size(value(field));
    } else if (field_name == "reduction") {
      spec.set_reduction(value(field));
    } else if (field_name == "iterations") {
      int iterations = 0;
      if (!absl::SimpleAtoi(value(field), &iterations)) {
        return absl::InvalidArgumentError(absl::StrCat(
            origin, ": '", value(field), "' is not an integer, e.g. 10"));
      }
      spec.set_iterations(iterations);
    }
  }
  if (given("dtype")) {
    (*origins)["dtype"] = "--dtype";
    absl::StatusOr<DType> dtype = ParseDType(text.at("dtype"));
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--dtype: ", dtype.status().message()));
    }
    spec.set_dtype(DTypeToProto(*dtype));
  } else if (spec.dtype() == v1::DTYPE_UNSPECIFIED) {
    spec.set_dtype(v1::DTYPE_FLOAT32);  // the documented default
  }
  return spec;
}

absl::Status AttributeCollectiveError(
    const absl::Status& status,
    const std::map<std::string, std::string>& origins) {
  if (status.ok()) return status;
  absl::string_view message = status.message();
  if (!absl::ConsumePrefix(&message, "collective.")) return status;
  for (const char* field :
       {"op", "mesh", "size", "dtype", "reduction", "iterations"}) {
    absl::string_view rest = message;
    if (!absl::ConsumePrefix(&rest, field)) continue;
    if (!rest.empty() && rest[0] != ' ' && rest[0] != ':' && rest[0] != '.') {
      continue;
    }
    absl::ConsumePrefix(&rest, ":");
    absl::ConsumePrefix(&rest, " ");
    const auto it = origins.find(field);
    const std::string origin =
        it != origins.end() ? it->second : CollectiveFlagOf(field);
    // "is required (...)" reads "--bytes: required (...)".
    const bool required = absl::ConsumePrefix(&rest, "is required");
    return absl::Status(status.code(),
                        absl::StrCat(origin, ": ", required ? "required" : "",
                                     rest));
  }
  return status;
}

absl::Status ValidateOffline(const v1::JobSpec& spec) {
  ASSIGN_OR_RETURN(const JobKind* kind, FindJobKind(spec));
  return kind->Validate(spec);
}

}  // namespace meshcast::cli
