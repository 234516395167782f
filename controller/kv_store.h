// KvStore: the rendezvous key-value store behind Controller.KvSet/KvGet,
// used by workers to bootstrap their communicators (Gloo store now, NCCL
// unique ids later). Keys of a job live under "job/<job_id>/" and are
// deleted when the job ends.
//
//   kv.Set("job/job-000001/gloo/rank0", address);
//   absl::StatusOr<std::string> v =
//       kv.Get("job/job-000001/gloo/rank0", absl::Seconds(30));
//   kv.DeletePrefix("job/job-000001/");
//
// Limits keep a misbehaving client from exhausting memory: keys up to 1 KiB,
// values up to 4 MiB, at most 100000 keys and 256 MiB in all.
//
// Thread safety: thread-safe. Get blocks the calling thread (on a condition
// variable) until the key appears, the timeout passes, or Shutdown().
#ifndef MESHCAST_CONTROLLER_KV_STORE_H_
#define MESHCAST_CONTROLLER_KV_STORE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshcast {

class KvStore {
 public:
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = 4 << 20;
  static constexpr size_t kMaxKeys = 100000;
  static constexpr size_t kMaxTotalBytes = 256 << 20;

  // Stores or replaces `key`. INVALID_ARGUMENT for an empty or oversized key
  // or value, RESOURCE_EXHAUSTED when the store is full.
  absl::Status Set(absl::string_view key, absl::string_view value)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Waits up to `timeout` for `key`. DEADLINE_EXCEEDED naming the key when
  // it does not appear in time, UNAVAILABLE after Shutdown().
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Removes every key starting with `prefix`; returns how many.
  int DeletePrefix(absl::string_view prefix) ABSL_LOCKS_EXCLUDED(mu_);

  // Wakes every waiting Get with UNAVAILABLE; later Gets fail at once.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // signalled on Set and Shutdown
  // Ordered so that DeletePrefix is a range erase.
  absl::btree_map<std::string, std::string> entries_ ABSL_GUARDED_BY(mu_);
  size_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_KV_STORE_H_
