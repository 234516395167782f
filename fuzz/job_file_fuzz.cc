// Fuzz target: the job-file reader of `meshctl submit -f` (JSON and YAML,
// both forms) and the kind's validation of what it accepts — the path every
// user-written file takes before it reaches the controller. The first byte
// picks JSON (odd) or YAML (even). Invariant: nothing crashes; a file that
// reads as a JobSpec either validates or is refused with INVALID_ARGUMENT.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cli/job_file.h"
#include "planner/kinds/job_kind.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool json = (data[0] & 1) != 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<meshcast::cli::JobFile> file =
      meshcast::cli::ParseJobSpecText(text, json, "fuzz.job");
  if (!file.ok() || file->compact) return 0;
  absl::StatusOr<const meshcast::JobKind*> kind =
      meshcast::FindJobKind(file->spec);
  if (!kind.ok()) return 0;
  const absl::Status valid = (*kind)->Validate(file->spec);
  if (!valid.ok() && valid.code() != absl::StatusCode::kInvalidArgument) {
    std::abort();  // a bad spec must be the user's error, named as such
  }
  return 0;
}
