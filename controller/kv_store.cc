#include "controller/kv_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace meshcast {

absl::Status KvStore::Set(absl::string_view key, absl::string_view value) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key must be 1..", kMaxKeyBytes, " bytes"));
  }
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value of key ", key, " is ", value.size(),
                     " bytes; at most ", kMaxValueBytes));
  }
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  const size_t old_bytes =
      it == entries_.end() ? 0 : it->first.size() + it->second.size();
  const size_t new_bytes = key.size() + value.size();
  if (it == entries_.end() && entries_.size() >= kMaxKeys) {
    return absl::ResourceExhaustedError(
        absl::StrCat("key-value store holds ", kMaxKeys, " keys already"));
  }
  if (total_bytes_ - old_bytes + new_bytes > kMaxTotalBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("key-value store is full (", kMaxTotalBytes, " bytes)"));
  }
  total_bytes_ = total_bytes_ - old_bytes + new_bytes;
  if (it == entries_.end()) {
    entries_.emplace(std::string(key), std::string(value));
  } else {
    it->second.assign(value.data(), value.size());
  }
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvStore::Get(absl::string_view key,
                                         absl::Duration timeout) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key must be 1..", kMaxKeyBytes, " bytes"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (true) {
    if (shutdown_) {
      return absl::UnavailableError("controller is shutting down");
    }
    auto it = entries_.find(key);
    if (it != entries_.end()) return it->second;
    // WaitWithDeadline returns true on timeout; re-check the key once more
    // in case it arrived together with the deadline.
    if (changed_.WaitWithDeadline(&mu_, deadline)) {
      it = entries_.find(key);
      if (it != entries_.end()) return it->second;
      return absl::DeadlineExceededError(absl::StrCat(
          "key ", key, " not set within ", absl::FormatDuration(timeout)));
    }
  }
}

int KvStore::DeletePrefix(absl::string_view prefix) {
  absl::MutexLock lock(&mu_);
  int removed = 0;
  auto it = entries_.lower_bound(prefix);
  while (it != entries_.end() && absl::StartsWith(it->first, prefix)) {
    total_bytes_ -= it->first.size() + it->second.size();
    it = entries_.erase(it);
    ++removed;
  }
  return removed;
}

void KvStore::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  changed_.SignalAll();
}

size_t KvStore::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace meshcast
