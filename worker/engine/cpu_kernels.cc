// The CPU backend's table of kernels (kernel_registry.h): one entry per op
// of the IR.
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/engine/collectives.h"
#include "worker/engine/compute_step.h"
#include "worker/engine/kernel_registry.h"
#include "worker/relay_step.h"

namespace meshcast::worker {
namespace {

// Prefixes a kernel's errors with the step they belong to (relays name
// their step, chain and slice themselves).
StepKernel NamingTheStep(absl::Status (*kernel)(const StepDesc&,
                                                const StepEnvironment&)) {
  return [kernel](const StepDesc& step, const StepEnvironment& env) {
    absl::Status status = kernel(step, env);
    if (status.ok()) return status;
    return absl::Status(status.code(), absl::StrCat("step ", step.id, " (",
                                                    v1::Step::Op_Name(step.op),
                                                    "): ", status.message()));
  };
}

KernelRegistry* BuildCpuKernels() {
  auto* registry = new KernelRegistry;
  const std::pair<v1::Step::Op, StepKernel> table[] = {
      {v1::Step::OP_BROADCAST, ExecuteRelayStep},
      {v1::Step::OP_SEND_RECV, ExecuteRelayStep},
      {v1::Step::OP_ALL_GATHER, NamingTheStep(RunAllGather)},
      {v1::Step::OP_REDUCE_SCATTER, NamingTheStep(RunReduceScatter)},
      {v1::Step::OP_ALL_REDUCE, NamingTheStep(RunAllReduce)},
      {v1::Step::OP_ALL_TO_ALL, NamingTheStep(RunAllToAll)},
      {v1::Step::OP_LOCAL_COPY, NamingTheStep(RunLocalCopy)},
      {v1::Step::OP_COMPUTE, NamingTheStep(RunCompute)},
  };
  for (const auto& [op, kernel] : table) {
    // The table has each op once; a failure here is a programming error.
    absl::Status status = registry->Register(op, kCpuBackend, kernel);
    if (!status.ok()) std::abort();
  }
  return registry;
}

}  // namespace

const KernelRegistry& CpuKernels() {
  static const KernelRegistry* const registry = BuildCpuKernels();
  return *registry;
}

}  // namespace meshcast::worker
