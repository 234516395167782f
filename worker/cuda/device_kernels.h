// CudaKernels: the GPU backend's op-kernel table, (op, "cuda") -> kernel,
// with the same op coverage as the CPU backend's (worker/engine/
// kernel_registry.h, CpuKernels()): every op of the IR.
//
//   ASSIGN_OR_RETURN(const DeviceStepKernel* kernel,
//                    CudaKernels().Find(step.op));
//   RETURN_IF_ERROR((*kernel)(step, env, lane, waits, events));
//
// Why a table of its own rather than entries of KernelRegistry: a CPU
// kernel runs a step to completion on host tiles (BufferSet) and a tagged,
// host-pointer Communicator (Gloo); a GPU kernel enqueues the step on
// streams after CUDA events of its dependencies and returns before the data
// moves, over device tiles (DeviceBufferSet) and NCCL, which matches by
// issue order. The two signatures share nothing but the step, so one
// std::function type for both would need a type-erased environment that
// every kernel casts back. The lookup and its errors are the same:
// UNIMPLEMENTED "op X has no kernel on backend "cuda"" for an op nobody
// registered (only OP_UNSPECIFIED today).
//
//  - OP_BROADCAST, OP_SEND_RECV: EnqueueRelayStep (device_relay.h)
//  - OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_ALL_REDUCE, OP_ALL_TO_ALL,
//    OP_LOCAL_COPY: device_collectives.h
//  - OP_COMPUTE: device_compute.h (cuBLAS GEMM, elementwise kernels)
// Kernels other than the relay's are wrapped so that their errors start
// with "step <id> (<op>, GPU): ".
//
// Thread safety: built on first use, read-only afterwards.
#ifndef MESHCAST_WORKER_CUDA_DEVICE_KERNELS_H_
#define MESHCAST_WORKER_CUDA_DEVICE_KERNELS_H_

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshcast/v1/plan.pb.h"
#include "worker/cuda/device_step.h"

namespace meshcast::worker::cuda {

class DeviceKernelTable {
 public:
  // ALREADY_EXISTS for an op registered twice; INVALID_ARGUMENT for an
  // empty kernel.
  absl::Status Register(v1::Step::Op op, DeviceStepKernel kernel);
  absl::StatusOr<const DeviceStepKernel*> Find(v1::Step::Op op) const;

 private:
  absl::flat_hash_map<int, DeviceStepKernel> kernels_;
};

const DeviceKernelTable& CudaKernels();

// True for the relay ops (their hops are timed one by one).
bool IsRelayOp(v1::Step::Op op);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_DEVICE_KERNELS_H_
