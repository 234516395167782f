#include "controller/log.h"

#include <atomic>
#include <cstdio>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace meshcast {
namespace {

std::atomic<bool> quiet{false};

absl::Mutex& OutputMutex() {
  static absl::Mutex* const mu = new absl::Mutex();
  return *mu;
}

const char* LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kWarning:
      return "W";
    case LogLevel::kError:
      return "E";
  }
  return "?";
}

}  // namespace

void SetLogQuiet(bool q) { quiet.store(q); }

void Log(LogLevel level, absl::string_view message) {
  if (level != LogLevel::kError && quiet.load()) return;
  const std::string line =
      absl::StrCat(LevelLetter(level),
                   absl::FormatTime("%Y-%m-%dT%H:%M:%E3S", absl::Now(),
                                    absl::LocalTimeZone()),
                   " controller] ", message, "\n");
  absl::MutexLock lock(&OutputMutex());
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace meshcast
