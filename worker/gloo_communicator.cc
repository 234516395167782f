#include "worker/gloo_communicator.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"

namespace meshcast::worker {
namespace {

std::chrono::milliseconds ToMillis(absl::Duration d) {
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// What a connect shares with the caller that waits for it (Create): a
// caller that gives up (cancelled) marks it abandoned, after which the
// connect's store no longer touches the KvStore, which the caller's owner may
// destroy once Create returned.
struct ConnectGuard {
  // Held across every KvStore call of the store, so that once Abandon
  // returned no call is in progress and none starts.
  absl::Mutex kv_mu;
  std::atomic<bool> abandoned{false};

  void Abandon() {
    absl::MutexLock lock(&kv_mu);
    abandoned.store(true);
  }
};

// Adapts a KvStore (plus a key prefix) to Gloo's rendezvous Store. Gloo
// expects exceptions from a store; the adapter throws gloo::IoException and
// remembers the Status so Create can return the real cause.
class KvGlooStore : public gloo::rendezvous::Store {
 public:
  KvGlooStore(KvStore& kv, std::string prefix, const GlooOptions& options,
              std::function<bool()> cancelled,
              std::shared_ptr<ConnectGuard> guard)
      : kv_(kv),
        prefix_(std::move(prefix)),
        options_(options),
        cancelled_(std::move(cancelled)),
        guard_(std::move(guard)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status status;
    {
      absl::MutexLock lock(&guard_->kv_mu);
      if (guard_->abandoned.load()) {
        status = absl::CancelledError("rendezvous cancelled");
      } else {
        status = kv_.Set(prefix_ + key, std::string(data.begin(), data.end()));
      }
    }
    if (!status.ok()) Fail(status);
  }

  std::vector<char> get(const std::string& key) override {
    wait({key});
    const std::string& value = values_.at(key);
    return std::vector<char>(value.begin(), value.end());
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, std::chrono::milliseconds(
                   absl::ToInt64Milliseconds(options_.rendezvous_timeout)));
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const absl::Time deadline =
        absl::Now() +
        std::min(absl::FromChrono(timeout), options_.rendezvous_timeout);
    for (const std::string& key : keys) {
      while (!values_.contains(key)) {
        if (guard_->abandoned.load() || (cancelled_ && cancelled_())) {
          Fail(absl::CancelledError("rendezvous cancelled"));
        }
        const absl::Duration left = deadline - absl::Now();
        if (left <= absl::ZeroDuration()) {
          Fail(absl::DeadlineExceededError(absl::StrCat(
              "rendezvous: key '", prefix_, key,
              "' (published by a peer worker) did not appear within ",
              absl::FormatDuration(options_.rendezvous_timeout))));
        }
        const absl::Time attempt_start = absl::Now();
        absl::StatusOr<std::string> value;
        {
          absl::MutexLock lock(&guard_->kv_mu);
          if (guard_->abandoned.load()) {
            value = absl::CancelledError("rendezvous cancelled");
          } else {
            value =
                kv_.Get(prefix_ + key, std::min(left, options_.poll_interval));
          }
        }
        if (value.ok()) {
          values_[key] = *std::move(value);
          break;
        }
        const absl::StatusCode code = value.status().code();
        if (code != absl::StatusCode::kDeadlineExceeded &&
            code != absl::StatusCode::kNotFound &&
            code != absl::StatusCode::kUnavailable) {
          Fail(value.status());
        }
        // A store that fails fast (controller restarting) must not turn
        // this into a busy loop.
        const absl::Duration spent = absl::Now() - attempt_start;
        if (spent < options_.poll_interval) {
          absl::SleepFor(
              std::min(options_.poll_interval - spent, deadline - absl::Now()));
        }
      }
    }
  }

  const absl::Status& status() const { return status_; }

 private:
  [[noreturn]] void Fail(absl::Status status) {
    status_ = status;
    throw gloo::IoException(status.ToString());
  }

  KvStore& kv_;
  const std::string prefix_;
  const GlooOptions options_;
  const std::function<bool()> cancelled_;
  const std::shared_ptr<ConnectGuard> guard_;
  // Gloo calls the store from the rendezvous thread only.
  absl::flat_hash_map<std::string, std::string> values_;
  absl::Status status_;
};

absl::Status FromException(absl::string_view what, const std::exception& e) {
  const std::string message = absl::StrCat(what, ": ", e.what());
  if (absl::StrContains(e.what(), "imed out") ||
      absl::StrContains(e.what(), "imeout")) {
    return absl::DeadlineExceededError(message);
  }
  return absl::UnavailableError(message);
}

// Gloo writes to its TCP sockets with writev(2), which raises SIGPIPE when
// the peer's socket is already gone (a worker killed mid-job resets its
// connections); SIGPIPE's default action ends the whole process silently,
// with no log line and no core. Gloo handles the EPIPE error itself, so the
// signal only has to be ignored. Process-wide, but harmless for the rest of
// the worker: gRPC sends with MSG_NOSIGNAL and never relies on SIGPIPE.
void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] { signal(SIGPIPE, SIG_IGN); });
}

}  // namespace

class GlooRequest;

// One TCP connection to every peer: a Gloo context and its device.
struct GlooLink {
  // The device owns Gloo's event loop thread; it must outlive the context.
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
};

struct GlooCommunicator::State {
  State(std::vector<GlooLink> links, absl::Duration op_timeout,
        std::vector<std::string> peer_names)
      : links(std::move(links)),
        op_timeout(op_timeout),
        peer_names(std::move(peer_names)) {}

  ~State() {
    // Contexts before their devices (reverse order of creation).
    for (GlooLink& link : links) link.context.reset();
  }

  // The link a message with `tag` from rank `from` to rank `to` uses (see
  // LinkOf); both sides compute the same.
  gloo::Context& ContextFor(uint64_t tag, int from, int to) const {
    return *links[GlooCommunicator::LinkOf(static_cast<int>(links.size()), tag,
                                           from, to)]
                .context;
  }

  // "send to rank 3 (worker-3) (tag 7, 1024 bytes)", for errors; the name
  // is left out when unknown.
  std::string TransferText(bool is_send, int rank, uint64_t tag,
                           size_t bytes) const {
    std::string peer = absl::StrCat("rank ", rank);
    if (rank >= 0 && rank < static_cast<int>(peer_names.size()) &&
        !peer_names[rank].empty()) {
      absl::StrAppend(&peer, " (", peer_names[rank], ")");
    }
    return absl::StrCat(is_send ? "send to " : "receive from ", peer,
                        " (tag ", tag, ", ", bytes, " bytes)");
  }

  std::vector<GlooLink> links;
  const absl::Duration op_timeout;
  const std::vector<std::string> peer_names;

  absl::Mutex mu;
  bool aborted ABSL_GUARDED_BY(mu) = false;
  std::string abort_reason ABSL_GUARDED_BY(mu);
  // Requests between their start and the end of their Wait (or their
  // destruction): the ones Abort must wake.
  absl::flat_hash_set<GlooRequest*> pending ABSL_GUARDED_BY(mu);

  absl::Status AbortedStatus() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return absl::CancelledError(
        absl::StrCat("communicator aborted: ", abort_reason));
  }
};

class GlooRequest : public CommRequest {
 public:
  GlooRequest(std::shared_ptr<GlooCommunicator::State> state,
              std::unique_ptr<gloo::transport::UnboundBuffer> buffer,
              bool is_send, int peer, uint64_t tag)
      : state_(std::move(state)),
        buffer_(std::move(buffer)),
        is_send_(is_send),
        peer_(peer),
        tag_(tag) {}

  ~GlooRequest() override { Unregister(); }

  // Wakes a Wait in progress (or the next one) with "aborted".
  void AbortWait() {
    if (!buffer_) return;
    if (is_send_) {
      buffer_->abortWaitSend();
    } else {
      buffer_->abortWaitRecv();
    }
  }

  absl::Status Wait() override {
    if (!buffer_) return absl::OkStatus();  // zero-byte transfer
    absl::Status status;
    try {
      const auto timeout = ToMillis(state_->op_timeout);
      const bool completed =
          is_send_ ? buffer_->waitSend(timeout) : buffer_->waitRecv(timeout);
      if (!completed) {
        absl::MutexLock lock(&state_->mu);
        status = state_->AbortedStatus();
      }
    } catch (const std::exception& e) {
      absl::MutexLock lock(&state_->mu);
      status = state_->aborted ? state_->AbortedStatus()
                               : FromException(Describe(), e);
    }
    Unregister();
    return status;
  }

 private:
  std::string Describe() const {
    return state_->TransferText(is_send_, peer_, tag_, buffer_->size);
  }

  void Unregister() {
    absl::MutexLock lock(&state_->mu);
    state_->pending.erase(this);
  }

  const std::shared_ptr<GlooCommunicator::State> state_;
  const std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
  const bool is_send_;
  const int peer_;
  const uint64_t tag_;
};

namespace {

// Connects every link of rank `rank` on the calling thread. Errors as
// Create's; `store_status` (the first store failure) wins over Gloo's text.
absl::StatusOr<std::vector<GlooLink>> ConnectLinks(
    KvStore& kv, const std::string& key_prefix, int rank, int size,
    const GlooOptions& options, const std::function<bool()>& cancelled,
    const std::shared_ptr<ConnectGuard>& guard) {
  std::vector<GlooLink> links;
  for (int i = 0; i < options.connections; ++i) {
    const std::string prefix =
        i == 0 ? key_prefix : absl::StrCat(key_prefix, "link", i, "/");
    KvGlooStore store(kv, prefix, options, cancelled, guard);
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = options.hostname;
      GlooLink link;
      link.device = gloo::transport::tcp::CreateDevice(attr);
      link.context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      link.context->setTimeout(ToMillis(options.rendezvous_timeout));
      link.context->connectFullMesh(store, link.device);
      link.context->setTimeout(ToMillis(options.op_timeout));
      links.push_back(std::move(link));
    } catch (const std::exception& e) {
      if (!store.status().ok()) return store.status();
      return FromException(absl::StrCat("connecting rank ", rank, " of ", size,
                                        " on ", options.hostname,
                                        " (connection ", i, ")"),
                           e);
    }
  }
  return links;
}

// A connect running on a thread of its own, for a caller that must be able
// to give up on it at once.
struct BackgroundConnect {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::StatusOr<std::vector<GlooLink>> result ABSL_GUARDED_BY(mu);
};

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    KvStore& kv, const std::string& key_prefix, int rank, int size,
    const GlooOptions& options, std::function<bool()> cancelled) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("communicator rank ", rank,
                                                   " of size ", size,
                                                   ": need 0 <= rank < size"));
  }
  if (options.hostname.empty()) {
    return absl::InvalidArgumentError(
        "communicator hostname (the worker's --data-address) is empty");
  }
  if (options.connections < 1 || options.connections > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "communicator connections ", options.connections,
        ": need 1..64 TCP connections per pair of workers"));
  }
  IgnoreSigpipe();
  auto guard = std::make_shared<ConnectGuard>();
  absl::StatusOr<std::vector<GlooLink>> links;
  if (!cancelled) {
    links = ConnectLinks(kv, key_prefix, rank, size, options, nullptr, guard);
  } else {
    // Gloo's TCP connects cannot be interrupted: connect on a thread of our
    // own and stop waiting for it when cancelled. The thread polls only the
    // guard, never `cancelled`, whose owner may be gone by then.
    auto connect = std::make_shared<BackgroundConnect>();
    std::thread([connect, guard, &kv, key_prefix, rank, size, options] {
      absl::StatusOr<std::vector<GlooLink>> result = ConnectLinks(
          kv, key_prefix, rank, size, options, nullptr, guard);
      absl::MutexLock lock(&connect->mu);
      connect->result = std::move(result);
      connect->done = true;
    }).detach();
    absl::MutexLock lock(&connect->mu);
    const absl::Duration poll =
        std::max(absl::Milliseconds(1),
                 std::min(options.poll_interval, absl::Milliseconds(50)));
    while (!connect->done) {
      connect->mu.AwaitWithTimeout(absl::Condition(&connect->done), poll);
      if (connect->done) break;
      if (cancelled()) {
        connect->mu.Unlock();
        // After this the thread no longer touches `kv`; what it connected
        // is closed by the thread when it drops its result.
        guard->Abandon();
        connect->mu.Lock();
        if (!connect->done) {
          return absl::CancelledError("rendezvous cancelled");
        }
      }
    }
    links = std::move(connect->result);
  }
  if (!links.ok()) return links.status();
  auto state = std::make_shared<State>(*std::move(links), options.op_timeout,
                                       options.peer_names);
  return std::unique_ptr<GlooCommunicator>(
      new GlooCommunicator(rank, size, std::move(state)));
}

GlooCommunicator::GlooCommunicator(int rank, int size,
                                   std::shared_ptr<State> state)
    : rank_(rank), size_(size), state_(std::move(state)) {}

GlooCommunicator::~GlooCommunicator() = default;

absl::StatusOr<std::unique_ptr<CommRequest>> GlooCommunicator::StartSend(
    absl::Span<const uint8_t> data, int peer, uint64_t tag) {
  // Gloo's buffer type is not const-aware; a send only reads it.
  return Start(/*is_send=*/true, const_cast<uint8_t*>(data.data()), data.size(),
               peer, tag);
}

absl::StatusOr<std::unique_ptr<CommRequest>> GlooCommunicator::StartRecv(
    absl::Span<uint8_t> data, int peer, uint64_t tag) {
  return Start(/*is_send=*/false, data.data(), data.size(), peer, tag);
}

absl::StatusOr<std::unique_ptr<CommRequest>> GlooCommunicator::Start(
    bool is_send, uint8_t* data, size_t size, int peer, uint64_t tag) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer rank ", peer, " is not another rank of [0, ", size_,
                     ") (this is rank ", rank_, ")"));
  }
  if (size == 0) {
    return std::make_unique<GlooRequest>(state_, nullptr, is_send, peer, tag);
  }
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->aborted) return state_->AbortedStatus();
  }
  std::unique_ptr<GlooRequest> request;
  try {
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer =
        state_->ContextFor(tag, is_send ? rank_ : peer, is_send ? peer : rank_)
            .createUnboundBuffer(data, size);
    if (is_send) {
      buffer->send(peer, tag);
    } else {
      buffer->recv(peer, tag);
    }
    request = std::make_unique<GlooRequest>(state_, std::move(buffer), is_send,
                                            peer, tag);
  } catch (const std::exception& e) {
    return FromException(state_->TransferText(is_send, peer, tag, size), e);
  }
  absl::MutexLock lock(&state_->mu);
  // Posted outside the lock so concurrent steps do not serialize on it; an
  // Abort that ran meanwhile did not see this request, so wake it here.
  if (state_->aborted) request->AbortWait();
  state_->pending.insert(request.get());
  return std::unique_ptr<CommRequest>(std::move(request));
}

void GlooCommunicator::Abort(absl::string_view reason) {
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->aborted) return;
    state_->aborted = true;
    state_->abort_reason = std::string(reason);
    for (GlooRequest* request : state_->pending) request->AbortWait();
  }
  for (GlooLink& link : state_->links) {
    try {
      link.context->closeConnections();
    } catch (const std::exception&) {
      // Already broken connections are what Abort wants anyway.
    }
  }
}

bool GlooCommunicator::aborted() const {
  absl::MutexLock lock(&state_->mu);
  return state_->aborted;
}

int GlooCommunicator::LinkOf(int connections, uint64_t tag, int from, int to) {
  if (connections < 2) return 0;
  const uint64_t per_direction = static_cast<uint64_t>(connections / 2);
  return static_cast<int>(2 * (tag % per_direction)) + (from < to ? 0 : 1);
}

int GlooCommunicator::connections() const {
  return static_cast<int>(state_->links.size());
}

}  // namespace meshcast::worker
