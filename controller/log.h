// A tiny logger for the controller daemon (Debian's Abseil has no absl/log):
// one timestamped line per call on stderr, so that the log reads as a story
// of what happened to each worker and job.
//
//   Log(LogLevel::kInfo, absl::StrCat("job ", id, " SUCCEEDED in 1.2 s"));
//   LogInfo("worker ", name, " registered as host ", index);   // StrCat form
//
// Thread safety: lines from concurrent threads never interleave.
#ifndef MESHCAST_CONTROLLER_LOG_H_
#define MESHCAST_CONTROLLER_LOG_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace meshcast {

enum class LogLevel { kInfo, kWarning, kError };

void Log(LogLevel level, absl::string_view message);
// Silences kInfo and kWarning lines (tests use it to keep output short).
void SetLogQuiet(bool quiet);

template <typename... Args>
void LogInfo(const Args&... args) {
  Log(LogLevel::kInfo, absl::StrCat(args...));
}
template <typename... Args>
void LogWarning(const Args&... args) {
  Log(LogLevel::kWarning, absl::StrCat(args...));
}
template <typename... Args>
void LogError(const Args&... args) {
  Log(LogLevel::kError, absl::StrCat(args...));
}

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_LOG_H_
