#include "planner/kinds/reshard/reshard_request.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/ir/spec_convert.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

// Rank of a mesh as the spec sees it: a 1-D request is laid out as 1 x n,
// but its spec may only use axis 0.
absl::Status CheckSpecFits(absl::string_view spec_field,
                           const ShardingSpec& spec, const TensorSpec& tensor,
                           absl::string_view mesh_field,
                           const MeshRequest& mesh) {
  if (spec.rank() != static_cast<int>(tensor.shape.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec_field, " ", spec.ToString(), " has ", spec.rank(),
                     " entries but the tensor has ", tensor.shape.size(),
                     " dimensions (shape ", absl::StrJoin(tensor.shape, "x"),
                     "); give one of R, S0, S1, S01 per dimension"));
  }
  for (const DimSharding& dim : spec.dims) {
    for (int axis : dim.mesh_axes) {
      if (axis >= static_cast<int>(mesh.shape.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat(spec_field, " ", spec.ToString(), " uses mesh axis ",
                         axis, " but ", mesh_field, " ", mesh.ToString(),
                         " has ", mesh.shape.size(), " axes"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

PlacementRequest ReshardRequest::Meshes() const {
  PlacementRequest request;
  request.meshes = {src_mesh, dst_mesh};
  request.names = {"src_mesh", "dst_mesh"};
  request.allow_overlap = allow_overlap;
  return request;
}

absl::Status CheckUserBufferNames(absl::string_view src_field,
                                  const std::string& src,
                                  absl::string_view dst_field,
                                  const std::string& dst) {
  if (src.empty() != dst.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        src_field, " and ", dst_field,
        ": give both (user buffers for sources and destinations) or "
        "neither"));
  }
  if (!src.empty() && src == dst) {
    return absl::InvalidArgumentError(
        absl::StrCat(dst_field, " '", dst, "' equals ", src_field,
                     "; allowed: two different names, e.g. train/ and "
                     "infer/"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ReshardRequest> ReshardRequestFromProto(
    const v1::ReshardSpec& spec) {
  ReshardRequest request;
  if (!spec.has_tensor()) {
    return absl::InvalidArgumentError(
        "reshard.tensor is required (shape and dtype)");
  }
  ASSIGN_OR_RETURN(request.tensor,
                   TensorFromProto(spec.tensor(), "reshard.tensor"));
  if (!spec.has_src_mesh() || !spec.has_dst_mesh()) {
    return absl::InvalidArgumentError(
        "reshard.src_mesh and reshard.dst_mesh are required");
  }
  ASSIGN_OR_RETURN(request.src_mesh,
                   MeshRequestFromProto(spec.src_mesh(), "src_mesh"));
  ASSIGN_OR_RETURN(request.dst_mesh,
                   MeshRequestFromProto(spec.dst_mesh(), "dst_mesh"));
  request.allow_overlap = spec.allow_overlap();
  RETURN_IF_ERROR(CheckUserBufferNames("reshard.src_buffer", spec.src_buffer(),
                                       "reshard.dst_buffer", spec.dst_buffer()));
  request.src_buffer = spec.src_buffer();
  request.dst_buffer = spec.dst_buffer();
  ASSIGN_OR_RETURN(request.src_spec,
                   ShardingFromProto(spec.src_spec(), "src_spec"));
  ASSIGN_OR_RETURN(request.dst_spec,
                   ShardingFromProto(spec.dst_spec(), "dst_spec"));
  RETURN_IF_ERROR(CheckSpecFits("src_spec", request.src_spec, request.tensor,
                                "src_mesh", request.src_mesh));
  RETURN_IF_ERROR(CheckSpecFits("dst_spec", request.dst_spec, request.tensor,
                                "dst_mesh", request.dst_mesh));
  if (spec.strategy().empty()) {
    request.strategy = Strategy::kAuto;
  } else {
    absl::StatusOr<Strategy> strategy = ParseStrategy(spec.strategy());
    if (!strategy.ok()) {
      // The planner's message names the field and the allowed names.
      return absl::InvalidArgumentError(strategy.status().message());
    }
    request.strategy = *strategy;
  }
  return request;
}

absl::StatusOr<ReshardProblem> MakeProblem(const ReshardRequest& request,
                                           const DeviceMesh& src_mesh,
                                           const DeviceMesh& dst_mesh,
                                           const Topology& topology) {
  ReshardProblem problem;
  problem.tensor = request.tensor;
  problem.src_mesh = src_mesh;
  problem.src_spec = request.src_spec;
  problem.dst_mesh = dst_mesh;
  problem.dst_spec = request.dst_spec;
  RETURN_IF_ERROR(problem.Validate(topology));
  return problem;
}

}  // namespace meshcast
