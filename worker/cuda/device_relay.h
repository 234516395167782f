// EnqueueRelayStep: this worker's part of one relay step (a chain, or the
// tree of StepDesc::parents) on GPUs, enqueued asynchronously on CUDA
// streams (the GPU counterpart of worker/relay_step.h; docs/dataplane.md
// and docs/gpu.md).
//
// A relay entirely on this worker is a sequence of tile-to-tile copies, each
// position from its parent, on the step's primary stream (device-to-device
// copies between virtual devices of one GPU, cudaMemcpyPeerAsync or a
// peer-reading kernel between GPUs). A relay that crosses workers is cut
// into "runs": connected pieces of the tree on one NCCL rank, i.e. one GPU
// of one worker (virtual devices of a GPU share its rank); in a chain,
// maximal stretches of consecutive positions. Chunk g of the slice moves
// through the runs as a wavefront of NCCL group calls: run 0 sends chunk g
// to each of its child runs in round g; a run of depth d >= 1 receives
// chunk g from its parent run and forwards chunk g - 1 to each of its child
// runs in round g + d - 1, so a relay receives the next chunk while it
// forwards the previous one and every link is busy at once. Every rank
// issues the operations of each link in the same order (step by step in
// the executor's agreed order, round by round, link by link), which NCCL's
// order-based matching needs. Chunks are packed on the GPU only when the
// slice is not contiguous in the tile; otherwise NCCL reads and writes the
// tiles directly. Local receivers of a run get each chunk by an on-device
// copy right after it arrived. Which operation happens in which round and
// staging slot is RelaySchedule's (relay_schedule.h, checked by a host
// test); all operations of a run go on the lane's stream of its GPU, in the
// schedule's order, which is all the ordering two staging slots per run
// need. The slots are allocated before the first NCCL group and freed
// before `done`.
//
//   DeviceRelayEnvironment env{&program, &buffers, nccl, chunk_bytes};
//   StepEvents events{start_event, done_event};  // + optional hop events
//   RETURN_IF_ERROR(EnqueueRelayStep(step, env, lane, dep_events, events));
//
// Hop timing (for WorkerMetrics::HopFinished): with StepEvents::hop set,
// hop[p] is recorded on the stream that writes local chain position p, right
// after the last chunk landed there (the last copy into p, or the NCCL group
// that received it when NCCL wrote the tile directly). HopEventGpus says on
// which GPU each must be created; a hop on a GPU other than the primary one
// is timed from that GPU's own start event (StepEvents::gpu_start), since
// cudaEventElapsedTime needs both events on one GPU.
//
// Host-side this blocks only while NCCL accepts each group (bounded by the
// communicator's op_timeout); the data moves later on the streams.
// Thread safety: one thread per lane at a time (NCCL group calls).
#ifndef MESHCAST_WORKER_CUDA_DEVICE_RELAY_H_
#define MESHCAST_WORKER_CUDA_DEVICE_RELAY_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

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
  // Boxes of other workers' all-gather input buffers that the program does
  // not hold, by buffer id, learned at set-up (device_executor.cc); may be
  // null.
  const absl::flat_hash_map<int, Box>* gather_boxes = nullptr;
};

class BlasHandles;  // device_step.h

// The streams of one lane: an NCCL lane index and one stream per local GPU.
struct DeviceLane {
  int index = 0;
  absl::flat_hash_map<int, cudaStream_t> streams;  // CUDA ordinal -> stream
  // The lane's cuBLAS handles (GEMM steps); may be null when no step of the
  // job computes.
  std::shared_ptr<BlasHandles> blas;
};

// Readies `gpu`'s default stream-ordered pool for staging memory
// (cudaMallocAsync): shared with the peer GPUs, and kept from adding
// stream dependencies between lanes (device_relay.cc says why). Once per
// GPU per process; thread-safe. Every step kernel that stages memory calls
// it first.
absl::Status PrepareStagingPool(int gpu);

// CUDA ordinal of the step's primary stream: the GPU of its first position
// on this worker. `start` and `done` events must be created on it.
absl::StatusOr<int> PrimaryGpu(const StepDesc& step,
                               const DeviceRelayEnvironment& env);

// Where the hop timing events of `step` live, by chain position: for each
// position p >= 1 on this worker, the CUDA ordinal of the stream that
// finishes writing it (the primary GPU for a relay entirely on this worker,
// whose copies all run on the primary stream; else the GPU of p's device);
// -1 for position 0 and for positions on other workers. `device_gpu` maps
// this worker's devices to CUDA ordinals. Pure: no CUDA call.
absl::StatusOr<std::vector<int>> HopEventGpus(
    const StepDesc& step, const ParsedProgram& program,
    const absl::flat_hash_map<int, int>& device_gpu);

// The events one step records, created by the caller with timing enabled
// and kept until the step's `done` has completed.
struct StepEvents {
  cudaEvent_t start = nullptr;  // on PrimaryGpu
  cudaEvent_t done = nullptr;   // on PrimaryGpu
  // Optional (empty: no hop timing). By chain position; hop[p], where not
  // null, must be created on HopEventGpus(...)[p].
  std::vector<cudaEvent_t> hop;
  // For every GPU of a hop event other than the primary one: an event on
  // that GPU, recorded when its stream begins the step (after `waits`).
  absl::flat_hash_map<int, cudaEvent_t> gpu_start;
};

// Enqueues the step after `waits` (events of the steps it depends on):
// records `start` on the primary stream, then the step's copies and NCCL
// groups (and the hop events), then `done` once every stream it used has
// finished its part. Errors name the step.
absl::Status EnqueueRelayStep(const StepDesc& step,
                              const DeviceRelayEnvironment& env,
                              const DeviceLane& lane,
                              absl::Span<const cudaEvent_t> waits,
                              const StepEvents& events);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_DEVICE_RELAY_H_
