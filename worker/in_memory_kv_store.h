// InMemoryKvStore: a KvStore in one process, for tests and for workers that
// share a process (e.g. several simulated workers in threads).
//
// Thread safety: thread-safe; Get blocks on a condition, not by polling.
#ifndef MESHCAST_WORKER_IN_MEMORY_KV_STORE_H_
#define MESHCAST_WORKER_IN_MEMORY_KV_STORE_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "worker/kv_store.h"

namespace meshcast::worker {

class InMemoryKvStore : public KvStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_IN_MEMORY_KV_STORE_H_
