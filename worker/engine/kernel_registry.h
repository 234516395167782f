// KernelRegistry: the op-kernel registry of the engine: which function runs
// a step of op O on backend B.
//
// The executor (worker/executor.h) schedules a program's step DAG; for each
// step it looks up the kernel of (step.op, its backend) here and calls it on
// the step's thread. A kernel runs this worker's part of one step: it reads
// and writes the step's operands in the job's tiles (StepEnvironment.buffers)
// and talks to the other workers of the step's group through the
// Communicator, tagging its messages with MessageTag(step id, hop, chunk)
// (relay_step.h) so that concurrent steps never mix.
//
//   KernelRegistry registry;
//   RETURN_IF_ERROR(registry.Register(v1::Step::OP_ALL_REDUCE, kCpuBackend,
//                                     RunAllReduce));
//   ASSIGN_OR_RETURN(const StepKernel* kernel,
//                    registry.Find(step.op, kCpuBackend));
//   RETURN_IF_ERROR((*kernel)(step, env));
//
// To add an op: give it a kernel per backend (a function with the
// StepKernel signature, in its own file under worker/engine/) and register
// it in that backend's table (CpuKernels(), cpu_kernels.cc).
//
// Errors: Register is ALREADY_EXISTS for a pair registered twice; Find is
// UNIMPLEMENTED naming the op and the backend for a pair nobody registered.
// Thread safety: Register before sharing; Find concurrently afterwards.
#ifndef MESHCAST_WORKER_ENGINE_KERNEL_REGISTRY_H_
#define MESHCAST_WORKER_ENGINE_KERNEL_REGISTRY_H_

#include <functional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshcast/v1/plan.pb.h"
#include "worker/program.h"
#include "worker/relay_step.h"

namespace meshcast::worker {

// What a kernel runs with: the program, the job's tiles, the communicator
// (null when the job has one worker), the cancellation, chunking and
// slicing options. Relays and every other op share it.
using StepEnvironment = RelayEnvironment;

// Runs this worker's part of `step`; returns when its local outputs hold
// their values and its sends are done. Errors need not name the step: the
// executor prefixes "step <id> (<op>)".
using StepKernel =
    std::function<absl::Status(const StepDesc& step, const StepEnvironment&)>;

// The backend of virtual CPU devices (Gloo between workers).
inline constexpr absl::string_view kCpuBackend = "cpu";

class KernelRegistry {
 public:
  absl::Status Register(v1::Step::Op op, absl::string_view backend,
                        StepKernel kernel);
  absl::StatusOr<const StepKernel*> Find(v1::Step::Op op,
                                         absl::string_view backend) const;

 private:
  absl::flat_hash_map<std::pair<int, std::string>, StepKernel> kernels_;
};

// The CPU backend's kernels: every op of the IR (cpu_kernels.cc). Built on
// first use; read-only afterwards.
const KernelRegistry& CpuKernels();

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_ENGINE_KERNEL_REGISTRY_H_
