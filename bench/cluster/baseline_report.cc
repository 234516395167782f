#include "bench/cluster/baseline_report.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "util/status_macros.h"

namespace meshcast::bench {
namespace {

constexpr absl::string_view kTag = "gloo_baseline";

absl::Status FieldError(absl::string_view line, absl::string_view key,
                        absl::string_view value) {
  return absl::InvalidArgumentError(absl::StrCat("gloo_baseline line: field ",
                                                 key, "='", value,
                                                 "' is not valid in: ", line));
}

}  // namespace

std::string FormatBaselineLine(const BaselineResult& r) {
  // %.9g keeps nanoseconds for the smallest sizes and is exact enough for
  // ratios; NaN (no time) prints as "nan" and parses back.
  return absl::StrFormat(
      "%s op=%s algorithm=%s ranks=%d bytes=%d count=%d type=%s iters=%d "
      "median_s=%.9g min_s=%.9g max_s=%.9g status=%s",
      kTag, r.op, r.algorithm.empty() ? "-" : r.algorithm, r.ranks, r.bytes,
      r.count, r.type, r.iters, r.median_seconds, r.min_seconds, r.max_seconds,
      r.status);
}

absl::StatusOr<BaselineResult> ParseBaselineLine(absl::string_view line) {
  line = absl::StripAsciiWhitespace(line);
  std::vector<absl::string_view> fields =
      absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (fields.empty() || fields[0] != kTag) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a gloo_baseline line: ", line));
  }
  BaselineResult r;
  bool has_op = false, has_status = false;
  for (size_t i = 1; i < fields.size(); ++i) {
    const std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(fields[i], absl::MaxSplits('=', 1));
    const absl::string_view key = kv.first, value = kv.second;
    bool good = true;
    if (key == "op") {
      r.op = std::string(value);
      has_op = good = !value.empty();
    } else if (key == "algorithm") {
      r.algorithm = std::string(value);
    } else if (key == "ranks") {
      good = absl::SimpleAtoi(value, &r.ranks) && r.ranks >= 1;
    } else if (key == "bytes") {
      good = absl::SimpleAtoi(value, &r.bytes) && r.bytes >= 0;
    } else if (key == "count") {
      good = absl::SimpleAtoi(value, &r.count) && r.count >= 0;
    } else if (key == "type") {
      r.type = std::string(value);
    } else if (key == "iters") {
      good = absl::SimpleAtoi(value, &r.iters) && r.iters >= 0;
    } else if (key == "median_s") {
      good = absl::SimpleAtod(value, &r.median_seconds);
    } else if (key == "min_s") {
      good = absl::SimpleAtod(value, &r.min_seconds);
    } else if (key == "max_s") {
      good = absl::SimpleAtod(value, &r.max_seconds);
    } else if (key == "status") {
      r.status = std::string(value);
      has_status = good = !value.empty();
    }
    if (!good) return FieldError(line, key, value);
  }
  if (!has_op || !has_status || r.ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo_baseline line: needs op, ranks and status: ", line));
  }
  if (r.ok() && !(r.median_seconds > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo_baseline line: status=ok needs median_s > 0: ", line));
  }
  return r;
}

absl::StatusOr<std::vector<BaselineResult>> ParseBaselineOutput(
    absl::string_view output) {
  std::vector<BaselineResult> results;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    const absl::string_view stripped = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::StartsWith(stripped, absl::StrCat(kTag, " "))) continue;
    ASSIGN_OR_RETURN(BaselineResult r, ParseBaselineLine(stripped));
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace meshcast::bench
