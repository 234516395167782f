#include "controller/worker_client.h"

namespace meshcast {

void CallCanceller::Cancel() {
  // Hooks run under the lock so that Remove() cannot return (and the caller
  // free what a hook points to, e.g. a gRPC context) while one is running.
  absl::MutexLock lock(&mu_);
  if (cancelled_) return;
  cancelled_ = true;
  for (auto& [id, hook] : hooks_) hook();
}

bool CallCanceller::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

int CallCanceller::Add(std::function<void()> hook) {
  int id;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
    if (!cancelled_) {
      hooks_[id] = std::move(hook);
      return id;
    }
  }
  hook();
  return id;
}

void CallCanceller::Remove(int id) {
  absl::MutexLock lock(&mu_);
  hooks_.erase(id);
}

}  // namespace meshcast
