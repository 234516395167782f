#include "controller/memory_check.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "planner/sharding.h"
#include "planner/tensor.h"
#include "util/bytes_text.h"

namespace meshcast {
namespace {

void AddMeshTiles(const TensorSpec& tensor, const DeviceMesh& mesh,
                  const ShardingSpec& spec, const Topology& topology,
                  std::vector<int64_t>& per_host) {
  const int64_t element_size = DTypeSize(tensor.dtype);
  for (int i = 0; i < static_cast<int>(mesh.devices.size()); ++i) {
    const int host = topology.HostOf(mesh.devices[i]);
    if (host < 0 || host >= static_cast<int>(per_host.size())) continue;
    per_host[host] +=
        NumElements(DeviceBox(tensor, mesh, spec, i)) * element_size;
  }
}

}  // namespace

std::vector<int64_t> TileBytesPerHost(const ReshardProblem& problem,
                                      const Topology& topology) {
  std::vector<int64_t> per_host(std::max(topology.num_hosts, 0), 0);
  AddMeshTiles(problem.tensor, problem.src_mesh, problem.src_spec, topology,
               per_host);
  AddMeshTiles(problem.tensor, problem.dst_mesh, problem.dst_spec, topology,
               per_host);
  return per_host;
}

absl::Status CheckTilesFitWorkers(const ReshardProblem& problem,
                                  const Topology& topology,
                                  const std::vector<WorkerRecord>& workers) {
  const std::vector<int64_t> needed = TileBytesPerHost(problem, topology);
  for (const WorkerRecord& worker : workers) {
    if (worker.memory_bytes <= 0 || worker.host_index < 0 ||
        worker.host_index >= static_cast<int>(needed.size())) {
      continue;
    }
    const int64_t need = needed[worker.host_index];
    if (need > worker.memory_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the job's tiles need ", FormatBytes(need), " on worker ",
          worker.name, " (host ", worker.host_index, "), which reported ",
          FormatBytes(worker.memory_bytes),
          " of memory; use a smaller tensor or meshes over more hosts"));
    }
  }
  return absl::OkStatus();
}

}  // namespace meshcast
