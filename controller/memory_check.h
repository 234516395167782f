// Memory admission: refuses at submit a reshard job whose tiles can never fit
// in the memory its workers reported (WorkerInfo.memory_bytes), instead of
// accepting it and failing later with an out-of-memory error on a worker.
//
//   RETURN_IF_ERROR(CheckTilesFitWorkers(problem, topology, registry.Workers()));
//
// A worker holds the source tile and the destination tile of each of its
// devices in the job (both when a device is in both meshes). Staging buffers
// come on top and depend on the plan; the worker checks those itself when
// the job starts (against the memory available then). Workers that report 0
// are not checked.
//
// Thread safety: pure functions over value types.
#ifndef MESHCAST_CONTROLLER_MEMORY_CHECK_H_
#define MESHCAST_CONTROLLER_MEMORY_CHECK_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "controller/worker_registry.h"
#include "planner/topology.h"
#include "planner/unit_task.h"

namespace meshcast {

// Bytes of the job's tiles on each host (index = host), source and
// destination tiles together.
std::vector<int64_t> TileBytesPerHost(const ReshardProblem& problem,
                                      const Topology& topology);

// INVALID_ARGUMENT naming the first worker whose tiles exceed its reported
// memory, with both figures in human units, e.g. "the job's tiles need
// 512.0 GiB on worker w3 (host 3), which reported 23.4 GiB of memory".
absl::Status CheckTilesFitWorkers(const ReshardProblem& problem,
                                  const Topology& topology,
                                  const std::vector<WorkerRecord>& workers);

}  // namespace meshcast

#endif  // MESHCAST_CONTROLLER_MEMORY_CHECK_H_
