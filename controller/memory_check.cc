#include "controller/memory_check.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "planner/tensor.h"
#include "proto/dtype_convert.h"
#include "util/bytes_text.h"

namespace meshcast {

std::vector<int64_t> BufferBytesPerHost(const v1::Plan& plan,
                                        const Topology& topology) {
  std::vector<int64_t> per_host(std::max(topology.num_hosts, 0), 0);
  if (topology.devices_per_host < 1) return per_host;
  for (const v1::Buffer& buffer : plan.buffers()) {
    const int host = topology.HostOf(buffer.device());
    if (buffer.device() < 0 || host >= static_cast<int>(per_host.size())) {
      continue;
    }
    int64_t element_size = 1;
    if (buffer.tensor() >= 0 && buffer.tensor() < plan.tensors_size()) {
      absl::StatusOr<DType> dtype =
          DTypeFromProto(plan.tensors(buffer.tensor()).dtype(), "dtype");
      if (dtype.ok()) element_size = DTypeSize(*dtype);
    }
    int64_t elements = 1;
    for (const v1::Interval& i : buffer.box()) {
      elements *= std::max<int64_t>(0, i.end() - i.begin());
    }
    per_host[host] += elements * element_size;
  }
  return per_host;
}

absl::Status CheckBuffersFitWorkers(const v1::Plan& plan,
                                    const Topology& topology,
                                    const std::vector<WorkerRecord>& workers) {
  const std::vector<int64_t> needed = BufferBytesPerHost(plan, topology);
  for (const WorkerRecord& worker : workers) {
    if (worker.memory_bytes <= 0 || worker.host_index < 0 ||
        worker.host_index >= static_cast<int>(needed.size())) {
      continue;
    }
    const int64_t need = needed[worker.host_index];
    if (need > worker.memory_bytes) {
      // "tiles": the word operators know from reshard jobs; any buffer counts.
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
