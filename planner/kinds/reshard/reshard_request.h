// ReshardRequest: a reshard job's spec checked and converted to domain types
// before it is queued, so that a bad spec is rejected at submit with one
// clear error and never reaches the planner or the workers.
//
//   ASSIGN_OR_RETURN(ReshardRequest request, ReshardRequestFromProto(spec));
//   PlacementRequest meshes = request.Meshes();  // [src_mesh, dst_mesh]
//   ... placement = allocator.Acquire(meshes, ...)
//   ASSIGN_OR_RETURN(ReshardProblem problem,
//                    MakeProblem(request, placement->meshes[0],
//                                placement->meshes[1], topology));
//
// Checks here need no cluster: tensor shape and dtype, spec tokens, spec rank
// against the tensor, spec axes against the mesh rank, strategy name. The
// cluster-dependent checks (mesh against cluster size) are the allocator's.
//
// Thread safety: pure functions over value types.
#ifndef MESHCAST_PLANNER_KINDS_RESHARD_RESHARD_REQUEST_H_
#define MESHCAST_PLANNER_KINDS_RESHARD_RESHARD_REQUEST_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/placement.h"
#include "meshcast/v1/job.pb.h"
#include "planner/sharding.h"
#include "planner/strategy.h"
#include "planner/tensor.h"
#include "planner/topology.h"
#include "planner/unit_task.h"

namespace meshcast {

struct ReshardRequest {
  // The meshes to place: [src_mesh, dst_mesh], named as the spec's fields.
  PlacementRequest Meshes() const;

  TensorSpec tensor;
  ShardingSpec src_spec;
  ShardingSpec dst_spec;
  MeshRequest src_mesh;
  MeshRequest dst_mesh;
  bool allow_overlap = false;
  Strategy strategy = Strategy::kAuto;
  // User buffers of the source and destination tiles (both or neither).
  std::string src_buffer;
  std::string dst_buffer;
};

// The two names of a job's user buffers (or prefixes), checked: both or
// neither, and not the same (a device in both meshes would confuse its two
// tiles). INVALID_ARGUMENT naming the two fields.
absl::Status CheckUserBufferNames(absl::string_view src_field,
                                  const std::string& src,
                                  absl::string_view dst_field,
                                  const std::string& dst);

// Errors are INVALID_ARGUMENT and name the field (e.g. "src_spec: ...").
absl::StatusOr<ReshardRequest> ReshardRequestFromProto(
    const v1::ReshardSpec& spec);

// The planner problem for a placed request; validated against `topology`.
absl::StatusOr<ReshardProblem> MakeProblem(const ReshardRequest& request,
                                           const DeviceMesh& src_mesh,
                                           const DeviceMesh& dst_mesh,
                                           const Topology& topology);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_RESHARD_RESHARD_REQUEST_H_
