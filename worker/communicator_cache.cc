#include "worker/communicator_cache.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "util/status_macros.h"

namespace meshcast::worker {

struct CachedCommunicator {
  enum class State { kIdle, kReserved, kLeased };
  std::string key;
  std::string id;
  std::shared_ptr<GlooCommunicator> comm;
  State state = State::kLeased;
  absl::Time last_used;
};

namespace {

using Entry = CachedCommunicator;

// The key of a request's communicator: what must be equal for two jobs of
// this worker to be able to share one.
std::string KeyOf(const CommunicatorRequest& request) {
  return absl::StrCat(request.gloo.hostname, "|", request.rank, "|",
                      request.gloo.connections, "|",
                      absl::StrJoin(request.rank_workers, ","));
}

std::string RecordKey(const std::string& job_id, int rank) {
  return absl::StrCat("job/", job_id, "/comm/", rank);
}

// One rank's agreement record: three lines, "nonce", the ids offered
// (idle, reserved for this job) and the other ids held for the key (idle or
// leased to other jobs), ids separated by spaces (ids are "<job id>/<hex>";
// job ids have no white space).
struct Record {
  std::string nonce;
  std::vector<std::string> idle;
  std::vector<std::string> held;
};

std::string Encode(const Record& record) {
  return absl::StrCat(record.nonce, "\n", absl::StrJoin(record.idle, " "),
                      "\n", absl::StrJoin(record.held, " "));
}

absl::StatusOr<Record> Decode(const std::string& text, const std::string& key) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (lines.size() != 3 || lines[0].empty()) {
    return absl::DataLossError(absl::StrCat(
        "communicator agreement record '", key,
        "' is not 'nonce\\nidle ids\\nheld ids': '", text, "'"));
  }
  Record record;
  record.nonce = lines[0];
  record.idle = absl::StrSplit(lines[1], ' ', absl::SkipEmpty());
  record.held = absl::StrSplit(lines[2], ' ', absl::SkipEmpty());
  return record;
}

std::string NewNonce() {
  static thread_local std::mt19937_64 random(std::random_device{}());
  return absl::StrCat(absl::Hex(random(), absl::kZeroPad16));
}

// Waits for `key` in `kv` like the Gloo rendezvous does: bounded by
// `timeout`, re-checking `cancelled` every `poll`.
absl::StatusOr<std::string> WaitForKey(KvStore& kv, const std::string& key,
                                       const GlooOptions& options,
                                       absl::Time deadline,
                                       const std::function<bool()>& cancelled) {
  while (true) {
    if (cancelled && cancelled()) {
      return absl::CancelledError("rendezvous cancelled");
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous: key '", key,
          "' (published by a peer worker) did not appear within ",
          absl::FormatDuration(options.rendezvous_timeout)));
    }
    const absl::Time attempt_start = absl::Now();
    absl::StatusOr<std::string> value =
        kv.Get(key, std::min(left, options.poll_interval));
    if (value.ok()) return value;
    const absl::StatusCode code = value.status().code();
    if (code != absl::StatusCode::kDeadlineExceeded &&
        code != absl::StatusCode::kNotFound &&
        code != absl::StatusCode::kUnavailable) {
      return value.status();
    }
    // A store that fails fast must not turn this into a busy loop.
    const absl::Duration spent = absl::Now() - attempt_start;
    if (spent < options.poll_interval) {
      absl::SleepFor(
          std::min(options.poll_interval - spent, deadline - absl::Now()));
    }
  }
}

}  // namespace

CommunicatorLease::~CommunicatorLease() = default;

CommunicatorCache::CommunicatorCache(CommunicatorCacheOptions options,
                                     std::shared_ptr<DeferredCloser> closer)
    : options_(options), closer_(std::move(closer)) {
  evictor_ = std::thread([this] { EvictLoop(); });
}

CommunicatorCache::~CommunicatorCache() {
  std::vector<std::shared_ptr<Entry>> idle;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (const std::shared_ptr<Entry>& entry : entries_) {
      if (entry->state == Entry::State::kIdle) idle.push_back(entry);
    }
    entries_.clear();
  }
  evictor_.join();
  for (const std::shared_ptr<Entry>& entry : idle) {
    entry->comm->Abort("worker shutting down");
    entry->comm.reset();
  }
}

void CommunicatorCache::EvictLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time now = absl::Now();
    absl::Time next = now + options_.idle_timeout;
    std::vector<std::shared_ptr<Entry>> expired;
    for (const std::shared_ptr<Entry>& entry : entries_) {
      if (entry->state != Entry::State::kIdle) continue;
      const absl::Time expiry = entry->last_used + options_.idle_timeout;
      if (expiry <= now) {
        expired.push_back(entry);
      } else {
        next = std::min(next, expiry);
      }
    }
    for (const std::shared_ptr<Entry>& entry : expired) DropLocked(entry, true);
    mu_.AwaitWithDeadline(absl::Condition(&stopping_), next);
  }
}

void CommunicatorCache::Close(std::shared_ptr<GlooCommunicator> comm) {
  if (comm == nullptr) return;
  // Closing the connections at once tells peers holding the same
  // communicator that it is gone.
  comm->Abort("communicator dropped from the cache");
  if (closer_ != nullptr && comm.use_count() == 1) {
    closer_->Close(
        std::make_unique<std::shared_ptr<GlooCommunicator>>(std::move(comm)));
  }
  // Otherwise the last holder (a lease) destroys it.
}

void CommunicatorCache::DropLocked(const std::shared_ptr<Entry>& entry,
                                   bool evicted) {
  auto it = std::find(entries_.begin(), entries_.end(), entry);
  if (it == entries_.end()) return;
  entries_.erase(it);
  ++(evicted ? stats_.evicted : stats_.dropped);
  std::shared_ptr<GlooCommunicator> comm = std::move(entry->comm);
  // Close outside the lock would be nicer, but Abort only closes sockets
  // and the deferred closer only queues.
  Close(std::move(comm));
}

CommunicatorCache::Stats CommunicatorCache::stats() const {
  absl::MutexLock lock(&mu_);
  Stats stats = stats_;
  stats.entries = static_cast<int>(entries_.size());
  stats.idle = 0;
  for (const std::shared_ptr<Entry>& entry : entries_) {
    if (entry->state == Entry::State::kIdle) ++stats.idle;
  }
  return stats;
}

absl::StatusOr<CommunicatorCache::Agreement> CommunicatorCache::Agree(
    KvStore& kv, const CommunicatorRequest& request, const std::string& key,
    const std::vector<std::shared_ptr<Entry>>& reserved,
    const std::function<bool()>& cancelled) {
  Record mine;
  mine.nonce = NewNonce();
  for (const std::shared_ptr<Entry>& entry : reserved) {
    mine.idle.push_back(entry->id);
  }
  {
    absl::MutexLock lock(&mu_);
    for (const std::shared_ptr<Entry>& entry : entries_) {
      if (entry->key == key && std::find(reserved.begin(), reserved.end(),
                                         entry) == reserved.end()) {
        mine.held.push_back(entry->id);
      }
    }
  }
  RETURN_IF_ERROR(
      kv.Set(RecordKey(request.job_id, request.rank), Encode(mine)));

  const absl::Time deadline = absl::Now() + request.gloo.rendezvous_timeout;
  std::vector<Record> records(request.size);
  records[request.rank] = mine;
  for (int r = 0; r < request.size; ++r) {
    if (r == request.rank) continue;
    const std::string record_key = RecordKey(request.job_id, r);
    ASSIGN_OR_RETURN(const std::string text,
                     WaitForKey(kv, record_key, request.gloo, deadline,
                                cancelled));
    ASSIGN_OR_RETURN(records[r], Decode(text, record_key));
  }

  // Ids idle on every rank; the greatest wins (every rank sees the same
  // records, so every rank picks the same).
  absl::flat_hash_set<std::string> common(records[0].idle.begin(),
                                          records[0].idle.end());
  for (int r = 1; r < request.size; ++r) {
    absl::flat_hash_set<std::string> next;
    for (const std::string& id : records[r].idle) {
      if (common.contains(id)) next.insert(id);
    }
    common = std::move(next);
  }
  Agreement agreement;
  for (const std::string& id : common) {
    agreement.reuse_id = std::max(agreement.reuse_id, id);
  }
  // Ours that some peer has neither idle nor leased: gone there.
  for (const std::string& id : mine.idle) {
    for (int r = 0; r < request.size; ++r) {
      const Record& record = records[r];
      if (std::find(record.idle.begin(), record.idle.end(), id) ==
              record.idle.end() &&
          std::find(record.held.begin(), record.held.end(), id) ==
              record.held.end()) {
        agreement.gone.push_back(id);
        break;
      }
    }
  }
  agreement.new_id = absl::StrCat(request.job_id, "/", records[0].nonce);
  return agreement;
}

void CommunicatorCache::Unreserve(
    const std::vector<std::shared_ptr<Entry>>& reserved, const Entry* keep,
    const std::vector<std::string>& gone) {
  absl::MutexLock lock(&mu_);
  for (const std::shared_ptr<Entry>& entry : reserved) {
    if (entry.get() == keep) continue;
    if (std::find(gone.begin(), gone.end(), entry->id) != gone.end()) {
      DropLocked(entry, /*evicted=*/false);
    } else if (entry->state == Entry::State::kReserved) {
      entry->state = Entry::State::kIdle;
    }
  }
}

absl::StatusOr<std::unique_ptr<CommunicatorLease>> CommunicatorCache::Acquire(
    KvStore& kv, const CommunicatorRequest& request,
    std::function<bool()> cancelled) {
  if (request.size < 2 || request.rank < 0 || request.rank >= request.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "communicator for job ", request.job_id, ": rank ", request.rank,
        " of size ", request.size, ": need 0 <= rank < size and size >= 2"));
  }
  if (static_cast<int>(request.rank_workers.size()) != request.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "communicator for job ", request.job_id, ": rank_workers has ",
        request.rank_workers.size(), " names for ", request.size,
        " ranks; the cache keys communicators by them"));
  }
  const std::string key = KeyOf(request);
  // Offer one: the greatest id idle here (ids start with the zero-padded
  // job id, so usually the most recent). Offering all
  // would leave a concurrent job of the same workers nothing to offer; with
  // one each, jobs that reach the workers in the same order each find a
  // communicator to share with the peers.
  std::vector<std::shared_ptr<Entry>> reserved;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Entry> best;
    for (const std::shared_ptr<Entry>& entry : entries_) {
      if (entry->key == key && entry->state == Entry::State::kIdle &&
          (best == nullptr || entry->id > best->id)) {
        best = entry;
      }
    }
    if (best != nullptr) {
      best->state = Entry::State::kReserved;
      reserved.push_back(best);
    }
  }
  absl::StatusOr<Agreement> agreement =
      Agree(kv, request, key, reserved, cancelled);
  if (!agreement.ok()) {
    Unreserve(reserved, nullptr, {});
    return agreement.status();
  }

  auto lease = std::unique_ptr<CommunicatorLease>(new CommunicatorLease);
  if (!agreement->reuse_id.empty()) {
    std::shared_ptr<Entry> chosen;
    for (const std::shared_ptr<Entry>& entry : reserved) {
      if (entry->id == agreement->reuse_id) chosen = entry;
    }
    Unreserve(reserved, chosen.get(), agreement->gone);
    absl::MutexLock lock(&mu_);
    chosen->state = Entry::State::kLeased;
    ++stats_.reused;
    lease->comm_ = chosen->comm;
    lease->entry_ = chosen;
    lease->reused_ = true;
    lease->id_ = chosen->id;
    return lease;
  }

  // No common one: the reserved ones go back, but those that some peer no
  // longer has at all are dead (their connections are closed there) and
  // are dropped.
  Unreserve(reserved, nullptr, agreement->gone);

  GlooOptions gloo = request.gloo;
  gloo.peer_names = request.rank_workers;
  ASSIGN_OR_RETURN(
      std::unique_ptr<GlooCommunicator> created,
      GlooCommunicator::Create(kv, absl::StrCat("job/", request.job_id, "/gloo/"),
                               request.rank, request.size, gloo, cancelled));
  std::shared_ptr<GlooCommunicator> comm(std::move(created));
  lease->comm_ = comm;
  lease->id_ = agreement->new_id;
  absl::MutexLock lock(&mu_);
  ++stats_.created;
  if (options_.max_entries <= 0) return lease;
  if (static_cast<int>(entries_.size()) >= options_.max_entries) {
    // Make room: the least recently used idle one.
    std::shared_ptr<Entry> oldest;
    for (const std::shared_ptr<Entry>& entry : entries_) {
      if (entry->state == Entry::State::kIdle &&
          (oldest == nullptr || entry->last_used < oldest->last_used)) {
        oldest = entry;
      }
    }
    if (oldest == nullptr) return lease;  // all in use: run uncached
    DropLocked(oldest, /*evicted=*/true);
  }
  auto entry = std::make_shared<Entry>();
  entry->key = key;
  entry->id = agreement->new_id;
  entry->comm = comm;
  entry->state = Entry::State::kLeased;
  entry->last_used = absl::Now();
  entries_.push_back(entry);
  lease->entry_ = entry;
  return lease;
}

void CommunicatorCache::Release(std::unique_ptr<CommunicatorLease> lease,
                                bool healthy) {
  if (lease == nullptr) return;
  std::shared_ptr<GlooCommunicator> comm = std::move(lease->comm_);
  healthy = healthy && comm != nullptr && !comm->aborted();
  {
    absl::MutexLock lock(&mu_);
    const std::shared_ptr<Entry>& entry = lease->entry_;
    const bool cached =
        entry != nullptr && !stopping_ &&
        std::find(entries_.begin(), entries_.end(), entry) != entries_.end();
    if (cached && healthy) {
      entry->state = Entry::State::kIdle;
      entry->last_used = absl::Now();
      return;
    }
    if (cached) {
      // Count it and take it out; `comm` (our reference) is closed below.
      entries_.erase(std::find(entries_.begin(), entries_.end(), entry));
      ++stats_.dropped;
      entry->comm.reset();
    }
  }
  Close(std::move(comm));
}

}  // namespace meshcast::worker
