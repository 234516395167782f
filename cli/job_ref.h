// How a job is named on meshctl's command line: by its full id
// (job-000042), by its number (42, job-42) or by a prefix of its id that
// only one job has (job-00004 when job-000040 .. job-000049 do not all
// exist). Every command that takes a JOB (get, trace, watch, cancel)
// resolves it here, once, before it asks the controller about the job.
//
//   ASSIGN_OR_RETURN(std::string id, ResolveJobId(client, "42"));
//   // id == "job-000042"
//
// Contract: a full id (IsFullJobId: "job-" and six or more digits, as the
// controller numbers jobs) is returned as it is, without a call, so the
// controller reports an unknown one itself. Anything else is matched
// against the jobs the controller lists (ListJobs, every job the caller
// may see), in order: an id equal to the text; ids that start with it;
// for a number (42, job-42, job-0042), the job with that number (the
// digits that end its id). One match is the id.
//
// Errors: NOT_FOUND (exit code 2) when nothing matches, naming the text;
// INVALID_ARGUMENT (exit code 2) when several jobs match, listing them (the
// first ten, newest first, then how many more). When the controller cannot
// list jobs the text is returned unchanged, so that the command's own call
// reports the controller's error.
//
// Thread safety: reentrant; the client is thread-safe.
#ifndef MESHCAST_CLI_JOB_REF_H_
#define MESHCAST_CLI_JOB_REF_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/controller_client.h"
#include "meshcast/v1/job.pb.h"

namespace meshcast::cli {

// "job-" followed by six or more digits: how the controller names jobs.
bool IsFullJobId(absl::string_view text);

// The id of the one job in `jobs` that `text` names (rules above).
absl::StatusOr<std::string> MatchJobId(absl::string_view text,
                                       const std::vector<v1::Job>& jobs);

// IsFullJobId(text) ? text : MatchJobId(text, client.ListJobs(0)).
absl::StatusOr<std::string> ResolveJobId(ControllerClient& client,
                                         absl::string_view text);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_JOB_REF_H_
