#include "controller/kv_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "util/text_safety.h"

namespace meshcast {
namespace {

constexpr absl::string_view kJobPrefix = "job/";

absl::Status CheckKey(absl::string_view key) {
  if (key.empty() || key.size() > KvStore::kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key must be 1..", KvStore::kMaxKeyBytes, " bytes; got ", key.size()));
  }
  return KvJobOf(key).status();
}

}  // namespace

absl::StatusOr<absl::string_view> KvJobOf(absl::string_view key) {
  if (absl::StartsWith(key, kJobPrefix)) {
    const absl::string_view rest = key.substr(kJobPrefix.size());
    const size_t slash = rest.find('/');
    if (slash != absl::string_view::npos && slash > 0 &&
        slash + 1 < rest.size()) {
      return rest.substr(0, slash);
    }
  }
  return absl::PermissionDeniedError(
      absl::StrCat("key ", QuotePrefix(key),
                   " is outside every job namespace; keys must start with "
                   "\"job/<job_id>/\" and name something after it"));
}

std::string KvPrefixOf(absl::string_view job_id) {
  return absl::StrCat(kJobPrefix, job_id, "/");
}

KvStore::KvStore(Options options) : options_(options) {
  timer_ = std::thread([this] { TimerLoop(); });
}

KvStore::~KvStore() { Shutdown(); }

absl::Status KvStore::Set(absl::string_view key, absl::string_view value) {
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value of key ", QuotePrefix(key), " is ", value.size(),
                     " bytes; at most ", kMaxValueBytes));
  }
  const absl::string_view job = *KvJobOf(key);
  std::vector<Completion> completions;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("controller is shutting down");
    auto it = entries_.find(key);
    const bool is_new = it == entries_.end();
    const size_t old_bytes = is_new ? 0 : it->first.size() + it->second.size();
    const size_t new_bytes = key.size() + value.size();
    auto usage_it = usage_.find(job);
    const Usage usage = usage_it == usage_.end() ? Usage{} : usage_it->second;
    if (is_new && usage.keys >= options_.max_keys_per_job) {
      return absl::ResourceExhaustedError(
          absl::StrCat("job ", QuotePrefix(job), " holds ", usage.keys,
                       " keys already: its key-value quota is ",
                       options_.max_keys_per_job, " keys per job"));
    }
    if (usage.bytes - old_bytes + new_bytes > options_.max_bytes_per_job) {
      return absl::ResourceExhaustedError(
          absl::StrCat("job ", QuotePrefix(job), " would hold ",
                       usage.bytes - old_bytes + new_bytes,
                       " bytes of keys and values: its key-value quota is ",
                       options_.max_bytes_per_job, " bytes per job"));
    }
    if (is_new && entries_.size() >= options_.max_keys) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "key-value store holds ", options_.max_keys, " keys already"));
    }
    if (total_bytes_ - old_bytes + new_bytes > options_.max_total_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "key-value store is full (", options_.max_total_bytes, " bytes)"));
    }
    total_bytes_ = total_bytes_ - old_bytes + new_bytes;
    Usage& updated = usage_[job];
    updated.bytes = usage.bytes - old_bytes + new_bytes;
    if (is_new) {
      ++updated.keys;
      entries_.emplace(std::string(key), std::string(value));
    } else {
      it->second.assign(value.data(), value.size());
    }
    std::vector<WaiterId> woken;
    for (auto [w, end] = waiting_keys_.equal_range(key); w != end; ++w) {
      woken.push_back(w->second);
    }
    for (WaiterId id : woken) {
      completions.emplace_back(TakeWaiterLocked(id).done, std::string(value));
    }
  }
  RunCompletions(std::move(completions));
  return absl::OkStatus();
}

KvStore::WaiterId KvStore::GetAsync(absl::string_view key,
                                    absl::Duration timeout, GetCallback done) {
  if (absl::Status status = CheckKey(key); !status.ok()) {
    done(status);
    return 0;
  }
  absl::StatusOr<std::string> result;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (shutdown_) {
      result = absl::UnavailableError("controller is shutting down");
    } else if (it != entries_.end()) {
      result = it->second;
    } else if (timeout <= absl::ZeroDuration()) {
      result = absl::DeadlineExceededError(
          absl::StrCat("key ", QuotePrefix(key), " is not set"));
    } else if (waiters_.size() >= options_.max_waiters) {
      result = absl::ResourceExhaustedError(
          absl::StrCat("key-value store has ", options_.max_waiters,
                       " gets waiting already; try again later"));
    } else {
      const WaiterId id = next_waiter_++;
      const absl::Time deadline = absl::Now() + timeout;
      waiting_keys_.emplace(std::string(key), id);
      deadlines_.emplace(deadline, id);
      waiters_.emplace(
          id, Waiter{std::string(key), deadline, timeout, std::move(done)});
      timer_wake_.Signal();
      return id;
    }
  }
  done(std::move(result));
  return 0;
}

bool KvStore::CancelWait(WaiterId id) {
  GetCallback done;
  {
    absl::MutexLock lock(&mu_);
    if (!waiters_.contains(id)) return false;
    done = TakeWaiterLocked(id).done;
  }
  done(absl::CancelledError("the caller cancelled its wait"));
  return true;
}

absl::StatusOr<std::string> KvStore::Get(absl::string_view key,
                                         absl::Duration timeout) {
  absl::Notification finished;
  absl::StatusOr<std::string> result;
  GetAsync(key, timeout, [&](absl::StatusOr<std::string> value) {
    result = std::move(value);
    finished.Notify();
  });
  finished.WaitForNotification();
  return result;
}

int KvStore::DeletePrefix(absl::string_view prefix) {
  std::vector<Completion> completions;
  int removed = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.lower_bound(prefix);
    while (it != entries_.end() && absl::StartsWith(it->first, prefix)) {
      const size_t bytes = it->first.size() + it->second.size();
      total_bytes_ -= bytes;
      absl::StatusOr<absl::string_view> job = KvJobOf(it->first);
      auto usage = usage_.find(*job);  // every stored key has a job
      usage->second.bytes -= bytes;
      if (--usage->second.keys == 0) usage_.erase(usage);
      it = entries_.erase(it);
      ++removed;
    }
    std::vector<WaiterId> ended;
    for (auto w = waiting_keys_.lower_bound(prefix);
         w != waiting_keys_.end() && absl::StartsWith(w->first, prefix); ++w) {
      ended.push_back(w->second);
    }
    for (WaiterId id : ended) {
      Waiter waiter = TakeWaiterLocked(id);
      completions.emplace_back(
          std::move(waiter.done),
          absl::AbortedError(
              absl::StrCat("key ", QuotePrefix(waiter.key),
                           " was deleted with its namespace: the job ended")));
    }
  }
  RunCompletions(std::move(completions));
  return removed;
}

void KvStore::Shutdown() {
  std::vector<Completion> completions;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    std::vector<WaiterId> all;
    for (const auto& [id, waiter] : waiters_) all.push_back(id);
    for (WaiterId id : all) {
      completions.emplace_back(
          TakeWaiterLocked(id).done,
          absl::UnavailableError("controller is shutting down"));
    }
    timer_wake_.SignalAll();
  }
  RunCompletions(std::move(completions));
  // Joined once; a concurrent second caller waits for the first.
  absl::MutexLock join_lock(&join_mu_);
  if (timer_.joinable() && timer_.get_id() != std::this_thread::get_id()) {
    timer_.join();
  }
}

size_t KvStore::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

size_t KvStore::waiters() const {
  absl::MutexLock lock(&mu_);
  return waiters_.size();
}

KvStore::Usage KvStore::usage(absl::string_view job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = usage_.find(job_id);
  return it == usage_.end() ? Usage{} : it->second;
}

KvStore::Waiter KvStore::TakeWaiterLocked(WaiterId id) {
  auto it = waiters_.find(id);
  Waiter waiter = std::move(it->second);
  waiters_.erase(it);
  deadlines_.erase({waiter.deadline, id});
  for (auto [w, end] = waiting_keys_.equal_range(waiter.key); w != end; ++w) {
    if (w->second == id) {
      waiting_keys_.erase(w);
      break;
    }
  }
  return waiter;
}

void KvStore::RunCompletions(std::vector<Completion> completions) {
  for (auto& [done, result] : completions) done(std::move(result));
}

void KvStore::TimerLoop() {
  absl::MutexLock lock(&mu_);
  while (!shutdown_) {
    const absl::Time now = absl::Now();
    std::vector<Completion> expired;
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      const WaiterId id = deadlines_.begin()->second;
      Waiter waiter = TakeWaiterLocked(id);
      expired.emplace_back(
          std::move(waiter.done),
          absl::DeadlineExceededError(
              absl::StrCat("key ", QuotePrefix(waiter.key), " not set within ",
                           absl::FormatDuration(waiter.timeout))));
    }
    if (!expired.empty()) {
      mu_.Unlock();
      RunCompletions(std::move(expired));
      mu_.Lock();
      continue;
    }
    const absl::Time next =
        deadlines_.empty() ? absl::InfiniteFuture() : deadlines_.begin()->first;
    timer_wake_.WaitWithDeadline(&mu_, next);
  }
}

}  // namespace meshcast
