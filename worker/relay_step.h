// ExecuteRelayStep: this worker's part of one relay-chain step.
//
// A step moves `slice` along chain[0] -> chain[1] -> ... (docs/dataplane.md).
// This worker handles the positions of the chain whose devices it drives,
// which form one or more runs of consecutive positions ("segments"). For
// each segment, in chunk order: get chunk c (pack it from the sender's tile
// at position 0, or receive it from the previous worker), start forwarding
// it to the next worker at once, then unpack it into the destination tile
// of every local receiver in the segment (the local hops are these copies).
// Up to `pipeline_depth` chunks per segment are in flight, so a relay
// receives chunk c+1 while it forwards chunk c. A chain entirely on this
// worker is plain tile-to-tile copies, no chunking.
// Direct segments: where the slice is one contiguous range of the segment's
// tile (the sender's at position 0, else the first local receiver's), chunks
// are sent from and received into that tile, no staging; such a segment
// keeps up to 16 receives posted, the next as soon as a chunk is in.
//
// OP_SEND_RECV in the operand form (program.h) is the same two-position
// chain, packing chunks from the input's region on the sender and
// unpacking them into the output's region on the receiver (element e of
// one to element e of the other); on one worker it is a copy between the
// two regions.
//
// Messages carry MessageTag(step, hop, chunk), hop p being the link into
// chain position p, so concurrent steps and chunks never mix.
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
  // position `position`, a device of this worker, has landed its last byte,
  // `seconds` after the step started here.
  std::function<void(const StepDesc& step, int position, double seconds)>
      on_hop_done;
};

// Bytes of staging slots ExecuteRelayStep allocates for `step` on this
// worker: pipeline_depth chunks per segment of the chain (0 for a chain
// that stays on this worker).
int64_t RelayStagingBytes(const StepDesc& step, const ParsedProgram& program,
                          const RelayOptions& options);

// Runs the local part of `step`; returns when its local receivers hold the
// slice and its forwards have been sent. Errors name the step.
absl::Status ExecuteRelayStep(const StepDesc& step,
                              const RelayEnvironment& env);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_RELAY_STEP_H_
