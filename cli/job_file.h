// JobFile: a job file (-f job.yaml | job.json) of `meshctl submit` in
// either of its two forms.
//
//  1. The JobSpec form: protobuf's JSON mapping of meshcast.v1.JobSpec with
//     proto field names, in JSON or YAML. One schema for every kind:
//       {"name": "x", "verify": "sample",
//        "collective": {"op": "all_reduce", "mesh": {"shape": [2, 4]},
//                       "size": "256MiB", "dtype": "DTYPE_FLOAT32"}}
//     The compact notations the issue keeps may be written as text where
//     the mapping wants an object or an enum name: a mesh "2x4" / "2x4@1" /
//     [2, 4] (-> {"shape": [2, 4], "first_host": 1}), a spec "S0RR"
//     (-> {"text": "S0RR"}), a dtype "float32" (-> "DTYPE_FLOAT32"), verify
//     "sample" (-> "VERIFY_MODE_SAMPLE"). An optional top-level "kind" must
//     name the kind the spec sets.
//  2. The compact reshard form meshctl has always read (reshard_input.h):
//       name: x
//       kind: reshard
//       reshard: {shape: 64x64x256, src_mesh: 2x4, src_spec: S0RR, ...}
//     plus an optional top-level verify: full | sample | off.
//
// A file is the compact form when its reshard section has no "tensor" key
// (the JobSpec form of a reshard always has one); every other file is read
// as the JobSpec form. Errors name the file and, where it can be told, the
// key ("job.yaml: verify: 'x' is not one of full, sample, off"); the JobSpec
// form's errors are protobuf's JSON parser's, after the file name.
//
//   ASSIGN_OR_RETURN(JobFile file, LoadJobFile("job.yaml"));
//   if (file.compact) { ... file.reshard (ReshardInput) ... }
//   else { ... file.spec ... }
//
// A reshard_model job may take its tensors from a safetensors file
// (reshard_model.safetensors, job_file_safetensors.h): they are read when
// the file is parsed, relative to the job file's folder, and the spec holds
// them as listed tensors.
//
// Thread safety: plain value types and pure functions.
#ifndef MESHCAST_CLI_JOB_FILE_H_
#define MESHCAST_CLI_JOB_FILE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cli/reshard_input.h"
#include "meshcast/v1/job.pb.h"

namespace meshcast::cli {

struct JobFile {
  std::string label;      // the path, for errors
  bool compact = false;   // form 2
  ReshardInput reshard;   // form 2: the reshard fields as text
  v1::JobSpec spec;       // form 1: the spec (name and verify included)
  // Both forms: the name and verify mode the file gives, if any.
  std::optional<std::string> name;
  std::optional<v1::VerifyMode> verify;
  // "reshard" or "collective": the kind the file describes.
  std::string kind;
};

absl::StatusOr<JobFile> LoadJobSpecFile(const std::string& path);
// The same from text; `json` as IsJsonJobFile decides; `label` names the
// file in errors. `folder` is where relative paths in the text (a
// reshard_model's safetensors.path) are read from ("": the working
// directory); without one, a safetensors section is an error (text that is
// not a file reads no files).
absl::StatusOr<JobFile> ParseJobSpecText(
    const std::string& text, bool json, const std::string& label,
    const std::optional<std::string>& folder = std::nullopt);

// "full" | "sample" | "off" -> the enum; INVALID_ARGUMENT naming `origin`
// and the allowed values otherwise.
absl::StatusOr<v1::VerifyMode> ParseVerifyMode(const std::string& text,
                                               const std::string& origin);

// A mesh as meshctl writes it: "2x4" (placed: first_host unset), "2x4@1"
// (pinned to hosts 1, 2) or "8" (1-D). Syntax only: whether it fits a
// cluster is the controller's (or offline, the planner's) question.
absl::StatusOr<v1::DeviceMesh> ParseMeshText(const std::string& text,
                                             const std::string& origin);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_JOB_FILE_H_
