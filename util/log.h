// Log: the one logger of meshcast's daemons. Every line has the same shape,
// in the controller and in every worker:
//
//   2026-11-27T05:40:01.123Z INFO controller job=job-000042 RUNNING: 2 workers
//   2026-11-27T05:40:01.180Z INFO worker/node-1 job=job-000042 succeeded
//   2026-11-27T05:40:02.004Z WARN worker/node-1 controller unreachable (...)
//
// time (UTC, milliseconds), severity (INFO, WARN, ERROR), component (the
// process: "controller", "worker/NAME"), the job as a `job=ID` field when the
// line is about one, then the message. So `grep job=job-000042` over every
// daemon's log tells one job's story, and `meshctl logs JOB` merges them in
// time order (ParseLogLine reads a line back).
//
//   SetLogComponent("worker/node-1");               // once, at startup
//   LogInfo("serving the Worker service on ", address);
//   JobLogWarning(job_id, "aborting: ", reason);
//
// Lines go to stderr, flushed one by one. Debian's Abseil has no absl/log,
// and the daemons need only this.
//
// Thread safety: every function is thread-safe; lines never interleave.
#ifndef MESHCAST_UTIL_LOG_H_
#define MESHCAST_UTIL_LOG_H_

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace meshcast {

enum class LogSeverity { kInfo, kWarning, kError };

// Names this process in every line; "meshcast" until set.
void SetLogComponent(absl::string_view component);
// Silences INFO and WARN lines (tests use it to keep output short).
void SetLogQuiet(bool quiet);

// Writes one line; `job_id` empty for a line about no job in particular.
void Log(LogSeverity severity, absl::string_view job_id,
         absl::string_view message);

template <typename... Args>
void LogInfo(const Args&... args) {
  Log(LogSeverity::kInfo, "", absl::StrCat(args...));
}
template <typename... Args>
void LogWarning(const Args&... args) {
  Log(LogSeverity::kWarning, "", absl::StrCat(args...));
}
template <typename... Args>
void LogError(const Args&... args) {
  Log(LogSeverity::kError, "", absl::StrCat(args...));
}
template <typename... Args>
void JobLogInfo(absl::string_view job_id, const Args&... args) {
  Log(LogSeverity::kInfo, job_id, absl::StrCat(args...));
}
template <typename... Args>
void JobLogWarning(absl::string_view job_id, const Args&... args) {
  Log(LogSeverity::kWarning, job_id, absl::StrCat(args...));
}
template <typename... Args>
void JobLogError(absl::string_view job_id, const Args&... args) {
  Log(LogSeverity::kError, job_id, absl::StrCat(args...));
}

// One line as Log writes it (without the newline).
std::string FormatLogLine(absl::Time time, LogSeverity severity,
                          absl::string_view component,
                          absl::string_view job_id, absl::string_view message);

// A line read back.
struct LogLine {
  absl::Time time;
  LogSeverity severity = LogSeverity::kInfo;
  std::string component;
  std::string job_id;  // empty when the line names no job
  std::string message;
};

// Parses a line FormatLogLine wrote; nullopt for any other text (a log
// file may also hold what a daemon printed before its logger started).
std::optional<LogLine> ParseLogLine(absl::string_view line);

// "INFO", "WARN", "ERROR".
absl::string_view SeverityName(LogSeverity severity);

}  // namespace meshcast

#endif  // MESHCAST_UTIL_LOG_H_
