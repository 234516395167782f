// WorkerDevices: what `meshctl up` gives every worker as its --devices flag,
// from meshctl's --devices SPEC and its older shorthand
// --devices-per-worker K (= --devices cpu:K).
//
//   ASSIGN_OR_RETURN(WorkerDevices devices,
//                    ResolveWorkerDevices(devices_flag, devices_per_worker,
//                                         devices_per_worker_given));
//   worker_args.push_back("--devices=" + devices.spec);
//
// The syntax is the worker's (worker/device_spec.h): cpu, cpu:N, cuda,
// cuda:ID[,ID...], cuda:IDxK[,...]. meshctl checks only the shape of the
// spec, to refuse a typo at once with a message naming the flag; the worker
// still validates it fully (e.g. that the GPUs exist) and `up` reports its
// error line if it refuses. The count is what the spec promises: 0 for
// `cuda` (every visible GPU), which only the registered worker can tell.
//
// Thread safety: pure functions.
#ifndef MESHCAST_CLI_WORKER_DEVICES_H_
#define MESHCAST_CLI_WORKER_DEVICES_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshcast::cli {

// The worker's default and meshctl up's default device count.
inline constexpr int kDefaultCpuDevicesPerWorker = 4;

struct WorkerDevices {
  std::string spec;  // as passed to the worker, e.g. "cpu:4", "cuda:0x4"
  std::string kind;  // "cpu" or "cuda"
  int count = 0;     // logical devices per worker; 0 = not known until run
};

// Parses one --devices value. INVALID_ARGUMENT naming --devices and the
// accepted forms.
absl::StatusOr<WorkerDevices> ParseWorkerDevices(absl::string_view spec);

// Combines `meshctl up`'s two device flags. `devices_spec` empty means
// --devices was not given. Giving both is allowed only when they agree
// (--devices cpu:K with --devices-per-worker K); otherwise INVALID_ARGUMENT
// naming both flags.
absl::StatusOr<WorkerDevices> ResolveWorkerDevices(
    absl::string_view devices_spec, int devices_per_worker,
    bool devices_per_worker_given);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_WORKER_DEVICES_H_
