// GlooCommunicator: the Communicator over Gloo's TCP transport, for CPU
// workers.
//
// Create() bootstraps a full mesh of TCP pairs between the job's workers:
// each rank publishes its listening addresses in the rendezvous KvStore
// under `key_prefix` (e.g. "job/<job_id>/gloo/") and connects to every other
// rank. Messages are Gloo unbound buffers: a send to (peer, tag) matches the
// receive of the same tag from this rank; the tag is the Gloo slot.
//
// With GlooOptions::connections = k > 1 every pair of ranks is joined by k
// TCP connections, each with its own Gloo device (event-loop thread), and
// each direction of a pair has its own half of them (LinkOf): Gloo sends a
// message only once the receiver's ready notice has come back over the
// same connection, and a notice queued behind megabytes of the other
// direction's data in one TCP stream stalls the sender until they drain
// (a pipeline whose stages send activations one way while gradients come
// back measured no faster than one that never sends both ways at once;
// docs/benchmarks.md, pipeline bench). Within a direction a message goes
// over its `tag` modulo k / 2, so consecutive chunks of one transfer
// (consecutive tags, relay_step.h) and concurrent transfers spread over
// the streams. Link i > 0 rendezvous under `key_prefix` + "link<i>/".
// Every rank must use the same k; the default is 2.
//
//   ASSIGN_OR_RETURN(auto comm, GlooCommunicator::Create(
//       kv, "job/j1/gloo/", rank, world_size, GlooOptions{}));
//   RETURN_IF_ERROR(comm->Send(bytes, peer, tag));
//
// Gloo reports failures with exceptions; none escape this class: every
// failure becomes an absl::Status. Create() sets SIGPIPE to ignored for the
// whole process: Gloo writes to its sockets without MSG_NOSIGNAL, and a
// write to a killed peer must fail that transfer, not end this process.
// Bounded waits: the rendezvous and the connects are bounded by
// rendezvous_timeout, each Wait by op_timeout, a peer that dies closes its
// sockets and fails the operations on it at once, and Abort wakes every
// pending Wait and closes the connections.
// Cancellation: with a `cancelled` function, Create connects on a thread of
// its own and returns CANCELLED within one poll_interval of `cancelled`
// turning true, in every phase (waiting for the peers' addresses and the
// TCP connects, which Gloo cannot interrupt). An abandoned connect stops
// using the KvStore before Create returns and finishes (fails or connects,
// then closes) in the background, bounded by rendezvous_timeout.
// Thread safety: thread-safe (see communicator.h).
#ifndef MESHCAST_WORKER_GLOO_COMMUNICATOR_H_
#define MESHCAST_WORKER_GLOO_COMMUNICATOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/communicator.h"
#include "worker/kv_store.h"

namespace meshcast::worker {

struct GlooOptions {
  // Address of this host that peers connect to (the worker's
  // --data-address); Gloo listens on an ephemeral port of it.
  std::string hostname = "127.0.0.1";
  // Bound on waiting for the other ranks' addresses and on TCP connects.
  absl::Duration rendezvous_timeout = absl::Seconds(60);
  // Bound on each CommRequest::Wait.
  absl::Duration op_timeout = absl::Seconds(120);
  // How often the rendezvous re-checks `cancelled` while waiting.
  absl::Duration poll_interval = absl::Milliseconds(200);
  // Name of each rank's worker (index = rank), to name the peer in errors
  // ("send to rank 3 (worker-3)"); empty: ranks only.
  std::vector<std::string> peer_names;
  // TCP connections (Gloo devices) between each pair of ranks; >= 1, the
  // same on every rank. Two or more give each direction its own (LinkOf).
  int connections = 2;
};

class GlooCommunicator : public Communicator {
 public:
  // Connects rank `rank` of `size` to all others. `cancelled` (optional) is
  // polled while waiting for peers and connecting; when it returns true the
  // call fails with CANCELLED ("rendezvous cancelled"). Errors:
  // InvalidArgument for bad rank/size/hostname/connections,
  // DEADLINE_EXCEEDED naming the key of a rank that never showed up,
  // UNAVAILABLE for connection failures.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      KvStore& kv, const std::string& key_prefix, int rank, int size,
      const GlooOptions& options, std::function<bool()> cancelled = nullptr);

  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int connections() const;

  // The connection (0 .. connections - 1) a message with `tag` from rank
  // `from` to rank `to` travels on: with 2 or more, the lower rank's
  // messages to the higher take the even connections and the others the
  // odd ones, `tag` modulo connections / 2 choosing among them (an odd
  // count leaves the last connection idle); with 1, connection 0.
  static int LinkOf(int connections, uint64_t tag, int from, int to);
  // True once Abort ran (the communicator is unusable).
  bool aborted() const;

  absl::StatusOr<std::unique_ptr<CommRequest>> StartSend(
      absl::Span<const uint8_t> data, int peer, uint64_t tag) override;
  absl::StatusOr<std::unique_ptr<CommRequest>> StartRecv(
      absl::Span<uint8_t> data, int peer, uint64_t tag) override;
  void Abort(absl::string_view reason) override;

  // Shared by the communicator and its requests so a request outliving the
  // communicator stays valid; defined in the .cc.
  struct State;

 private:
  GlooCommunicator(int rank, int size, std::shared_ptr<State> state);

  absl::StatusOr<std::unique_ptr<CommRequest>> Start(bool is_send,
                                                     uint8_t* data, size_t size,
                                                     int peer, uint64_t tag);

  const int rank_;
  const int size_;
  const std::shared_ptr<State> state_;
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_GLOO_COMMUNICATOR_H_
