// Host memory for CPU jobs: what a program needs on this worker and what the
// host can still give, so that a job too large for the host is refused up
// front with RESOURCE_EXHAUSTED (naming the worker, the bytes needed and the
// bytes available) instead of dying of std::bad_alloc, or of the kernel's
// OOM killer, half-way through filling its tiles.
//
//   const HostMemoryNeed need = HostMemoryNeedOf(program, relay, max_steps);
//   RETURN_IF_ERROR(CheckHostMemory(program, need, ReadMemAvailable));
//
// The figure of what is available is a function so that tests can inject a
// small one instead of allocating gigabytes.
// Thread safety: pure functions (ReadMemAvailable reads /proc/meminfo).
#ifndef MESHCAST_WORKER_HOST_MEMORY_H_
#define MESHCAST_WORKER_HOST_MEMORY_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "util/bytes_text.h"  // FormatBytes, used with these figures
#include "worker/program.h"
#include "worker/relay_step.h"

namespace meshcast::worker {

// Bytes of memory the host can give a new job without swapping.
using AvailableMemoryFn = std::function<absl::StatusOr<int64_t>()>;

// The `field` line (e.g. "MemAvailable", "MemTotal") of /proc/meminfo's
// text, in bytes; NotFound if the line is missing, InvalidArgument if it
// does not parse.
absl::StatusOr<int64_t> ParseMeminfoField(absl::string_view meminfo,
                                          absl::string_view field);
absl::StatusOr<int64_t> ParseMemAvailable(absl::string_view meminfo);
// ParseMemAvailable / MemTotal of /proc/meminfo; Unavailable if it cannot be
// read (not Linux). MemTotal is what a CPU worker reports to the controller
// (WorkerInfo.memory_bytes) for its admission check.
absl::StatusOr<int64_t> ReadMemAvailable();
absl::StatusOr<int64_t> ReadMemTotal();

struct HostMemoryNeed {
  int tiles = 0;
  int64_t tile_bytes = 0;
  // Staging of the steps that may run at once (relay slots,
  // RelayStagingBytes; collective accumulators, CollectiveStagingBytes):
  // the largest max_concurrent_steps of them.
  int64_t staging_bytes = 0;

  int64_t total() const { return tile_bytes + staging_bytes; }
};

HostMemoryNeed HostMemoryNeedOf(const ParsedProgram& program,
                                const RelayOptions& relay,
                                int max_concurrent_steps);

// OK if `need` fits in what `available` reports, or if the figure cannot be
// read (nothing to compare with; an allocation that fails later is still
// RESOURCE_EXHAUSTED). Otherwise RESOURCE_EXHAUSTED:
// "worker w1: job j7 needs 128.0 GiB for its tiles, 21.3 GiB available
// (...)".
absl::Status CheckHostMemory(const ParsedProgram& program,
                             const HostMemoryNeed& need,
                             const AvailableMemoryFn& available);

// RESOURCE_EXHAUSTED for an allocation that failed although the check
// passed (the host's memory went to someone else meanwhile): names the
// worker, the job, `what` failed, the need and what is available now.
absl::Status OutOfHostMemoryError(const ParsedProgram& program,
                                  const HostMemoryNeed& need,
                                  const AvailableMemoryFn& available,
                                  absl::string_view what);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_HOST_MEMORY_H_
