// CommunicatorCache: keeps the Gloo communicators of finished jobs so that
// the next job on the same workers skips the bootstrap (rendezvous, TCP
// connects, and the 10-20 ms close), which dominated a tiny job's latency.
//
// A communicator is cached under a key: this worker's data address, its
// rank, the number of connections per pair, and the ordered list of the
// job's workers (WorkerProgram.rank_workers). The peers' data addresses are
// not in the program; a peer that restarted (on any address) has an empty
// cache, which the agreement below detects.
//
// Agreement. Whether a job reuses a communicator must be decided alike by
// all of its ranks, although their caches may differ (a worker restarted,
// evicted an idle entry, or dropped one after a failure the others did not
// see, or a concurrent job holds one). So every Acquire runs one round
// through the KvStore: rank r publishes, under "job/<job_id>/comm/<r>", the
// id it offers (its most recent idle communicator for the key, reserved so
// that a concurrent job of the same workers cannot take it meanwhile; none
// if it has none idle), the other ids it holds for the key (idle, or leased
// to other jobs), and a random nonce. Every rank reads every other rank's
// record and computes the same answer:
//   - the id offered by every rank: reuse it;
//   - none: connect a new communicator (keys "job/<job_id>/gloo/") whose id
//     is "<job_id>/<rank 0's nonce>", unique even if job ids repeat after a
//     controller restart.
// An id this rank offers that some peer neither offers nor holds is gone
// there (that peer dropped or evicted it, or restarted): it is dropped here;
// otherwise an offer not taken goes back to the idle set.
//
// Exclusivity: a communicator is leased to one job at a time, so messages of
// concurrent jobs never share one and their tags cannot collide; two jobs on
// disjoint devices of the same workers at once use two communicators (both
// cached afterwards, up to the bound). Concurrent jobs of the same workers
// that reach them in different orders may offer different ids and then
// connect new ones: correct, only slower. A job that finished on every rank
// has matched every message it sent, so the next job on a reused
// communicator starts with no stray message in flight.
//
// Dropping: Release(lease, healthy=false) (any failure or abort of the job
// on this worker) aborts the communicator, which closes its connections, so
// the peers' copies fail fast, and closes it on the DeferredCloser. Idle
// entries are closed after `idle_timeout` (a thread of the cache wakes for
// it) and when the cache is full (least recently used idle first); a new
// communicator that finds the cache full of leased ones is used uncached
// and closed after its job.
//
//   CommunicatorCache cache(CommunicatorCacheOptions{}, closer);
//   ASSIGN_OR_RETURN(std::unique_ptr<CommunicatorLease> lease,
//                    cache.Acquire(kv, request, cancelled));
//   absl::Status status = Run(lease->comm());
//   cache.Release(std::move(lease), /*healthy=*/status.ok());
//
// Errors (Acquire): as GlooCommunicator::Create (DEADLINE_EXCEEDED naming
// the key of a rank that never published, CANCELLED when `cancelled`
// turned true, UNAVAILABLE for connect failures), InvalidArgument for a
// request whose rank, size or rank_workers do not fit together.
// Thread safety: thread-safe; Acquire blocks on the peers (bounded by
// request.gloo.rendezvous_timeout, polled for cancellation every
// poll_interval).
#ifndef MESHCAST_WORKER_COMMUNICATOR_CACHE_H_
#define MESHCAST_WORKER_COMMUNICATOR_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/deferred_closer.h"
#include "worker/gloo_communicator.h"
#include "worker/kv_store.h"

namespace meshcast::worker {

struct CommunicatorCacheOptions {
  // Communicators kept (idle and leased together); 0: none is kept, but the
  // agreement round still runs, so every worker of a cluster behaves alike.
  int max_entries = 64;
  // An idle communicator is closed after this long unused.
  absl::Duration idle_timeout = absl::Minutes(5);
};

// What a job needs a communicator for.
struct CommunicatorRequest {
  std::string job_id;
  // Worker of each rank (index = rank); size() == size.
  std::vector<std::string> rank_workers;
  int rank = 0;
  int size = 1;
  // hostname (this worker's data address), connections and timeouts; the
  // peer names are set from rank_workers.
  GlooOptions gloo;
};

// A cache entry (defined in the .cc).
struct CachedCommunicator;

// One job's use of a communicator; hand it back with Release.
class CommunicatorLease {
 public:
  ~CommunicatorLease();
  CommunicatorLease(const CommunicatorLease&) = delete;
  CommunicatorLease& operator=(const CommunicatorLease&) = delete;

  GlooCommunicator& comm() const { return *comm_; }
  // True when an earlier job's communicator was agreed on.
  bool reused() const { return reused_; }
  // The agreed id ("<creating job id>/<nonce>").
  const std::string& id() const { return id_; }

 private:
  friend class CommunicatorCache;
  using Entry = CachedCommunicator;
  CommunicatorLease() = default;

  std::shared_ptr<GlooCommunicator> comm_;
  std::shared_ptr<Entry> entry_;  // null: not cached
  bool reused_ = false;
  std::string id_;
};

class CommunicatorCache {
 public:
  // `closer` (optional) closes dropped communicators off the caller's path.
  CommunicatorCache(CommunicatorCacheOptions options,
                    std::shared_ptr<DeferredCloser> closer);
  // Closes every idle communicator; leases still out keep theirs alive
  // until released (then it is closed).
  ~CommunicatorCache();
  CommunicatorCache(const CommunicatorCache&) = delete;
  CommunicatorCache& operator=(const CommunicatorCache&) = delete;

  // Agrees with the job's other ranks on a communicator (see above) and
  // leases it to the job.
  absl::StatusOr<std::unique_ptr<CommunicatorLease>> Acquire(
      KvStore& kv, const CommunicatorRequest& request,
      std::function<bool()> cancelled = nullptr);

  // Ends a lease: a healthy communicator goes back to the idle set, any
  // other (or one that was aborted) is dropped. Null is ignored.
  void Release(std::unique_ptr<CommunicatorLease> lease, bool healthy);

  struct Stats {
    int64_t created = 0;  // new communicators connected
    int64_t reused = 0;   // leases of a cached one
    int64_t dropped = 0;  // closed after a failure, or gone on a peer
    int64_t evicted = 0;  // closed idle (timeout or room)
    int entries = 0;      // kept now (idle, reserved or leased)
    int idle = 0;
  };
  Stats stats() const;

 private:
  using Entry = CachedCommunicator;

  // Publishes this rank's record, reads the others'; returns the agreed id
  // to reuse ("" if none), the new communicator's id, and the reserved ids
  // some peer has neither idle nor leased.
  struct Agreement {
    std::string reuse_id;
    std::string new_id;
    std::vector<std::string> gone;
  };
  absl::StatusOr<Agreement> Agree(
      KvStore& kv, const CommunicatorRequest& request, const std::string& key,
      const std::vector<std::shared_ptr<Entry>>& reserved,
      const std::function<bool()>& cancelled);
  // Puts reserved entries back (idle) except `keep`; drops those listed in
  // `gone`.
  void Unreserve(const std::vector<std::shared_ptr<Entry>>& reserved,
                 const Entry* keep, const std::vector<std::string>& gone);
  // Removes `entry` and closes its communicator.
  void DropLocked(const std::shared_ptr<Entry>& entry, bool evicted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Close(std::shared_ptr<GlooCommunicator> comm);
  void EvictLoop();

  const CommunicatorCacheOptions options_;
  const std::shared_ptr<DeferredCloser> closer_;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread evictor_;
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_COMMUNICATOR_CACHE_H_
