// Cancellation: a one-way "stop now" flag with the reason, shared by the
// threads working on one job (executor, step threads, rendezvous).
//
//   if (cancellation.cancelled()) return cancellation.status();
//
// Thread safety: thread-safe; cancelled() is a lock-free read.
#ifndef MESHCAST_WORKER_CANCELLATION_H_
#define MESHCAST_WORKER_CANCELLATION_H_

#include <atomic>
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

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_CANCELLATION_H_
