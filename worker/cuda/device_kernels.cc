#include "worker/cuda/device_kernels.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/cuda/device_collectives.h"
#include "worker/cuda/device_compute.h"

namespace meshcast::worker::cuda {
namespace {

using KernelFunction = absl::Status (*)(const StepDesc&,
                                        const DeviceRelayEnvironment&,
                                        const DeviceLane&,
                                        absl::Span<const cudaEvent_t>,
                                        const StepEvents&);

// Prefixes a kernel's errors with the step (relays name theirs already).
DeviceStepKernel NamingTheStep(KernelFunction kernel) {
  return [kernel](const StepDesc& step, const DeviceRelayEnvironment& env,
                  const DeviceLane& lane, absl::Span<const cudaEvent_t> waits,
                  const StepEvents& events) {
    absl::Status status = kernel(step, env, lane, waits, events);
    if (status.ok()) return status;
    return absl::Status(
        status.code(),
        absl::StrCat("step ", step.id, " (", v1::Step::Op_Name(step.op),
                     ", GPU): ", status.message()));
  };
}

DeviceKernelTable* BuildCudaKernels() {
  auto* table = new DeviceKernelTable;
  const std::pair<v1::Step::Op, DeviceStepKernel> entries[] = {
      {v1::Step::OP_BROADCAST, EnqueueRelayStep},
      {v1::Step::OP_SEND_RECV, EnqueueRelayStep},
      {v1::Step::OP_ALL_GATHER, NamingTheStep(EnqueueAllGather)},
      {v1::Step::OP_REDUCE_SCATTER, NamingTheStep(EnqueueReduceScatter)},
      {v1::Step::OP_ALL_REDUCE, NamingTheStep(EnqueueAllReduce)},
      {v1::Step::OP_ALL_TO_ALL, NamingTheStep(EnqueueAllToAll)},
      {v1::Step::OP_LOCAL_COPY, NamingTheStep(EnqueueLocalCopy)},
      {v1::Step::OP_COMPUTE, NamingTheStep(EnqueueCompute)},
  };
  for (const auto& [op, kernel] : entries) {
    // Each op once; a failure is a programming error.
    if (!table->Register(op, kernel).ok()) std::abort();
  }
  return table;
}

}  // namespace

absl::Status DeviceKernelTable::Register(v1::Step::Op op,
                                         DeviceStepKernel kernel) {
  if (!kernel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel of ", v1::Step::Op_Name(op), " on backend \"", kCudaBackend,
        "\" is empty"));
  }
  if (!kernels_.try_emplace(static_cast<int>(op), std::move(kernel)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("a kernel of ", v1::Step::Op_Name(op), " on backend \"",
                     kCudaBackend, "\" is registered already"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const DeviceStepKernel*> DeviceKernelTable::Find(
    v1::Step::Op op) const {
  auto it = kernels_.find(static_cast<int>(op));
  if (it == kernels_.end()) {
    const std::string name = v1::Step::Op_IsValid(op)
                                 ? v1::Step::Op_Name(op)
                                 : absl::StrCat(static_cast<int>(op));
    return absl::UnimplementedError(absl::StrCat(
        "op ", name, " has no kernel on backend \"", kCudaBackend, "\""));
  }
  return &it->second;
}

const DeviceKernelTable& CudaKernels() {
  static const DeviceKernelTable* const table = BuildCudaKernels();
  return *table;
}

bool IsRelayOp(v1::Step::Op op) {
  return op == v1::Step::OP_BROADCAST || op == v1::Step::OP_SEND_RECV;
}

}  // namespace meshcast::worker::cuda
