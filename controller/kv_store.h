// KvStore: the rendezvous key-value store behind Controller.KvSet/KvGet,
// used by workers to bootstrap their communicators (Gloo store, NCCL unique
// ids). Every key lives in one job's namespace, "job/<job_id>/<name>"; the
// keys of a job are deleted when the job ends (JobManager calls
// DeletePrefix). Who may touch a namespace is decided a layer up
// (kv_service.h: only the job's workers, only while it runs).
//
//   kv.Set("job/job-000001/gloo/rank0", address);
//   absl::StatusOr<std::string> v =
//       kv.Get("job/job-000001/gloo/rank0", absl::Seconds(30));
//   kv.GetAsync("job/job-000001/gloo/rank1", absl::Seconds(30),
//               [](absl::StatusOr<std::string> v) { ... });
//   kv.DeletePrefix("job/job-000001/");
//
// Waiting without a thread: GetAsync registers a waiter under its key and
// returns; the waiter's callback runs exactly once: at once (the key is
// there, a bad key, after Shutdown), or later on the Set of its key, on its
// timeout (the store's one timer thread), when DeletePrefix removes its
// namespace (ABORTED: the job ended), on CancelWait (CANCELLED), or on
// Shutdown (UNAVAILABLE). Callbacks run without the store's lock held, on
// the thread that caused them (Set's caller, the timer thread, ...), so they
// must be short and must not block.
//
// Limits keep a misbehaving client from exhausting memory: keys up to 1 KiB,
// values up to 4 MiB; per job at most Options::max_keys_per_job keys (4096)
// and max_bytes_per_job bytes of keys and values (16 MiB); in all at most
// 100000 keys and 256 MiB, and at most 65536 gets waiting at once.
//
// Errors: INVALID_ARGUMENT for an empty or oversized key or value;
// PERMISSION_DENIED for a key outside a job namespace; RESOURCE_EXHAUSTED
// naming the job and the quota, or the global limit; DEADLINE_EXCEEDED
// naming the key when a Get times out; UNAVAILABLE after Shutdown.
//
// Thread safety: thread-safe.
#ifndef MESHCAST_CONTROLLER_KV_STORE_H_
#define MESHCAST_CONTROLLER_KV_STORE_H_

#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshcast {

// The job id of a key "job/<job_id>/<name>" (job id and name non-empty, the
// id without '/'). PERMISSION_DENIED, naming the required prefix, for any
// other key.
absl::StatusOr<absl::string_view> KvJobOf(absl::string_view key);

// The namespace prefix of a job's keys: "job/<job_id>/".
std::string KvPrefixOf(absl::string_view job_id);

class KvStore {
 public:
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = 4 << 20;

  struct Options {
    // Per job (namespace): keys, and bytes of keys plus values.
    size_t max_keys_per_job = 4096;
    size_t max_bytes_per_job = 16 << 20;
    // The whole store.
    size_t max_keys = 100000;
    size_t max_total_bytes = 256 << 20;
    // Gets waiting at once (each holds a little memory, no thread).
    size_t max_waiters = 65536;
  };

  // Called exactly once with the value or the error.
  using GetCallback = absl::AnyInvocable<void(absl::StatusOr<std::string>)>;
  // Names a waiter for CancelWait; 0 names none.
  using WaiterId = uint64_t;

  KvStore() : KvStore(Options{}) {}
  explicit KvStore(Options options);
  // Shutdown().
  ~KvStore();
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  // Stores or replaces `key` and completes the waiters of `key`.
  absl::Status Set(absl::string_view key, absl::string_view value)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Waits up to `timeout` for `key` without holding a thread (see above).
  // Returns the waiter's id, or 0 when `done` already ran.
  WaiterId GetAsync(absl::string_view key, absl::Duration timeout,
                    GetCallback done) ABSL_LOCKS_EXCLUDED(mu_);

  // Completes waiter `id` with CANCELLED if it still waits; false if it had
  // already completed (or never existed).
  bool CancelWait(WaiterId id) ABSL_LOCKS_EXCLUDED(mu_);

  // GetAsync, blocking the caller until done (for tests and tools).
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Removes every key starting with `prefix` and completes the waiters of
  // such keys with ABORTED; returns how many keys it removed.
  int DeletePrefix(absl::string_view prefix) ABSL_LOCKS_EXCLUDED(mu_);

  // Completes every waiter with UNAVAILABLE and stops the timer thread;
  // later calls fail at once. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waiters not yet completed.
  size_t waiters() const ABSL_LOCKS_EXCLUDED(mu_);
  // Keys and bytes held in job `job_id`'s namespace.
  struct Usage {
    size_t keys = 0;
    size_t bytes = 0;
  };
  Usage usage(absl::string_view job_id) const ABSL_LOCKS_EXCLUDED(mu_);

  const Options& options() const { return options_; }

 private:
  struct Waiter {
    std::string key;
    absl::Time deadline;
    absl::Duration timeout;
    GetCallback done;
  };
  // A callback with its result, run once the lock is released.
  using Completion = std::pair<GetCallback, absl::StatusOr<std::string>>;

  // Unlinks waiter `id` from every index; returns its record.
  Waiter TakeWaiterLocked(WaiterId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void RunCompletions(std::vector<Completion> completions);
  void TimerLoop() ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::CondVar timer_wake_;  // a new earliest deadline, or Shutdown
  // Ordered so that DeletePrefix is a range erase.
  absl::btree_map<std::string, std::string> entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Usage> usage_ ABSL_GUARDED_BY(mu_);
  size_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Waiters by id, by key (ordered, for DeletePrefix) and by deadline.
  absl::flat_hash_map<WaiterId, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  absl::btree_multimap<std::string, WaiterId> waiting_keys_
      ABSL_GUARDED_BY(mu_);
  absl::btree_set<std::pair<absl::Time, WaiterId>> deadlines_
      ABSL_GUARDED_BY(mu_);
  WaiterId next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex join_mu_;  // Shutdown joins timer_ under it
  std::thread timer_;
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_KV_STORE_H_
