// NcclCommunicator: the NCCL communicators of one job on this worker, for
// GPU workers (docs/gpu.md).
//
// Why not the Communicator interface: NCCL moves device memory in
// stream-ordered operations that match by issue order, with no tags, while
// Communicator is host-pointer based with tag matching. The GPU executor
// (worker/cuda/device_relay.h) therefore drives this class directly and
// keeps both ends of every link issuing in one agreed order.
//
// Ranks: one NCCL rank per (worker, GPU) of the job: virtual devices on one
// GPU share its rank (NCCL refuses two ranks on one GPU). Create()
// bootstraps through the rendezvous KvStore under `key_prefix`
// ("job/<job_id>/nccl/"):
//   <prefix>ranks/<worker>  this worker's GPU count, chunk size, lane count,
//                           and which GPU (0..count-1) backs each of its
//                           devices (chunk size and lanes must agree on all
//                           workers: a chunk's receiver posts the size its
//                           sender sends, and every rank must create the same
//                           splits and put a step on the same lane);
//   <prefix>unique_id       worker 0's ncclUniqueId, hex-encoded.
// Then, in one group call for all local GPUs, ncclCommInitRankConfig with
// blocking = 0, polled with ncclCommGetAsyncError up to init_timeout; lanes
// 1.. are ncclCommSplit copies of the world communicator, so independent
// steps can run on different communicators and streams at once.
//
//   ASSIGN_OR_RETURN(auto nccl, NcclCommunicator::Create(kv, prefix, setup,
//                                                        options, cancelled));
//   RETURN_IF_ERROR(nccl->GroupStart(lane));
//   RETURN_IF_ERROR(nccl->Send(lane, gpu, data, bytes, peer_rank, stream));
//   RETURN_IF_ERROR(nccl->GroupEnd(lane));   // polls past ncclInProgress
//   ...
//   RETURN_IF_ERROR(nccl->Finalize());      // at job end
//
// Failure handling: every wait is bounded (init_timeout, op_timeout) and
// checks `cancelled`; Abort() calls ncclCommAbort on every communicator so
// kernels blocked on a dead peer return and later calls fail with
// CANCELLED. The destructor finalizes nothing: it aborts whatever was not
// finalized, so it never blocks on a peer. NCCL result codes become
// absl::Status (NcclStatus) at this boundary, with ncclGetErrorString and
// ncclGetLastError in the message.
//
// Thread safety: one thread at a time per lane (group calls are
// thread-local in NCCL); Abort, CheckAsyncErrors and the accessors from any
// thread. A per-lane mutex keeps Abort from freeing a communicator under a
// call in flight. Groups of different lanes are issued one at a time (a
// communicator-wide mutex from GroupStart until ncclGroupEnd returns):
// NCCL does not allow threads to issue operations concurrently to different
// communicators of one GPU. The wait for NCCL to accept a group happens
// outside that mutex, so a lane waiting for a peer does not hold up the
// others.
#ifndef MESHCAST_WORKER_NCCL_COMMUNICATOR_H_
#define MESHCAST_WORKER_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/kv_store.h"

namespace meshcast::worker {

// An NCCL result as a Status naming `what`; `comm` (optional) adds NCCL's
// last error text. InvalidArgument for invalid arguments or usage,
// Unavailable for remote and system errors, Internal otherwise.
absl::Status NcclStatus(ncclResult_t result, const std::string& what,
                        ncclComm_t comm = nullptr);

struct NcclOptions {
  // Bound on the KV exchange and communicator creation.
  absl::Duration init_timeout = absl::Seconds(60);
  // Bound on each wait for an operation to be accepted (GroupEnd) and on
  // Finalize.
  absl::Duration op_timeout = absl::Seconds(120);
  // Communicators per GPU; steps spread over them.
  int lanes = 4;
  // Sleep between polls of a communicator that reports ncclInProgress.
  absl::Duration poll_interval = absl::Microseconds(50);
};

// What this worker brings to the job's NCCL world.
struct NcclWorkerSetup {
  int worker_rank = 0;  // WorkerProgram.rank
  int world_size = 1;   // workers in the job
  // Distinct CUDA ordinals this worker uses in the job, one NCCL rank each.
  std::vector<int> gpus;
  // (global device id, index into `gpus`) for each local device.
  std::vector<std::pair<int, int>> devices;
  // Relay chunk size; every worker of the job must use the same, since the
  // receiver of a chunk must post exactly the size the sender sends.
  int64_t chunk_bytes = 0;
  // Communicators per GPU (NcclOptions::lanes); must be the same on every
  // worker. Create() fills it in from the options.
  int lanes = 1;
};

// The KV encodings, exposed for tests.
std::string EncodeNcclWorkerInfo(const NcclWorkerSetup& setup);
struct NcclWorkerInfo {
  int gpus = 0;
  int64_t chunk_bytes = 0;
  int lanes = 0;
  std::vector<std::pair<int, int>> devices;  // (device, gpu index)
};
absl::StatusOr<NcclWorkerInfo> DecodeNcclWorkerInfo(const std::string& text);
std::string HexEncode(const std::string& bytes);
absl::StatusOr<std::string> HexDecode(const std::string& hex);

class NcclCommunicator {
 public:
  // Errors: InvalidArgument for a bad setup or a peer's malformed or
  // inconsistent entry (e.g. another chunk size); DEADLINE_EXCEEDED naming
  // the missing key or the init that did not finish; CANCELLED when
  // `cancelled` (optional, polled) returns true.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      KvStore& kv, const std::string& key_prefix, NcclWorkerSetup setup,
      const NcclOptions& options, std::function<bool()> cancelled = nullptr);

  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int nranks() const { return nranks_; }
  int lanes() const { return static_cast<int>(lanes_.size()); }
  const std::vector<int>& gpus() const { return gpus_; }
  // This worker's first NCCL rank; its GPU i has rank first_rank() + i.
  int first_rank() const { return first_rank_; }

  // NCCL rank of any device of the job; NotFound for an unknown device.
  absl::StatusOr<int> RankOfDevice(int device) const;
  // NCCL rank of this worker's GPU `gpu` (a CUDA ordinal in gpus()).
  absl::StatusOr<int> RankOfLocalGpu(int gpu) const;

  // Group calls over the communicators of `lane`. Between GroupStart and
  // GroupEnd only Send/Recv of the same lane. GroupEnd waits (polling,
  // bounded by op_timeout) until NCCL has accepted the group; the transfers
  // themselves complete on their streams.
  absl::Status GroupStart(int lane);
  absl::Status GroupEnd(int lane);
  absl::Status Send(int lane, int gpu, const void* data, size_t bytes,
                    int peer_rank, cudaStream_t stream);
  absl::Status Recv(int lane, int gpu, void* data, size_t bytes, int peer_rank,
                    cudaStream_t stream);

  // OK, or the first asynchronous error of any communicator (a failed peer,
  // a network error), or CANCELLED after Abort.
  absl::Status CheckAsyncErrors();

  // ncclCommAbort on every communicator; pending and later calls fail with
  // CANCELLED(reason). Idempotent; safe from any thread.
  void Abort(const std::string& reason);

  // Flushes and destroys every communicator (ncclCommFinalize, polled up to
  // op_timeout, then ncclCommDestroy); aborts them instead on failure.
  absl::Status Finalize();

 private:
  struct Lane {
    absl::Mutex mu;
    // By index in gpus_; null once aborted or destroyed.
    std::vector<ncclComm_t> comms ABSL_GUARDED_BY(mu);
    bool in_group ABSL_GUARDED_BY(mu) = false;
    // A non-blocking ncclCommSplit writes its new communicator into the
    // caller's slot from NCCL's own thread when the split finishes, not
    // when the call returns. `split_slots` is that memory (read with an
    // atomic load); `split_waiting[i]` says NCCL has yet to write slot i
    // (the split was issued, its result not yet taken). Once none waits,
    // the slots are in `comms` (or aborted). The destructor leaks the
    // slots of a lane where NCCL may still write (a split abandoned at a
    // timeout or abort) rather than let a late write corrupt the heap.
    std::unique_ptr<ncclComm_t[]> split_slots;
    std::vector<bool> split_waiting ABSL_GUARDED_BY(mu);
  };

  NcclCommunicator(NcclOptions options, std::function<bool()> cancelled);

  // Polls the lane's communicators until none reports ncclInProgress,
  // taking the lane's mutex per poll only (so Abort stays prompt).
  absl::Status WaitAccepted(int lane, absl::Duration timeout,
                            const std::string& what);
  // Calls `done` every poll_interval until it returns true or an error,
  // the job is cancelled, or `timeout` passes (DEADLINE_EXCEEDED naming
  // `what`).
  absl::Status PollUntilDone(absl::Duration timeout, const std::string& what,
                             absl::FunctionRef<absl::StatusOr<bool>()> done);
  // Polls a lane's splits until NCCL has written every slot and none of
  // the new communicators (nor the world communicators they split from)
  // reports ncclInProgress, then moves them into the lane's `comms`.
  absl::Status WaitSplit(int lane, absl::Duration timeout,
                         const std::string& what);
  absl::StatusOr<int> GpuIndex(int gpu) const;
  absl::Status AbortedStatus() const;
  // Aborts the lane's communicators and the splits NCCL has finished
  // writing; true when no slot of the lane is still waiting for NCCL.
  static bool AbortLane(Lane& lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane.mu);
  static bool SplitWaiting(const Lane& lane)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane.mu);

  const NcclOptions options_;
  const std::function<bool()> cancelled_;
  int nranks_ = 0;
  int first_rank_ = 0;
  std::vector<int> gpus_;
  absl::flat_hash_map<int, int> device_rank_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  // Serializes the issuing of groups across lanes (see the header comment).
  // Acquired after a lane's mutex, never the other way round.
  absl::Mutex issue_mu_;
  std::atomic<bool> aborted_{false};
  mutable absl::Mutex abort_mu_;
  std::string abort_reason_ ABSL_GUARDED_BY(abort_mu_);
};

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_NCCL_COMMUNICATOR_H_
