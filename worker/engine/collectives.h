// The CPU kernels of the collective ops and of OP_LOCAL_COPY
// (plan.proto says what each op means; kernel_registry.h how they run).
//
// Collectives are hierarchical, so that every byte crosses the network as
// few times as a ring allows and the devices of one worker never talk over
// it: (1) the ranks of the group on this worker are combined in memory,
// (2) the group's workers (in order of first appearance in the group) run a
// ring — or, for all-to-all, a pairwise exchange — over the Communicator's
// point-to-point interface, and (3) the result is distributed to the local
// ranks' outputs in memory.
//  - OP_ALL_REDUCE: local ranks reduced into one accumulator; ring
//    reduce-scatter then ring all-gather over m equal pieces; copied to
//    every local output.
//  - OP_REDUCE_SCATTER: the same ring reduce-scatter, the piece of worker w
//    being the output chunks of its ranks; each rank copies its chunk.
//  - OP_ALL_GATHER: local inputs copied into local outputs; each worker's
//    inputs packed into one bundle that goes round the ring; every bundle
//    unpacked into the local outputs (regions that overlap them). A
//    worker's program holds only its own buffers, so when the step's inputs
//    name whole buffers (no slice) a ring of tiny messages first tells
//    every worker the other ranks' input boxes.
//  - OP_ALL_TO_ALL: local blocks copied; for every other worker one message
//    with the blocks between its ranks and ours, exchanged in pairwise
//    order (phase k: send to worker me + k, receive from me - k).
// Each ring phase moves its piece in chunks of RelayOptions::chunk_bytes
// with up to pipeline_depth chunks in flight each way, and reduces or
// unpacks a chunk as soon as it arrives. Messages carry MessageTag(step id,
// phase, chunk), so concurrent steps and phases never mix.
//
// Reductions are element by element in the dtype (worker/kernels/reduce.h);
// the ring reduces each piece on one worker and sends the result to the
// others, so every rank ends with the same bits.
//
// Errors: FAILED_PRECONDITION when a local operand has no tile or operands
// do not have the extents the op needs (named by rank and buffer);
// transport errors as the Communicator reports them; CANCELLED on abort
// (checked before every chunk and every slice of local work).
// Thread safety: as relay_step.h: concurrent calls for different steps.
#ifndef MESHCAST_WORKER_ENGINE_COLLECTIVES_H_
#define MESHCAST_WORKER_ENGINE_COLLECTIVES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "worker/engine/kernel_registry.h"

namespace meshcast::worker {

absl::Status RunAllReduce(const StepDesc& step, const StepEnvironment& env);
absl::Status RunReduceScatter(const StepDesc& step, const StepEnvironment& env);
absl::Status RunAllGather(const StepDesc& step, const StepEnvironment& env);
absl::Status RunAllToAll(const StepDesc& step, const StepEnvironment& env);
absl::Status RunLocalCopy(const StepDesc& step, const StepEnvironment& env);

// Host memory a collective step allocates besides the tiles (accumulators
// and staging), for the executor's memory check; 0 for other ops.
int64_t CollectiveStagingBytes(const StepDesc& step,
                               const ParsedProgram& program);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_ENGINE_COLLECTIVES_H_
