// Memory admission: refuses at submit a job whose buffers can never fit in
// the memory its workers reported (WorkerInfo.memory_bytes), instead of
// accepting it and failing later with an out-of-memory error on a worker.
// Works from the job's Plan IR, so it covers every job kind.
//
//   ASSIGN_OR_RETURN(PlannedJob planned, kind->Plan(spec, meshes, topology,
//   {})); RETURN_IF_ERROR(CheckBuffersFitWorkers(planned.plan, topology,
//                                          registry.Workers()));
//
// A worker holds every buffer of the plan on its devices (source,
// destination and scratch, each its box times the element size of its
// tensor). Staging buffers of the engine come on top; the worker checks
// those itself when the job starts (against the memory available then).
// Workers that report 0 are not checked.
//
// Thread safety: pure functions over value types.
#ifndef MESHCAST_CONTROLLER_MEMORY_CHECK_H_
#define MESHCAST_CONTROLLER_MEMORY_CHECK_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "controller/worker_registry.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/topology.h"

namespace meshcast {

// Bytes of the plan's buffers on each host (index = host).
std::vector<int64_t> BufferBytesPerHost(const v1::Plan& plan,
                                        const Topology& topology);

// INVALID_ARGUMENT naming the first worker whose buffers exceed its reported
// memory, with both figures in human units, e.g. "the job's tiles need
// 512.0 GiB on worker w3 (host 3), which reported 23.4 GiB of memory".
absl::Status CheckBuffersFitWorkers(const v1::Plan& plan,
                                    const Topology& topology,
                                    const std::vector<WorkerRecord>& workers);

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_MEMORY_CHECK_H_
