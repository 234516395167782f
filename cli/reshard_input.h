// ReshardInput: a resharding job as meshctl's flags or a job file
// (-f job.yaml | job.json) describe it, checked offline and turned into a
// meshcast.v1.JobSpec for the controller.
//
//   ReshardInput input;
//   RETURN_IF_ERROR(LoadJobFile("job.yaml", &input));  // optional
//   input.Set("strategy", "meshcast", "--strategy");   // flags override
//   ASSIGN_OR_RETURN(v1::JobSpec spec, BuildJobSpec(input));
//   if (NeedsTopology(spec)) { ... PinMeshes(topology, input, &spec) ... }
//
// Meshes:
//   "2x4" (or "8")      the controller places it: DeviceMesh.devices empty,
//                       first_host = -1, one mesh row per host.
//   "2x4@h"             pinned: 2 hosts from host h, the first 4 devices of
//                       each; resolved into device ids with the live
//                       topology (PinMeshes).
//   devices + shape     pinned to an explicit list: src_devices "0,1,4,5"
//                       with src_shape "2x2" (flags), or in a file
//                       src_mesh: {shape: [2, 2], devices: [0, 1, 4, 5]}.
// Every error names where the bad value came from: the flag ("--src-spec:
// ...") or the file key ("job.yaml: reshard.src_spec: ...").
//
// Thread safety: plain value types and pure functions.
#ifndef MESHCAST_CLI_RESHARD_INPUT_H_
#define MESHCAST_CLI_RESHARD_INPUT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshcast/v1/controller.pb.h"
#include "meshcast/v1/job.pb.h"
#include "nlohmann/json.hpp"

namespace meshcast::cli {

// The fields of a reshard job, by the snake_case names job files use.
// Flag names are the same with dashes ("src_mesh" <-> --src-mesh).
inline constexpr const char* kReshardFields[] = {
    "shape",     "dtype",    "src_mesh", "src_devices",
    "src_shape", "src_spec", "dst_mesh", "dst_devices",
    "dst_shape", "dst_spec", "strategy", "allow_overlap",
    "src_buffer", "dst_buffer"};

struct ReshardInput {
  std::string name;  // job name, optional
  // Field -> value as text (lists of numbers written "0,1,4,5").
  std::map<std::string, std::string> values;
  // Field -> where it came from, for errors ("--src-mesh" or
  // "job.yaml: reshard.src_mesh"); missing: the flag name.
  std::map<std::string, std::string> origins;
  // The job file the input was read from ("job.yaml"), else empty; a
  // required field missing from it is reported by its file key.
  std::string file;

  void Set(const std::string& field, std::string value, std::string origin);
  void Erase(const std::string& field);
  bool Has(const std::string& field) const;
  std::string Get(const std::string& field) const;  // "" when unset
  // "--src-mesh" or the file key the value came from.
  std::string Origin(const std::string& field) const;
};

// Reads a job file into `input` (fields it sets get file origins). JSON when
// the name ends in .json or the text starts with '{', YAML otherwise.
// Unknown keys are errors that list the allowed ones; so are a key given
// twice in one mapping, a YAML file with more than one document, and (with
// line and column) text that does not parse. Format:
//   name: my-job            # optional
//   kind: reshard           # optional; reshard is the only kind
//   reshard:
//     shape: 1024x1024x512  # or [1024, 1024, 512]
//     dtype: int32
//     src_mesh: 2x4         # or [2, 4], 2x4@0, or
//                           # {shape: [2, 4], devices: [...]}
//     src_spec: S0RR        # or S0,R,R or [S0, R, R]
//     dst_mesh: 2x4
//     dst_spec: RS0R
//     strategy: meshcast    # default auto
//     allow_overlap: false
absl::Status LoadJobFile(const std::string& path, ReshardInput* input);
// The same from text; `label` names the source in errors.
absl::Status ParseJobText(const std::string& text, bool json,
                          const std::string& label, ReshardInput* input);

// What LoadJobFile reads, in steps, for job_file.h (which also reads the
// JobSpec form):
// A job file's text as JSON, with the checks above (one YAML document, no
// repeated key, errors with line and column). YAML scalars become text
// unless `typed_scalars`, where plain ones are read as YAML 1.2's core
// schema reads them (true, 12, 1.5, null; quoted stay text).
absl::StatusOr<nlohmann::json> ParseJobDocument(const std::string& text,
                                               bool json,
                                               const std::string& label,
                                               bool typed_scalars);
// JSON when the name ends in .json or the text starts with '{'.
bool IsJsonJobFile(const std::string& path, const std::string& text);
// The compact reshard form above, from the parsed document.
absl::Status ReadCompactJob(const nlohmann::json& root,
                            const std::string& label, ReshardInput* input);

// Checks everything that needs no cluster (shape, dtype, spec tokens, spec
// rank against the tensor and axes against the mesh, strategy, mesh syntax)
// and builds the spec. Meshes written HxG@h keep devices empty and carry
// the pinned host in first_host until PinMeshes resolves them.
absl::StatusOr<v1::JobSpec> BuildJobSpec(const ReshardInput& input);

// True if a mesh of `input` is written HxG@h and needs the cluster topology.
bool NeedsTopology(const ReshardInput& input);

// Resolves HxG@h meshes into device ids on `topology` (errors when the mesh
// does not fit the cluster name the flag or key).
absl::Status PinMeshes(const v1::Topology& topology, const ReshardInput& input,
                       v1::JobSpec* spec);

// A controller error about a spec field ("dst_mesh 3x4 needs 3 hosts...")
// prefixed with the flag or key that field came from.
absl::Status AttributeServerError(const absl::Status& status,
                                  const ReshardInput& input);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_RESHARD_INPUT_H_
