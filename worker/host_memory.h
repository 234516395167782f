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
//
// In a container the host's /proc/meminfo tells what the machine has, not
// what the container may use: a worker whose cgroup v2 has a memory limit
// takes `memory.max` less `memory.current` (available) and `memory.max`
// (total) of its own cgroup and of every ancestor up to the cgroup root
// (/proc/self/cgroup's "0::" line under /sys/fs/cgroup), the tightest one,
// and the smaller of that and /proc/meminfo's figure. A cgroup without a
// limit ("max"), a cgroup v1 host or unreadable files: /proc/meminfo alone.
// The parsers take the files' text, so tests drive them with samples.
// Thread safety: pure functions (Read* read /proc and /sys).
#ifndef MESHCAST_WORKER_HOST_MEMORY_H_
#define MESHCAST_WORKER_HOST_MEMORY_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
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
// The cgroup v2 path ("/kubepods/pod1/c2") from /proc/self/cgroup's text
// (its "0::" line); NotFound on a host with cgroup v1 only.
absl::StatusOr<std::string> ParseCgroupV2Path(
    absl::string_view proc_self_cgroup);
// memory.max's text: the limit in bytes, or nullopt for "max" (no limit);
// InvalidArgument for anything else.
absl::StatusOr<std::optional<int64_t>> ParseCgroupMemoryMax(
    absl::string_view text);
// memory.current's text, in bytes.
absl::StatusOr<int64_t> ParseCgroupBytes(absl::string_view text);

// The memory limit of the tightest cgroup level and what is in use there.
struct CgroupMemory {
  int64_t limit = 0;
  int64_t current = 0;
  int64_t available() const { return std::max<int64_t>(0, limit - current); }
};
// Reads the file at an absolute path.
using ReadFileFn =
    std::function<absl::StatusOr<std::string>(const std::string&)>;
// The cgroup levels from the process's own up to `root` (the mount point
// of the cgroup v2 hierarchy): the one with the least available memory
// among those with a limit; nullopt when none has one or nothing can be
// read.
std::optional<CgroupMemory> CgroupMemoryOf(absl::string_view proc_self_cgroup,
                                           absl::string_view root,
                                           const ReadFileFn& read_file);
// What a worker may use: the smaller of /proc/meminfo's figure and the
// cgroup's (when limited).
int64_t CombineAvailable(int64_t meminfo_available,
                         const std::optional<CgroupMemory>& cgroup);
int64_t CombineTotal(int64_t meminfo_total,
                     const std::optional<CgroupMemory>& cgroup);

// MemAvailable / MemTotal of /proc/meminfo combined with this process's
// cgroup v2 limit (above); Unavailable if /proc/meminfo cannot be read (not
// Linux). The total is what a CPU worker reports to the controller
// (WorkerInfo.memory_bytes) for its admission check.
absl::StatusOr<int64_t> ReadMemAvailable();
absl::StatusOr<int64_t> ReadMemTotal();

struct HostMemoryNeed {
  int tiles = 0;
  int64_t tile_bytes = 0;
  // Staging of the steps that may run at once (relay slots,
  // RelayStagingBytes; collective accumulators, CollectiveStagingBytes):
  // the largest max_concurrent_steps of them, or, when smaller, the sum
  // over a cover of the steps by dependency paths of each path's largest
  // (steps on one path never run at once: iterations of a collective).
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
