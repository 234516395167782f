// DeferredCloser: destroys objects on a thread of its own, so that slow
// teardown stays off the path that reports a job's result.
//
// Closing a job's Gloo communicator takes 10-20 ms (Gloo's TCP device joins
// its event loop, whose epoll wait has a 10 ms timeout, and every pair
// closes its socket). A worker that destroyed it before answering RunTask
// added that to every job's latency; handing it here answers first.
//
//   DeferredCloser closer;
//   closer.Close(std::move(comm));   // returns at once
//   closer.Drain();                  // waits for everything handed over
//
// A few threads destroy in parallel (teardown is mostly waiting), and at
// most `max_pending` objects wait: beyond that Close destroys inline, so a
// burst of jobs cannot pile up sockets and threads faster than they close.
//
// The destructor drains, so nothing handed over outlives the closer. An
// object handed over must not refer to anything its owner destroys sooner
// (a communicator holds its own state; the job's tiles are gone already).
// Thread safety: thread-safe.
#ifndef MESHCAST_WORKER_DEFERRED_CLOSER_H_
#define MESHCAST_WORKER_DEFERRED_CLOSER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace meshcast::worker {

class DeferredCloser {
 public:
  explicit DeferredCloser(int threads = 4, int64_t max_pending = 64);
  ~DeferredCloser();
  DeferredCloser(const DeferredCloser&) = delete;
  DeferredCloser& operator=(const DeferredCloser&) = delete;

  // Destroys `object` soon, on one of the closer's threads; at once, on
  // the caller's, when max_pending objects wait already. Null is ignored.
  template <typename T>
  void Close(std::unique_ptr<T> object) {
    if (object == nullptr) return;
    Enqueue(std::shared_ptr<void>(std::move(object)));
  }

  // Returns once every object handed over before the call is destroyed.
  void Drain();

  // Objects handed over and not destroyed yet.
  int64_t pending() const;
  // Objects Close destroyed inline because max_pending were waiting.
  int64_t closed_inline() const;

 private:
  void Enqueue(std::shared_ptr<void> object);
  void Loop();

  const int64_t max_pending_;
  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<void>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t handed_over_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t destroyed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t closed_inline_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: start once the rest exists
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_DEFERRED_CLOSER_H_
