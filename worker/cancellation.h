// Cancellation: a one-way "stop now" flag with the reason, shared by the
// threads working on one job (executor, step threads, rendezvous).
//
//   if (cancellation.cancelled()) return cancellation.status();
//
// WorkSlicing: how finely the long loops over memory (pattern fill,
// poisoning, local copies, verification) are cut so that they see a
// cancellation promptly: each slice starts with a check, so an abort ends
// such a loop within one slice of work per thread, not at the end of a
// gigabyte tile.
//
//   for (const BoxPiece& piece : SplitBox(box, slicing.elements(size))) {
//     RETURN_IF_ERROR(slicing.Next(cancellation));
//     ...
//   }
//
// Thread safety: Cancellation is thread-safe; cancelled() is a lock-free
// read. WorkSlicing is a value; Next may run on many threads at once when
// `before_slice` may.
#ifndef MESHCAST_WORKER_CANCELLATION_H_
#define MESHCAST_WORKER_CANCELLATION_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace meshcast::worker {

class Cancellation {
 public:
  // The first reason is kept; later calls do nothing.
  void Cancel(absl::string_view reason) {
    absl::MutexLock lock(&mu_);
    if (cancelled_.load()) return;
    reason_ = std::string(reason);
    cancelled_.store(true);
  }

  bool cancelled() const { return cancelled_.load(); }

  // OK, or CANCELLED with the reason.
  absl::Status status() const {
    if (!cancelled()) return absl::OkStatus();
    absl::MutexLock lock(&mu_);
    return absl::CancelledError(reason_);
  }

 private:
  std::atomic<bool> cancelled_{false};
  mutable absl::Mutex mu_;
  std::string reason_ ABSL_GUARDED_BY(mu_);
};

struct WorkSlicing {
  // Bytes of memory work between two checks. 16 MiB is ~10 ms of memory
  // traffic per thread: short enough that a cancelled job lets go of the
  // host at once, long enough that the checks cost nothing.
  int64_t bytes = int64_t{16} << 20;
  // Optional, for tests: called on the working thread before each slice
  // (and before each relay chunk), e.g. to make a phase slow enough to be
  // cancelled in the middle.
  std::function<void()> before_slice;

  // Elements of `element_size` bytes in one slice (at least 1).
  int64_t elements(int element_size) const {
    return std::max<int64_t>(1, bytes / std::max(1, element_size));
  }

  // Call before each slice: CANCELLED (the reason) once `cancellation` is
  // set, else OK.
  absl::Status Next(const Cancellation& cancellation) const {
    if (before_slice && !cancellation.cancelled()) before_slice();
    return cancellation.status();
  }
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_CANCELLATION_H_
