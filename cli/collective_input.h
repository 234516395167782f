// CollectiveInput: a `collective` job as meshctl's flags and job files give
// it, turned into a meshcast.v1.CollectiveSpec, and errors about the spec
// attributed to the flag or file key each field came from.
//
//   std::map<std::string, std::string> text;  // flag values
//   AddCollectiveFlags(flags, text);           // --op --mesh --bytes ...
//   ... flags.Parse(args) ...
//   std::map<std::string, std::string> origins;
//   ASSIGN_OR_RETURN(v1::CollectiveSpec collective,
//                    BuildCollectiveSpec(flags, text, file, &origins));
//   *spec.mutable_collective() = collective;
//   RETURN_IF_ERROR(AttributeCollectiveError(ValidateOffline(spec), origins));
//
// Only the text of flags is converted here (a mesh's notation, an integer,
// a dtype name): whether the values make a valid job is the kind's question,
// asked through the planner library the controller uses (ValidateOffline),
// so meshctl never keeps a second copy of the rules.
//
// Thread safety: pure functions.
#ifndef MESHCAST_CLI_COLLECTIVE_INPUT_H_
#define MESHCAST_CLI_COLLECTIVE_INPUT_H_

#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/flags.h"
#include "cli/job_file.h"
#include "meshcast/v1/job.pb.h"

namespace meshcast::cli {

// Collective flag -> CollectiveSpec field (--dtype, shared with reshard,
// is "dtype").
inline constexpr std::pair<const char*, const char*> kCollectiveFlags[] = {
    {"op", "op"},
    {"mesh", "mesh"},
    {"bytes", "size"},
    {"reduction", "reduction"},
    {"iterations", "iterations"}};

// "--bytes" for the field "size".
std::string CollectiveFlagOf(absl::string_view field);

// Registers --op, --mesh, --bytes, --reduction and --iterations, bound to
// text[field] (field names as in kCollectiveFlags). --dtype is the
// caller's, bound to text["dtype"].
void AddCollectiveFlags(FlagSet& flags,
                        std::map<std::string, std::string>& text);

// The file's collective spec (file may be null) with the flags that were
// given over it. dtype defaults to float32. `origins` receives, per field,
// the flag or file key its value came from. INVALID_ARGUMENT naming the
// flag for text that does not parse (--mesh 2x, --iterations many).
absl::StatusOr<v1::CollectiveSpec> BuildCollectiveSpec(
    const FlagSet& flags, const std::map<std::string, std::string>& text,
    const JobFile* file, std::map<std::string, std::string>* origins);

// A kind's (or the controller's) error about "collective.<field> ..." with
// the field's origin in front: "--op: \"x\" is not one of all_reduce, ...".
// Other errors pass unchanged.
absl::Status AttributeCollectiveError(
    const absl::Status& status,
    const std::map<std::string, std::string>& origins);

// The checks the controller makes at submit (FindJobKind(spec)->Validate),
// run here with the same library, so a bad spec is reported before
// anything is sent, and alike offline and live.
absl::Status ValidateOffline(const v1::JobSpec& spec);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_COLLECTIVE_INPUT_H_
