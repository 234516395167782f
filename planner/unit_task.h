// Reshard problems and their unit multicast tasks.
//
// A ReshardProblem moves one tensor from a source layout (mesh + spec) to a
// destination layout. Intersecting the tiles of the two layouts yields unit
// tasks: a slice (the intersection of a destination tile with a source tile),
// its candidate senders (every device holding the source tile) and its
// receivers (every device holding the destination tile that does not already
// hold the slice).
//
// Thread safety: pure functions over value types.
#ifndef MESHCAST_PLANNER_UNIT_TASK_H_
#define MESHCAST_PLANNER_UNIT_TASK_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/mesh.h"
#include "planner/sharding.h"
#include "planner/tensor.h"
#include "planner/topology.h"

namespace meshcast {

struct ReshardProblem {
  TensorSpec tensor;
  DeviceMesh src_mesh;
  ShardingSpec src_spec;
  DeviceMesh dst_mesh;
  ShardingSpec dst_spec;

  // Validates meshes against the topology and specs against tensor + mesh.
  absl::Status Validate(const Topology& topology) const;
};

struct UnitTask {
  int tensor = 0;            // index of the problem in a multi-tensor plan
  Box slice;                 // global tensor coordinates, non-empty
  DeviceList senders;        // devices holding the slice, ascending
  DeviceList receivers;      // devices needing it and not holding it
  int64_t bytes = 0;
};

// Unit tasks of one problem; tasks whose receivers all hold the slice already
// are dropped. `tensor_index` is copied into UnitTask::tensor.
absl::StatusOr<std::vector<UnitTask>> ComputeUnitTasks(
    const ReshardProblem& problem, int tensor_index = 0);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_UNIT_TASK_H_
