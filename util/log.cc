#include "util/log.h"

#include <atomic>
#include <cstdio>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace meshcast {
namespace {

constexpr char kTimeFormat[] = "%Y-%m-%dT%H:%M:%E3SZ";
constexpr absl::string_view kJobField = "job=";

std::atomic<bool> quiet{false};

absl::Mutex& LogMutex() {
  static absl::Mutex* const mu = new absl::Mutex();
  return *mu;
}

std::string& Component() ABSL_EXCLUSIVE_LOCKS_REQUIRED(LogMutex()) {
  static std::string* const component = new std::string("meshcast");
  return *component;
}

}  // namespace

absl::string_view SeverityName(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kInfo:
      return "INFO";
    case LogSeverity::kWarning:
      return "WARN";
    case LogSeverity::kError:
      return "ERROR";
  }
  return "INFO";
}

void SetLogComponent(absl::string_view component) {
  absl::MutexLock lock(&LogMutex());
  Component() = std::string(component);
}

void SetLogQuiet(bool q) { quiet.store(q); }

std::string FormatLogLine(absl::Time time, LogSeverity severity,
                          absl::string_view component,
                          absl::string_view job_id,
                          absl::string_view message) {
  std::string line = absl::StrCat(
      absl::FormatTime(kTimeFormat, time, absl::UTCTimeZone()), " ",
      SeverityName(severity), " ", component, " ");
  if (!job_id.empty()) absl::StrAppend(&line, kJobField, job_id, " ");
  // One record per line: a message's own line breaks would split it.
  for (const char c : message) line.push_back(c == '\n' ? ' ' : c);
  return line;
}

void Log(LogSeverity severity, absl::string_view job_id,
         absl::string_view message) {
  if (severity != LogSeverity::kError && quiet.load()) return;
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&LogMutex());
  const std::string line =
      FormatLogLine(now, severity, Component(), job_id, message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

std::optional<LogLine> ParseLogLine(absl::string_view text) {
  absl::ConsumeSuffix(&text, "\n");
  std::vector<absl::string_view> parts =
      absl::StrSplit(text, absl::MaxSplits(' ', 3));
  if (parts.size() < 3) return std::nullopt;
  LogLine line;
  std::string error;
  if (!absl::ParseTime(kTimeFormat, parts[0], absl::UTCTimeZone(), &line.time,
                       &error)) {
    return std::nullopt;
  }
  if (parts[1] == "INFO") {
    line.severity = LogSeverity::kInfo;
  } else if (parts[1] == "WARN") {
    line.severity = LogSeverity::kWarning;
  } else if (parts[1] == "ERROR") {
    line.severity = LogSeverity::kError;
  } else {
    return std::nullopt;
  }
  line.component = std::string(parts[2]);
  absl::string_view rest = parts.size() > 3 ? parts[3] : "";
  if (absl::ConsumePrefix(&rest, kJobField)) {
    const size_t end = rest.find(' ');
    line.job_id = std::string(rest.substr(0, end));
    rest.remove_prefix(end == absl::string_view::npos ? rest.size() : end + 1);
  }
  line.message = std::string(rest);
  return line;
}

}  // namespace meshcast
