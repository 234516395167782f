#include "planner/kinds/reshard_model/reshard_model_kind.h"

#include <map>
#include <numeric>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/ir/spec_convert.h"
#include "planner/kinds/reshard/reshard_kind.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

constexpr int kMaxReplicas = 256;
constexpr int kMaxTensors = 100000;

// A mesh of `shape` over devices 0..n-1, to check layouts before placing.
DeviceMesh UnplacedMesh(const std::vector<int>& shape) {
  DeviceMesh mesh;
  mesh.shape = shape;
  mesh.devices.resize(std::accumulate(shape.begin(), shape.end(), 1,
                                      std::multiplies<int>()));
  std::iota(mesh.devices.begin(), mesh.devices.end(), 0);
  return mesh;
}

absl::StatusOr<ShardingSpec> SpecOf(const v1::ShardingSpec& proto,
                                    const std::string& field,
                                    const TensorSpec& tensor,
                                    const MeshRequest& mesh,
                                    const std::string& mesh_field) {
  if (proto.text().empty() && proto.dims_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is required (e.g. \"S0,R\" or \"R,S1\")"));
  }
  ASSIGN_OR_RETURN(ShardingSpec spec, ShardingFromProto(proto, field));
  const absl::Status valid = spec.Validate(tensor, UnplacedMesh(mesh.shape));
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", spec.ToString(), " on ", mesh_field, " ",
                     mesh.ToString(), ": ", valid.message()));
  }
  return spec;
}

}  // namespace

int64_t ReshardModelRequest::model_bytes() const {
  int64_t bytes = 0;
  for (const ModelTensorRequest& t : tensors) bytes += t.tensor.num_bytes();
  return bytes;
}

absl::StatusOr<ReshardModelRequest> ReshardModelRequestOf(
    const v1::JobSpec& spec) {
  if (!spec.has_reshard_model()) {
    return absl::InvalidArgumentError("spec.reshard_model is not set");
  }
  const v1::ReshardModelSpec& m = spec.reshard_model();
  ReshardModelRequest request;
  if (!m.has_src_mesh()) {
    return absl::InvalidArgumentError(
        "reshard_model.src_mesh is required (the training mesh, e.g. 1x4)");
  }
  ASSIGN_OR_RETURN(request.src_mesh,
                   MeshRequestFromProto(m.src_mesh(), "reshard_model.src_mesh"));
  RETURN_IF_ERROR(CheckSpecRange("reshard_model.dst_meshes (count)",
                                 m.dst_meshes_size(), 1, kMaxReplicas));
  for (int i = 0; i < m.dst_meshes_size(); ++i) {
    const std::string field = absl::StrCat("reshard_model.dst_meshes[", i, "]");
    ASSIGN_OR_RETURN(MeshRequest mesh,
                     MeshRequestFromProto(m.dst_meshes(i), field));
    if (i > 0 && mesh.shape != request.dst_meshes[0].shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " has shape ", absl::StrJoin(mesh.shape, "x"),
          "; allowed: the shape of dst_meshes[0], ",
          absl::StrJoin(request.dst_meshes[0].shape, "x"),
          " (the replicas are alike)"));
    }
    request.dst_meshes.push_back(std::move(mesh));
  }
  RETURN_IF_ERROR(CheckSpecRange("reshard_model.tensors (count)",
                                 m.tensors_size(), 1, kMaxTensors));
  std::set<std::string> names;
  for (int i = 0; i < m.tensors_size(); ++i) {
    const v1::ModelTensor& t = m.tensors(i);
    const std::string field = absl::StrCat("reshard_model.tensors[", i, "]");
    ModelTensorRequest out;
    out.name = t.name().empty() ? absl::StrCat("tensor", i) : t.name();
    if (!names.insert(out.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".name '", out.name,
                       "' repeats an earlier tensor's; allowed: unique names"));
    }
    v1::TensorSpec proto;
    *proto.mutable_shape() = t.shape();
    proto.set_dtype(t.dtype() == v1::DTYPE_UNSPECIFIED ? v1::DTYPE_BFLOAT16
                                                       : t.dtype());
    ASSIGN_OR_RETURN(out.tensor, TensorFromProto(proto, field));
    ASSIGN_OR_RETURN(out.src_spec,
                     SpecOf(t.src_spec(), field + ".src_spec", out.tensor,
                            request.src_mesh, "src_mesh"));
    ASSIGN_OR_RETURN(out.dst_spec,
                     SpecOf(t.dst_spec(), field + ".dst_spec", out.tensor,
                            request.dst_meshes[0], "dst_meshes"));
    request.tensors.push_back(std::move(out));
  }
  if (!m.strategy().empty()) {
    absl::StatusOr<Strategy> strategy = ParseStrategy(m.strategy());
    if (!strategy.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reshard_model.strategy: ", strategy.status().message()));
    }
    request.strategy = *strategy;
  }
  return request;
}

DeviceMesh ReplicaMesh(const std::vector<DeviceMesh>& replicas) {
  DeviceMesh mesh;
  mesh.shape.push_back(static_cast<int>(replicas.size()));
  if (!replicas.empty()) {
    mesh.shape.insert(mesh.shape.end(), replicas[0].shape.begin(),
                      replicas[0].shape.end());
  }
  for (const DeviceMesh& replica : replicas) {
    mesh.devices.insert(mesh.devices.end(), replica.devices.begin(),
                        replica.devices.end());
  }
  return mesh;
}

ShardingSpec OverReplicas(const ShardingSpec& spec) {
  ShardingSpec out = spec;
  for (DimSharding& dim : out.dims) {
    for (int& axis : dim.mesh_axes) ++axis;
  }
  return out;
}

absl::Status ReshardModelKind::Validate(const v1::JobSpec& spec) const {
  return ReshardModelRequestOf(spec).status();
}

absl::StatusOr<PlacementRequest> ReshardModelKind::Meshes(
    const v1::JobSpec& spec) const {
  ASSIGN_OR_RETURN(const ReshardModelRequest request,
                   ReshardModelRequestOf(spec));
  PlacementRequest placement;
  placement.meshes.push_back(request.src_mesh);
  placement.names.push_back("reshard_model.src_mesh");
  for (size_t i = 0; i < request.dst_meshes.size(); ++i) {
    placement.meshes.push_back(request.dst_meshes[i]);
    placement.names.push_back(absl::StrCat("reshard_model.dst_meshes[", i, "]"));
  }
  // Hosts of their own where the cluster has them; never shared devices.
  placement.share_hosts = true;
  return placement;
}

absl::StatusOr<PlannedJob> ReshardModelKind::Plan(
    const v1::JobSpec& spec, const std::vector<DeviceMesh>& meshes,
    const Topology& topology, const PlanOptions& options) const {
  ASSIGN_OR_RETURN(const ReshardModelRequest request,
                   ReshardModelRequestOf(spec));
  if (meshes.size() != 1 + request.dst_meshes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a reshard_model job places 1 + ", request.dst_meshes.size(),
        " meshes; got ", meshes.size()));
  }
  std::map<int, std::string> owner;
  for (size_t i = 0; i < meshes.size(); ++i) {
    RETURN_IF_ERROR(meshes[i].Validate(topology));
    const std::string name =
        i == 0 ? "reshard_model.src_mesh"
               : absl::StrCat("reshard_model.dst_meshes[", i - 1, "]");
    for (int device : meshes[i].devices) {
      auto [it, fresh] = owner.try_emplace(device, name);
      if (!fresh) {
        return absl::InvalidArgumentError(
            absl::StrCat(it->second, " and ", name, " share device ", device,
                         "; allowed: meshes on separate devices"));
      }
    }
  }
  const DeviceMesh replicas = ReplicaMesh(
      std::vector<DeviceMesh>(meshes.begin() + 1, meshes.end()));
  std::vector<ReshardProblem> problems;
  for (const ModelTensorRequest& t : request.tensors) {
    problems.push_back({t.tensor, meshes[0], t.src_spec, replicas,
                        OverReplicas(t.dst_spec)});
  }
  ASSIGN_OR_RETURN(PlannedJob job, PlanReshardJob(problems, topology,
                                                  request.strategy, options));
  job.plan.set_kind("reshard_model");
  return job;
}

void ReshardModelKind::Summarize(const v1::JobSpec& spec,
                                 const v1::Plan& /*plan*/,
                                 v1::JobResult& result) const {
  SummarizeReshard(result);
  const absl::StatusOr<ReshardModelRequest> request =
      ReshardModelRequestOf(spec);
  if (!request.ok()) return;
  auto& metrics = *result.mutable_metrics();
  metrics["model_bytes"] = static_cast<double>(request->model_bytes());
  metrics["replicas"] = static_cast<double>(request->dst_meshes.size());
}

}  // namespace meshcast
