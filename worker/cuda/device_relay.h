// EnqueueRelayStep: this worker's part of one relay-chain step on GPUs,
// enqueued asynchronously on CUDA streams (the GPU counterpart of
// worker/relay_step.h; docs/dataplane.md and docs/gpu.md).
//
// A chain entirely on this worker is a sequence of tile-to-tile copies on
// the step's primary stream (device-to-device copies between virtual
// devices of one GPU, cudaMemcpyPeerAsync or a peer-reading kernel between
// GPUs). A chain that crosses workers is cut into "runs": maximal stretches
// of consecutive positions on one NCCL rank, i.e. one GPU of one worker
// (virtual devices of a GPU share its rank). Chunk g of the slice moves
// through the runs as a wavefront of NCCL group calls: run 0 sends chunk g
// in round g; run j >= 1 receives chunk g and forwards chunk g - 1 in
// round g + j - 1, so a relay receives the next chunk while it forwards the
// previous one and every link of the chain is busy at once. Every rank
// therefore issues the operations of each link in the same order (step by
// step in the executor's agreed order, round by round, run by run), which
// NCCL's order-based matching needs. Chunks are packed on the GPU only when
// the slice is not contiguous in the tile; otherwise NCCL reads and writes
// the tiles directly. Local receivers of a run get each chunk by an
// on-device copy right after it arrived.
//
//   DeviceRelayEnvironment env{&program, &buffers, nccl, chunk_bytes};
//   RETURN_IF_ERROR(EnqueueRelayStep(step, env, lane, dep_events,
//                                    start_event, done_event));
//
// Host-side this blocks only while NCCL accepts each group (bounded by the
// communicator's op_timeout); the data moves later on the streams.
// Thread safety: one thread per lane at a time (NCCL group calls).
#ifndef MESHCAST_WORKER_CUDA_DEVICE_RELAY_H_
#define MESHCAST_WORKER_CUDA_DEVICE_RELAY_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/cuda/device_buffer_set.h"
#include "worker/nccl_communicator.h"
#include "worker/program.h"

namespace meshcast::worker::cuda {

struct DeviceRelayEnvironment {
  const ParsedProgram* program = nullptr;
  const DeviceBufferSet* buffers = nullptr;
  // Null when the job stays on this worker (world_size 1).
  NcclCommunicator* nccl = nullptr;
  // Same on every worker of the job (NcclCommunicator checks it).
  int64_t chunk_bytes = int64_t{4} << 20;
};

// The streams of one lane: an NCCL lane index and one stream per local GPU.
struct DeviceLane {
  int index = 0;
  absl::flat_hash_map<int, cudaStream_t> streams;  // CUDA ordinal -> stream
};

// CUDA ordinal of the step's primary stream: the GPU of its first position
// on this worker. `start` and `done` events must be created on it.
absl::StatusOr<int> PrimaryGpu(const StepDesc& step,
                               const DeviceRelayEnvironment& env);

// Enqueues the step after `waits` (events of the steps it depends on):
// records `start` on the primary stream, then the step's copies and NCCL
// groups, then `done` once every stream it used has finished its part.
// Errors name the step.
absl::Status EnqueueRelayStep(const StepDesc& step,
                              const DeviceRelayEnvironment& env,
                              const DeviceLane& lane,
                              absl::Span<const cudaEvent_t> waits,
                              cudaEvent_t start, cudaEvent_t done);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_DEVICE_RELAY_H_
