#include "cli/job_ref.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace meshcast::cli {
namespace {

constexpr absl::string_view kIdPrefix = "job-";
constexpr size_t kIdDigits = 6;
constexpr size_t kCandidatesShown = 10;

bool AllDigits(absl::string_view text) {
  if (text.empty()) return false;
  for (const char c : text) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return true;
}

// The number `text` names: 42 for "42", "job-42" or "job-000042".
std::optional<int64_t> NumberOf(absl::string_view text) {
  absl::ConsumePrefix(&text, kIdPrefix);
  int64_t number = 0;
  if (!AllDigits(text) || !absl::SimpleAtoi(text, &number)) return std::nullopt;
  return number;
}

// The number that ends a job's id (job-000042 -> 42); nullopt without one.
std::optional<int64_t> IdNumber(absl::string_view id) {
  size_t start = id.size();
  while (start > 0 && absl::ascii_isdigit(id[start - 1])) --start;
  int64_t number = 0;
  if (start == id.size() || !absl::SimpleAtoi(id.substr(start), &number)) {
    return std::nullopt;
  }
  return number;
}

absl::Status Ambiguous(absl::string_view text,
                       const std::vector<std::string>& ids) {
  std::vector<std::string> shown(
      ids.begin(), ids.begin() + std::min(ids.size(), kCandidatesShown));
  std::string more;
  if (ids.size() > shown.size()) {
    more = absl::StrCat(" and ", ids.size() - shown.size(), " more");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "job '", text, "' is ambiguous: ", ids.size(), " jobs match (",
      absl::StrJoin(shown, ", "), more, "); give more of the id"));
}

}  // namespace

bool IsFullJobId(absl::string_view text) {
  return absl::ConsumePrefix(&text, kIdPrefix) && text.size() >= kIdDigits &&
         AllDigits(text);
}

absl::StatusOr<std::string> MatchJobId(absl::string_view text,
                                       const std::vector<v1::Job>& jobs) {
  if (text.empty()) {
    return absl::InvalidArgumentError(
        "job ID: empty; 'meshctl list' shows "
        "the ids");
  }
  std::vector<std::string> prefixed;
  for (const v1::Job& job : jobs) {
    if (job.id() == text) return job.id();
    if (absl::StartsWith(job.id(), text)) prefixed.push_back(job.id());
  }
  std::vector<std::string> numbered;
  if (const std::optional<int64_t> number = NumberOf(text);
      prefixed.empty() && number.has_value()) {
    for (const v1::Job& job : jobs) {
      if (IdNumber(job.id()) == number) numbered.push_back(job.id());
    }
  }
  const std::vector<std::string>& matches =
      prefixed.empty() ? numbered : prefixed;
  if (matches.size() == 1) return matches[0];
  if (matches.size() > 1) return Ambiguous(text, matches);
  return absl::NotFoundError(
      absl::StrCat("job ", text,
                   " not found: no job has that id, number or id prefix; "
                   "'meshctl list' shows the ids"));
}

absl::StatusOr<std::string> ResolveJobId(ControllerClient& client,
                                         absl::string_view text) {
  if (IsFullJobId(text)) return std::string(text);
  absl::StatusOr<std::vector<v1::Job>> jobs = client.ListJobs(0);
  if (!jobs.ok()) return std::string(text);
  return MatchJobId(text, *jobs);
}

}  // namespace meshcast::cli
