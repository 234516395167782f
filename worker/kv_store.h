// KvStore: the rendezvous key-value store that bootstraps communicators.
//
// Workers of a job publish their connection addresses under agreed keys and
// wait for each other's (Gloo rendezvous now, NCCL unique ids later). In a
// cluster the store is the controller's KvSet/KvGet API
// (controller_kv_store.h); tests use InMemoryKvStore.
//
//   RETURN_IF_ERROR(kv.Set("job/j1/gloo/0", address));
//   ASSIGN_OR_RETURN(std::string peer, kv.Get("job/j1/gloo/1",
//   absl::Seconds(30)));
//
// Thread safety: implementations are thread-safe.
#ifndef MESHCAST_WORKER_KV_STORE_H_
#define MESHCAST_WORKER_KV_STORE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace meshcast::worker {

class KvStore {
 public:
  virtual ~KvStore() = default;

  // Stores `value` (arbitrary bytes) under `key`, replacing any old value.
  virtual absl::Status Set(const std::string& key,
                           const std::string& value) = 0;

  // Returns the value of `key`, waiting up to `timeout` for it to be set.
  // DEADLINE_EXCEEDED if it was not set in time; other codes for failures
  // of the store itself (e.g. UNAVAILABLE when the controller is down).
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          absl::Duration timeout) = 0;
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_KV_STORE_H_
