// The `safetensors` section of a reshard_model job file: the tensor list
// read from a safetensors file's header (or a sharded model's index)
// instead of, or before, listed `tensors`, expanded client-side into
// ReshardModelSpec.tensors (the controller sees only explicit tensors).
//
//   reshard_model:
//     src_mesh: "2x4"
//     dst_meshes: ["1x4", "1x4"]
//     safetensors:
//       path: model.safetensors      # or model.safetensors.index.json;
//                                    # relative to the job file's folder
//       rules:                       # first match wins
//         - {match: "q_proj|k_proj|v_proj", src_spec: "R,S1", dst_spec: "R,S1"}
//         - {match: "o_proj", src_spec: "S1,R", dst_spec: "S1,R"}
//       default: {src_spec: "R", dst_spec: "R"}
//       include: "^model\\.layers\\.0\\."   # optional filter
//
// `match` and `include` are ECMAScript regular expressions (std::regex)
// searched anywhere in the tensor's name (anchor with ^ and $). A tensor
// the include filter keeps takes the specs of the first rule that matches
// it, else `default`'s, else it is an error naming it. A spec must have one
// entry per tensor dimension, except that an all-replicated one ("R",
// "R,R") is replication at any rank. The file's dtypes map onto meshcast's
// (BF16 bfloat16, F16 float16, F32 float32, F64 float64, I8 int8, U8
// uint8, I32 int32, I64 int64); any other dtype, a scalar or an empty
// tensor it keeps is an error naming the tensor. The tensors keep the
// file's order (data order; an index's shards in name order) and come
// before any listed in `tensors`.
//
// Errors: INVALID_ARGUMENT naming the field and the allowed values
// (`reshard_model.safetensors.rules[1].src_spec: 'S1,R' has 2 dimensions
// but tensor 'norm' has shape [4096] ...`); the header's errors
// (safetensors_header.h) after `reshard_model.safetensors.path: `.
// Thread safety: pure function (it reads the safetensors files).
#ifndef MESHCAST_CLI_JOB_FILE_SAFETENSORS_H_
#define MESHCAST_CLI_JOB_FILE_SAFETENSORS_H_

#include <string>

#include "absl/status/status.h"
#include "meshcast/v1/job.pb.h"
#include "nlohmann/json.hpp"

namespace meshcast::cli {

// Reads `section` (the JSON of reshard_model.safetensors, typed scalars)
// and the file it names (a relative path is taken from `folder`), and puts
// its tensors before `spec`'s listed ones. `spec`'s meshes, where set, are
// checked against every spec's axes.
absl::Status ExpandSafetensors(const nlohmann::json& section,
                               const std::string& folder,
                               v1::ReshardModelSpec* spec);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_JOB_FILE_SAFETENSORS_H_
