#include "worker/deferred_closer.h"

#include <algorithm>
#include <utility>

namespace meshcast::worker {

DeferredCloser::DeferredCloser(int threads, int64_t max_pending)
    : max_pending_(std::max<int64_t>(max_pending, 1)) {
  for (int i = 0; i < std::max(threads, 1); ++i) {
    threads_.emplace_back([this] { Loop(); });
  }
}

DeferredCloser::~DeferredCloser() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void DeferredCloser::Enqueue(std::shared_ptr<void> object) {
  {
    absl::MutexLock lock(&mu_);
    if (handed_over_ - destroyed_ < max_pending_) {
      queue_.push_back(std::move(object));
      ++handed_over_;
      return;
    }
    ++closed_inline_;
  }
  object.reset();  // too many waiting: the caller pays, without the lock
}

void DeferredCloser::Drain() {
  absl::MutexLock lock(&mu_);
  const int64_t target = handed_over_;
  auto done = [this, target]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return destroyed_ >= target;
  };
  mu_.Await(absl::Condition(&done));
}

int64_t DeferredCloser::pending() const {
  absl::MutexLock lock(&mu_);
  return handed_over_ - destroyed_;
}

int64_t DeferredCloser::closed_inline() const {
  absl::MutexLock lock(&mu_);
  return closed_inline_;
}

void DeferredCloser::Loop() {
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty();
  };
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(&ready));
    if (queue_.empty()) return;  // stopping, and nothing left
    std::shared_ptr<void> object = std::move(queue_.front());
    queue_.pop_front();
    // Destroy without the lock: teardown may take milliseconds, and Close
    // must not wait for it.
    mu_.Unlock();
    object.reset();
    mu_.Lock();
    ++destroyed_;
  }
}

}  // namespace meshcast::worker
