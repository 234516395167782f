#include "planner/kinds/reshard_model/reshard_model_kind.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/ir/spec_convert.h"
#include "planner/kinds/reshard/reshard_kind.h"
#include "planner/kinds/reshard/reshard_request.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

constexpr int kMaxReplicas = 256;
constexpr int kMaxTensors = 100000;

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

// Split over the last axis of a mesh of `rank` axes (tensor parallelism
// inside a host), dimension `dim` of a tensor of `dims` dimensions; dim < 0:
// replicated.
ShardingSpec TensorParallel(int dims, int dim, int rank) {
  ShardingSpec spec;
  spec.dims.resize(dims);
  if (dim >= 0) spec.dims[dim].mesh_axes.push_back(rank - 1);
  return spec;
}

absl::Status CheckPresetRange(absl::string_view name, int64_t value,
                              int64_t low, int64_t high) {
  return CheckSpecRange(absl::StrCat("reshard_model.preset.", name), value,
                        low, high);
}

// The layer index of a name with "layers.N." in it.
std::optional<int> LayerIndex(const std::string& name) {
  constexpr char kLayers[] = "layers.";
  constexpr size_t kLayersLength = sizeof(kLayers) - 1;
  for (size_t at = name.find(kLayers); at != std::string::npos;
       at = name.find(kLayers, at + 1)) {
    size_t end = at + kLayersLength;
    int index = 0;
    size_t digits = 0;
    while (end < name.size() && absl::ascii_isdigit(name[end]) && digits < 7) {
      index = index * 10 + (name[end] - '0');
      ++end;
      ++digits;
    }
    if (digits > 0 && end < name.size() && name[end] == '.') return index;
  }
  return std::nullopt;
}

// The stages of a pipeline-parallel request: a preset's tensors by their
// place in the model, listed ones by `stage` or their layer index.
absl::Status AssignStages(const v1::ReshardModelSpec& m,
                          size_t preset_tensors, int stages,
                          std::vector<ModelTensorRequest>& tensors) {
  int layers = m.has_preset() ? m.preset().layers() : 0;
  for (const ModelTensorRequest& t : tensors) {
    if (std::optional<int> l = LayerIndex(t.name)) {
      layers = std::max(layers, *l + 1);
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    ModelTensorRequest& t = tensors[i];
    if (i < preset_tensors) {
      // embed first, the final norm and the head last.
      t.stage = StageOfLayerName(t.name, layers, stages)
                    .value_or(t.name == "embed" ? 0 : stages - 1);
      continue;
    }
    const int listed = static_cast<int>(i - preset_tensors);
    const v1::ModelTensor& proto = m.tensors(listed);
    const std::string field =
        absl::StrCat("reshard_model.tensors[", listed, "].stage");
    if (proto.has_stage()) {
      RETURN_IF_ERROR(CheckSpecRange(field, proto.stage(), 0, stages - 1));
      t.stage = proto.stage();
      continue;
    }
    std::optional<int> stage = StageOfLayerName(t.name, layers, stages);
    if (!stage.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " is required with reshard_model.src_pipeline: the name '",
          t.name, "' has no \"layers.N.\" to take it from; allowed: 0 to ",
          stages - 1));
    }
    t.stage = *stage;
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<int> StageOfLayerName(const std::string& name, int layers,
                                    int stages) {
  const std::optional<int> layer = LayerIndex(name);
  if (!layer.has_value() || layers <= 0 || stages <= 0) return std::nullopt;
  return static_cast<int>(std::min<int64_t>(
      stages - 1, int64_t{*layer} * stages / layers));
}

DeviceMesh MeshRow(const DeviceMesh& mesh, int row) {
  DeviceMesh out;
  out.shape.assign(mesh.shape.begin() + 1, mesh.shape.end());
  int64_t size = 1;
  for (int extent : out.shape) size *= extent;
  out.devices.assign(mesh.devices.begin() + row * size,
                     mesh.devices.begin() + (row + 1) * size);
  return out;
}

absl::StatusOr<std::vector<ModelTensorRequest>> PresetTensors(
    const v1::ModelPreset& preset, int src_rank, int dst_rank) {
  const std::string& family = preset.family();
  if (family != "llama" && family != "llama_moe") {
    return absl::InvalidArgumentError(
        absl::StrCat("reshard_model.preset.family '", family,
                     "' is not one of llama, llama_moe"));
  }
  const bool moe = family == "llama_moe";
  RETURN_IF_ERROR(CheckPresetRange("layers", preset.layers(), 1, 1024));
  RETURN_IF_ERROR(CheckPresetRange("hidden", preset.hidden(), 1, 1 << 17));
  RETURN_IF_ERROR(CheckPresetRange("heads", preset.heads(), 1, 1024));
  RETURN_IF_ERROR(CheckPresetRange("vocab", preset.vocab(), 1, 1 << 22));
  const int64_t h = preset.hidden();
  const int64_t heads = preset.heads();
  const int64_t kv_heads = preset.kv_heads() == 0 ? heads : preset.kv_heads();
  RETURN_IF_ERROR(CheckPresetRange("kv_heads", kv_heads, 1, heads));
  if (h % heads != 0 || heads % kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reshard_model.preset: hidden ", h, " must divide by heads ", heads,
        " and heads by kv_heads ", kv_heads));
  }
  const int64_t ffn = preset.ffn() == 0 ? 4 * h : preset.ffn();
  RETURN_IF_ERROR(CheckPresetRange("ffn", ffn, 1, int64_t{1} << 20));
  const int64_t experts = preset.experts();
  if (moe) RETURN_IF_ERROR(CheckPresetRange("experts", experts, 1, 4096));
  DType dtype = DType::kBFloat16;
  if (preset.dtype() != v1::DTYPE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(dtype,
                     DTypeFromProto(preset.dtype(), "reshard_model.preset.dtype"));
  }
  const int64_t kv = kv_heads * (h / heads);
  std::vector<ModelTensorRequest> out;
  // `split` is the dimension tensor parallelism splits (-1: replicated).
  auto add = [&](std::string name, std::vector<int64_t> shape, int split) {
    const int dims = static_cast<int>(shape.size());
    out.push_back({std::move(name), TensorSpec{std::move(shape), dtype},
                   TensorParallel(dims, split, src_rank),
                   TensorParallel(dims, split, dst_rank)});
  };
  add("embed", {preset.vocab(), h}, 0);  // vocabulary-parallel
  for (int l = 0; l < preset.layers(); ++l) {
    const std::string at = absl::StrCat("layers.", l, ".");
    add(at + "attn_norm", {h}, -1);
    add(at + "wq", {h, h}, 1);  // column-parallel
    add(at + "wk", {h, kv}, 1);
    add(at + "wv", {h, kv}, 1);
    add(at + "wo", {h, h}, 0);  // row-parallel
    add(at + "mlp_norm", {h}, -1);
    if (moe) {
      add(at + "router", {h, experts}, -1);
      add(at + "experts.w1", {experts, h, ffn}, 0);  // expert-parallel
      add(at + "experts.w3", {experts, h, ffn}, 0);
      add(at + "experts.w2", {experts, ffn, h}, 0);
    } else {
      add(at + "w1", {h, ffn}, 1);
      add(at + "w3", {h, ffn}, 1);
      add(at + "w2", {ffn, h}, 0);
    }
  }
  add("final_norm", {h}, -1);
  add("lm_head", {h, preset.vocab()}, 1);
  return out;
}

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
  request.src_pipeline = m.src_pipeline();
  // Where the source specs apply: src_mesh, or one row of it.
  MeshRequest src_layout = request.src_mesh;
  if (request.src_pipeline) {
    if (request.src_mesh.shape.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reshard_model.src_pipeline needs a src_mesh of 2 or more axes "
          "(pipeline stages x each stage's mesh, e.g. 2x4); got ",
          request.src_mesh.ToString()));
    }
    src_layout.shape.erase(src_layout.shape.begin());
    src_layout.devices.clear();
  }
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
  std::set<std::string> names;
  if (m.has_preset()) {
    ASSIGN_OR_RETURN(request.tensors,
                     PresetTensors(m.preset(),
                                   static_cast<int>(src_layout.shape.size()),
                                   static_cast<int>(
                                       request.dst_meshes[0].shape.size())));
    for (const ModelTensorRequest& t : request.tensors) names.insert(t.name);
  }
  RETURN_IF_ERROR(CheckSpecRange(
      "reshard_model.tensors (count, with the preset's)",
      m.tensors_size() + static_cast<int64_t>(request.tensors.size()), 1,
      kMaxTensors));
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
                            src_layout,
                            request.src_pipeline ? "a row of src_mesh"
                                                 : "src_mesh"));
    if (t.has_stage() && !request.src_pipeline) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".stage is set but reshard_model.src_pipeline is not; "
          "allowed: a stage only with src_pipeline: true"));
    }
    ASSIGN_OR_RETURN(out.dst_spec,
                     SpecOf(t.dst_spec(), field + ".dst_spec", out.tensor,
                            request.dst_meshes[0], "dst_meshes"));
    request.tensors.push_back(std::move(out));
  }
  if (request.src_pipeline) {
    const size_t preset_tensors =
        request.tensors.size() - static_cast<size_t>(m.tensors_size());
    RETURN_IF_ERROR(AssignStages(m, preset_tensors, request.src_mesh.shape[0],
                                 request.tensors));
  }
  RETURN_IF_ERROR(CheckUserBufferNames(
      "reshard_model.src_buffer_prefix", m.src_buffer_prefix(),
      "reshard_model.dst_buffer_prefix", m.dst_buffer_prefix()));
  request.src_buffer_prefix = m.src_buffer_prefix();
  request.dst_buffer_prefix = m.dst_buffer_prefix();
  if (m.max_transfers_per_host() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reshard_model.max_transfers_per_host is ", m.max_transfers_per_host(),
        "; allowed: 0 (no bound) or a positive count"));
  }
  request.max_transfers_per_host = m.max_transfers_per_host();
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
    problems.push_back(
        {t.tensor,
         request.src_pipeline ? MeshRow(meshes[0], t.stage) : meshes[0],
         t.src_spec, replicas, OverReplicas(t.dst_spec)});
  }
  ASSIGN_OR_RETURN(PlannedJob job,
                   PlanReshardJob(problems, topology, request.strategy, options,
                                  request.max_transfers_per_host));
  job.plan.set_kind("reshard_model");
  if (request.user_buffers()) {
    std::vector<std::string> src_names, dst_names;
    for (const ModelTensorRequest& t : request.tensors) {
      src_names.push_back(request.src_buffer_prefix + t.name);
      dst_names.push_back(request.dst_buffer_prefix + t.name);
    }
    NameUserBuffers(src_names, dst_names, job.plan);
  }
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
