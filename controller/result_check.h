// CheckWorkerResult: cross-checks what a worker reports after RunTask
// against the program the controller sent it, so that a buggy or forged
// report cannot make a job look verified or fast.
//
// A report contradicts its program when:
//  - it lists a step id that is not a step of the program, or one step
//    twice (a worker reports only the steps it owns, each once);
//  - a step's bytes differ from the plan's bytes for that step;
//  - a step's seconds are negative, or imply a rate above
//    `max_bytes_per_second` (the caller passes a multiple of the
//    topology's fastest link; steps under kMinRateCheckBytes, compute
//    steps and collectives over a group of one device are not
//    rate-checked: their timings are noise, FLOP-bound or nothing);
//  - with verify FULL, elements_verified differs from the elements of the
//    ROLE_DESTINATION buffers on the worker's own devices (local_devices);
//    with SAMPLE it exceeds them; with OFF it is not 0;
//  - mismatches is negative or above elements_verified; seconds negative;
//  - with verify CHECKSUM, it verified elements, or its tile checksums are
//    not exactly one per source and destination buffer of its devices.
//
// CheckTensorChecksums then compares the checksums of all workers (verify
// CHECKSUM): for each tensor that has sources, the tiles of one box must
// agree (replicas), and the destinations' distinct boxes must add up to the
// sources' (worker/tile_checksum.h: tiles that partition a tensor sum to
// its checksum).
//
//   absl::Status s = CheckWorkerResult(program, response.result(),
//                                      {.max_bytes_per_second = 10 * link});
//   if (!s.ok()) fail the job with s.message() (it names the worker).
//
// Errors: INVALID_ARGUMENT, the message naming the worker (the program's
// `worker`), the step or the field, what was reported and what the plan
// says. Pure function: thread-safe.
#ifndef MESHCAST_CONTROLLER_RESULT_CHECK_H_
#define MESHCAST_CONTROLLER_RESULT_CHECK_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "meshcast/v1/job.pb.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/topology.h"

namespace meshcast {

// Steps smaller than this are not rate-checked: a timer's resolution and
// data already sitting in socket buffers make their rates meaningless.
inline constexpr int64_t kMinRateCheckBytes = int64_t{1} << 20;

struct ResultCheckOptions {
  // A step faster than this (bytes / seconds) is impossible; 0 = no check.
  double max_bytes_per_second = 0;
};

// A step between devices of one worker is a memory copy, which the
// topology's links (modelled, possibly slower than the host) do not bound:
// the plausibility bound never goes below `factor` times this.
inline constexpr double kMemoryCopyBytesPerSecond = 50e9;

// `factor` times the fastest of the topology's links (NIC, device port,
// host copy capacity), its devices' memory bandwidth (a copy between
// virtual devices of one GPU moves at HBM speed) and
// kMemoryCopyBytesPerSecond: the bound JobManager uses.
double MaxPlausibleBytesPerSecond(const Topology& topology, double factor);

absl::Status CheckWorkerResult(const v1::WorkerProgram& program,
                               const v1::JobResult& result,
                               const ResultCheckOptions& options);

// FAILED_PRECONDITION naming the tensor and the box when the data did not
// arrive intact; `results` are every worker's, each already checked by
// CheckWorkerResult.
absl::Status CheckTensorChecksums(
    const v1::Plan& plan, const std::vector<const v1::JobResult*>& results);

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_RESULT_CHECK_H_
