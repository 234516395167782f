// Communicator: the backend-neutral point-to-point interface the executor
// moves bytes with between workers (Gloo over TCP today; NCCL later).
//
// Ranks are worker ranks in the job (WorkerProgram.rank / world_size); a
// message is matched by (peer, tag) and the receive must name the exact size
// the sender sends. Transfers are asynchronous so relays can keep several
// chunks in flight:
//
//   ASSIGN_OR_RETURN(auto recv, comm.StartRecv(chunk, /*peer=*/0, tag));
//   RETURN_IF_ERROR(recv->Wait());
//   RETURN_IF_ERROR(comm.Send(chunk, /*peer=*/2, next_tag));  // start + wait
//
// Every wait is bounded by the backend's timeout, and Abort makes pending and
// later operations fail promptly, so a dead peer cannot hang a worker.
// Thread safety: all methods may be called concurrently from many threads;
// a CommRequest is used by one thread at a time.
#ifndef MESHCAST_WORKER_COMMUNICATOR_H_
#define MESHCAST_WORKER_COMMUNICATOR_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace meshcast::worker {

// One posted send or receive.
class CommRequest {
 public:
  // Destroying a request that has not completed gives up on it; the
  // communicator may then be unusable (callers abort it on any error).
  virtual ~CommRequest() = default;

  // Blocks until the transfer completed (OK), failed, timed out
  // (DEADLINE_EXCEEDED) or the communicator was aborted (CANCELLED). Call at
  // most once.
  virtual absl::Status Wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Starts sending `data` to `peer` (!= rank()). `data` must stay valid and
  // unchanged until Wait returns.
  virtual absl::StatusOr<std::unique_ptr<CommRequest>> StartSend(
      absl::Span<const uint8_t> data, int peer, uint64_t tag) = 0;

  // Starts receiving exactly data.size() bytes from `peer` with `tag` into
  // `data`, which must stay valid until Wait returns.
  virtual absl::StatusOr<std::unique_ptr<CommRequest>> StartRecv(
      absl::Span<uint8_t> data, int peer, uint64_t tag) = 0;

  // Fails pending and future operations with CANCELLED carrying `reason`
  // and drops the connections, so peers blocked on this worker fail too.
  // Idempotent.
  virtual void Abort(absl::string_view reason) = 0;

  // Blocking conveniences: start and wait.
  absl::Status Send(absl::Span<const uint8_t> data, int peer, uint64_t tag) {
    absl::StatusOr<std::unique_ptr<CommRequest>> request =
        StartSend(data, peer, tag);
    if (!request.ok()) return request.status();
    return (*request)->Wait();
  }
  absl::Status Recv(absl::Span<uint8_t> data, int peer, uint64_t tag) {
    absl::StatusOr<std::unique_ptr<CommRequest>> request =
        StartRecv(data, peer, tag);
    if (!request.ok()) return request.status();
    return (*request)->Wait();
  }
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_COMMUNICATOR_H_
