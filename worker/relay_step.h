// ExecuteRelayStep: this worker's part of one relay step.
//
// A step moves `slice` from chain position 0 (the sender) to every other
// position along a tree: position p receives it from position parents[p]
// (< p); a chain is the tree parents[p] = p - 1 (docs/dataplane.md). This
// worker handles the positions whose devices it drives. They form one or
// more "segments", connected parts of the tree: a local position joins its
// parent's segment when the parent is local, else it roots a new one, fed
// by the parent's worker (position 0 roots one fed by nobody). The
// segment's remote children are the other workers' positions whose parent
// is in it. For each segment, in chunk order: get chunk c (pack it from the
// sender's tile at position 0, or receive it from the worker of the root's
// parent), start sending it to every remote child at once, then unpack it
// into the destination tile of every local receiver in the segment (the
// local hops are these copies). Up to `pipeline_depth` chunks per segment
// are in flight, so a relay receives chunk c+1 while it forwards chunk c; a
// staging slot is reused once all its sends are done. A chain cuts into
// runs of consecutive positions, each with at most one remote child. A
// tree entirely on this worker is plain tile-to-tile copies, each receiver
// from its parent's tile in position order, no chunking.
// Direct segments: where the slice is one contiguous range of the segment's
// tile (the sender's at position 0, else the root receiver's), chunks are
// sent from and received into that tile, no staging; such a segment keeps
// up to 16 receives posted, the next as soon as a chunk is in.
//
// OP_SEND_RECV in the operand form (program.h) is the same two-position
// chain, packing chunks from the input's region on the sender and
// unpacking them into the output's region on the receiver (element e of
// one to element e of the other); on one worker it is a copy between the
// two regions.
//
// Messages carry MessageTag(step, hop, chunk), hop p being the link into
// chain position p, so concurrent steps, chunks and the children of one
// segment on one worker never mix.
//
// Cancellation is checked before every chunk and every slice of a local
// copy (RelayEnvironment::slicing); a wait on a peer returns as soon as the
// communicator is aborted, which the executor does on cancellation.
//
// Thread safety: runs on the calling thread; concurrent calls for different
// steps are safe (they share the Communicator, which is thread-safe).
#ifndef MESHCAST_WORKER_RELAY_STEP_H_
#define MESHCAST_WORKER_RELAY_STEP_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "worker/buffer_set.h"
#include "worker/cancellation.h"
#include "worker/communicator.h"
#include "worker/program.h"
#include "worker/staging_pool.h"

namespace meshcast::worker {

inline constexpr int64_t kMaxChunksPerStep = int64_t{1} << 28;

// 24 bits of step id, 12 bits of hop, 28 bits of chunk.
constexpr uint64_t MessageTag(int step_id, int hop, int64_t chunk) {
  return (static_cast<uint64_t>(step_id) << 40) |
         (static_cast<uint64_t>(hop) << 28) | static_cast<uint64_t>(chunk);
}

// Tag of the executor's start barrier: the step-id field no step may use.
inline constexpr uint64_t kBarrierTag = MessageTag(kMaxStepId + 1, 0, 0);

struct RelayOptions {
  // A step's own Step.chunk_bytes, when set, wins (RelayChunkBytes).
  int64_t chunk_bytes = int64_t{1} << 20;
  int pipeline_depth = 4;
};

struct RelayEnvironment {
  const ParsedProgram* program = nullptr;
  const BufferSet* buffers = nullptr;
  // May be null when every step of the program stays on this worker.
  Communicator* comm = nullptr;
  const Cancellation* cancellation = nullptr;
  RelayOptions options;
  // Slices of local copies; its hook also runs before each chunk.
  WorkSlicing slicing;
  // Optional (metrics): called on the step's thread once the hop into chain
  // position `position` (from parents[position]), a device of this worker,
  // has landed its last byte, `seconds` after the step started here.
  std::function<void(const StepDesc& step, int position, double seconds)>
      on_hop_done;
  // Where steps stage data (relay slots, collective buffers, packed compute
  // operands); null: StagingPool::Default(). The executor passes its own.
  StagingPool* staging = nullptr;

  StagingPool& staging_pool() const {
    return staging != nullptr ? *staging : StagingPool::Default();
  }
};

// Bytes of staging slots ExecuteRelayStep may allocate for `step` on this
// worker: pipeline_depth chunks per segment (0 for a relay that stays on
// this worker).
int64_t RelayStagingBytes(const StepDesc& step, const ParsedProgram& program,
                          const RelayOptions& options);

// Runs the local part of `step`; returns when its local receivers hold the
// slice and its forwards have been sent. Errors name the step.
absl::Status ExecuteRelayStep(const StepDesc& step,
                              const RelayEnvironment& env);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_RELAY_STEP_H_
