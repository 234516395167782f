// A minimal line logger for the worker daemon (Debian's Abseil has no
// absl/log): one timestamped line per call on stderr.
//
//   Log(absl::StrCat("job ", id, ": started"));
//
// Thread safety: thread-safe; lines never interleave.
#ifndef MESHCAST_WORKER_LOG_H_
#define MESHCAST_WORKER_LOG_H_

#include "absl/strings/string_view.h"

namespace meshcast::worker {

void Log(absl::string_view message);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_LOG_H_
