#include "worker/log.h"

#include <cstdio>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace meshcast::worker {

void Log(absl::string_view message) {
  static absl::Mutex mu(absl::kConstInit);
  const std::string time = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                            absl::UTCTimeZone());
  absl::MutexLock lock(&mu);
  std::fprintf(stderr, "%s meshcast-worker: %.*s\n", time.c_str(),
               static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
}

}  // namespace meshcast::worker
