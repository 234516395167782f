// The GPU kernels of the collective ops and of OP_LOCAL_COPY (plan.proto
// says what each op means; device_kernels.h how they are looked up), the
// GPU counterparts of worker/engine/collectives.h with the same
// hierarchical shape:
//  (1) the group's ranks on this worker are combined on the step's primary
//      GPU (the GPU of the first local rank; other local GPUs are reached
//      by peer copies), in stream-ordered staging memory;
//  (2) the group's workers (in order of first appearance in the group)
//      exchange over NCCL, each through the NCCL rank of its primary GPU
//      (its "leader"), with grouped ncclSend / ncclRecv on the lane's
//      communicator;
//  (3) the result is copied into the local ranks' outputs.
//  - OP_ALL_REDUCE: local inputs reduced into one accumulator; with m > 1
//    workers, the accumulator is cut into m pieces, every worker sends
//    piece w to worker w and reduces the m - 1 pieces it receives into its
//    own (a reduce-scatter in one group call), then every worker sends its
//    reduced piece to all others (an all-gather in one group call); copied
//    to every local output. Each piece is reduced on one worker only, so
//    every rank ends with the same bits.
//  - OP_REDUCE_SCATTER: the same local reduction; each rank's output chunk
//    (chunk r of OUT along dim 0, ceil(L / n) rows) is sent by every other
//    worker to rank r's worker, which reduces them into its accumulator
//    and copies the chunk out.
//  - OP_ALL_GATHER: local inputs copied into local outputs (overlapping
//    regions); each worker's inputs packed into one bundle that goes to
//    every other worker; every bundle unpacked into the local outputs.
//    Inputs of other workers need their boxes: the step's slice, the
//    buffer in the program, or the boxes their workers published at set-up
//    (DeviceRelayEnvironment::gather_boxes; FAILED_PRECONDITION naming the
//    rank otherwise).
//  - OP_ALL_TO_ALL (uneven counts): blocks between local ranks are device
//    copies; for every other worker one bundle each way with the blocks
//    between its ranks and ours, in (sender rank, receiver rank) order.
//  - OP_LOCAL_COPY: a tile-to-tile region copy.
// What each worker sends and receives, in which group call, and what it
// reduces after each is collective_exchange.h's (pure, simulated for random
// groups by a host test); this file maps it onto staging memory, NCCL and
// copies. Reductions (sum, max) run the kernel of compute_kernels.h in every dtype
// (the host's bits, worker/kernels/element_core.h). Every worker issues the
// step's NCCL
// groups in the same order and, per pair of workers, the operations in the
// same order, which NCCL's order-based matching needs; the executor keeps
// the steps of a lane in one agreed order (docs/gpu.md).
//
// Why point-to-point rather than ncclAllReduce on one communicator per
// group: NCCL has one rank per GPU, while a group's ranks may be several
// virtual devices of one GPU, spread over GPUs and workers in any order,
// with uneven reduce-scatter chunks; a split communicator per group would
// also have to be created collectively by every rank of the job before the
// first step. The leader scheme needs only the job's communicators, moves
// (m - 1) / m of the data per worker and phase as a ring does, and keeps
// NCCL's kernels on each GPU to light point-to-point groups, which several
// lanes can run at once.
//
// Errors: FAILED_PRECONDITION when a local operand has no tile or the
// operands do not have the extents the op needs (named by rank), INVALID_
// ARGUMENT for an unknown reduction or malformed counts; CUDA and NCCL
// errors as CudaStatus / NcclStatus word them.
// Thread safety: one lane thread per call (device_step.h).
#ifndef MESHCAST_WORKER_CUDA_DEVICE_COLLECTIVES_H_
#define MESHCAST_WORKER_CUDA_DEVICE_COLLECTIVES_H_

#include "absl/status/status.h"
#include "worker/cuda/device_step.h"

namespace meshcast::worker::cuda {

absl::Status EnqueueAllReduce(const StepDesc& step,
                              const DeviceRelayEnvironment& env,
                              const DeviceLane& lane,
                              absl::Span<const cudaEvent_t> waits,
                              const StepEvents& events);
absl::Status EnqueueReduceScatter(const StepDesc& step,
                                  const DeviceRelayEnvironment& env,
                                  const DeviceLane& lane,
                                  absl::Span<const cudaEvent_t> waits,
                                  const StepEvents& events);
absl::Status EnqueueAllGather(const StepDesc& step,
                              const DeviceRelayEnvironment& env,
                              const DeviceLane& lane,
                              absl::Span<const cudaEvent_t> waits,
                              const StepEvents& events);
absl::Status EnqueueAllToAll(const StepDesc& step,
                             const DeviceRelayEnvironment& env,
                             const DeviceLane& lane,
                             absl::Span<const cudaEvent_t> waits,
                             const StepEvents& events);
absl::Status EnqueueLocalCopy(const StepDesc& step,
                              const DeviceRelayEnvironment& env,
                              const DeviceLane& lane,
                              absl::Span<const cudaEvent_t> waits,
                              const StepEvents& events);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_DEVICE_COLLECTIVES_H_
