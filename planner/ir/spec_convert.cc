#include "planner/ir/spec_convert.h"

#include <cstdint>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace meshcast {
namespace {

// Bounds that keep arithmetic far from overflow whatever a client sends.
constexpr int kMaxTensorRank = 16;
constexpr int64_t kMaxTensorBytes = int64_t{1} << 50;  // 1 PiB
constexpr int kMaxMeshRank = 8;
constexpr int kMaxMeshDevices = 1 << 20;

}  // namespace

absl::StatusOr<TensorSpec> TensorFromProto(const v1::TensorSpec& proto,
                                           absl::string_view field) {
  TensorSpec tensor;
  if (proto.shape_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape is empty; give e.g. [1024, 1024]"));
  }
  if (proto.shape_size() > kMaxTensorRank) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape has ", proto.shape_size(),
                     " dimensions; at most ", kMaxTensorRank));
  }
  auto dtype = DTypeFromProto(proto.dtype(), absl::StrCat(field, ".dtype"));
  if (!dtype.ok()) return dtype.status();
  tensor.dtype = *dtype;
  const int64_t element_bytes = DTypeSize(tensor.dtype);
  int64_t elements = 1;
  for (int64_t extent : proto.shape()) {
    if (extent < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape [", absl::StrJoin(proto.shape(), ", "),
                       "] has an extent < 1"));
    }
    if (extent > kMaxTensorBytes / element_bytes / elements) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape [", absl::StrJoin(proto.shape(), ", "),
                       "] is too large (over ", kMaxTensorBytes, " bytes)"));
    }
    elements *= extent;
    tensor.shape.push_back(extent);
  }
  return tensor;
}

v1::TensorSpec TensorToProto(const TensorSpec& tensor) {
  v1::TensorSpec proto;
  for (int64_t extent : tensor.shape) proto.add_shape(extent);
  proto.set_dtype(DTypeToProto(tensor.dtype));
  return proto;
}

absl::StatusOr<ShardingSpec> ShardingFromProto(const v1::ShardingSpec& proto,
                                               absl::string_view field) {
  if (!proto.text().empty()) {
    absl::StatusOr<ShardingSpec> spec = ShardingSpec::Parse(proto.text());
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", spec.status().message()));
    }
    return spec;
  }
  if (proto.dims_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field,
        " is empty; give text such as \"S0RR\" (R, S0, S1, S01 per "
        "tensor dimension) or dims"));
  }
  ShardingSpec spec;
  absl::flat_hash_set<int> used;
  for (const v1::ShardingSpec::Dim& dim : proto.dims()) {
    DimSharding d;
    for (int axis : dim.mesh_axes()) {
      if (axis < 0 || axis >= kMaxMeshRank) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".dims: mesh axis ", axis,
                         " is out of range (0..", kMaxMeshRank - 1, ")"));
      }
      if (!used.insert(axis).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".dims: mesh axis ", axis,
            " is used twice; an axis may shard one tensor dimension only"));
      }
      d.mesh_axes.push_back(axis);
    }
    spec.dims.push_back(std::move(d));
  }
  return spec;
}

v1::ShardingSpec ShardingToProto(const ShardingSpec& spec) {
  v1::ShardingSpec proto;
  for (const DimSharding& d : spec.dims) {
    v1::ShardingSpec::Dim* dim = proto.add_dims();
    for (int axis : d.mesh_axes) dim->add_mesh_axes(axis);
  }
  proto.set_text(spec.ToString());
  return proto;
}

absl::StatusOr<MeshRequest> MeshRequestFromProto(const v1::DeviceMesh& proto,
                                                 absl::string_view field) {
  MeshRequest mesh;
  if (proto.shape_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field,
                     ".shape is empty; give e.g. [2, 4] (hosts x "
                     "devices per host)"));
  }
  if (proto.shape_size() > kMaxMeshRank) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape has ", proto.shape_size(),
                     " axes; at most ", kMaxMeshRank));
  }
  int64_t devices = 1;
  for (int extent : proto.shape()) {
    if (extent < 1 || extent > kMaxMeshDevices ||
        devices * extent > kMaxMeshDevices) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".shape ", absl::StrJoin(proto.shape(), "x"),
          " is invalid (extents >= 1, at most ", kMaxMeshDevices, " devices)"));
    }
    devices *= extent;
    mesh.shape.push_back(extent);
  }
  if (proto.devices_size() > 0 && proto.devices_size() != devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".devices has ", proto.devices_size(), " ids but shape ",
        absl::StrJoin(proto.shape(), "x"), " needs ", devices));
  }
  mesh.devices.assign(proto.devices().begin(), proto.devices().end());
  if (proto.has_first_host() && proto.first_host() < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".first_host is ", proto.first_host(),
        "; allowed: a host index >= 0 (pin row 0 there), or -1 or unset "
        "(place anywhere)"));
  }
  // Presence tells "pinned to host 0" from "anywhere".
  mesh.first_host = proto.has_first_host() ? proto.first_host() : -1;
  return mesh;
}

v1::DeviceMesh MeshToProto(const DeviceMesh& mesh) {
  v1::DeviceMesh proto;
  for (int extent : mesh.shape) proto.add_shape(extent);
  for (int d : mesh.devices) proto.add_devices(d);
  return proto;
}

v1::Topology TopologyToProto(const Topology& topology) {
  v1::Topology proto;
  proto.set_num_hosts(topology.num_hosts);
  proto.set_devices_per_host(topology.devices_per_host);
  proto.set_inter_host_bandwidth(topology.inter_host_bandwidth);
  proto.set_intra_host_bandwidth(topology.intra_host_bandwidth);
  proto.set_inter_host_latency(topology.inter_host_latency);
  proto.set_intra_host_latency(topology.intra_host_latency);
  proto.set_host_copy_bandwidth(topology.host_copy_bandwidth);
  proto.set_transfer_setup_seconds(topology.transfer_setup_seconds);
  proto.set_pipeline_chunk_bytes(topology.pipeline_chunk_bytes);
  proto.set_device_flops(topology.device_flops);
  proto.set_device_memory_bandwidth(topology.device_memory_bandwidth);
  proto.set_cpu_cores_per_device(topology.cpu_cores_per_device);
  for (const CollectiveCalibration& c : topology.calibration) {
    *proto.add_calibration() = CalibrationToProto(c);
  }
  return proto;
}

v1::CollectiveCalibration CalibrationToProto(const CollectiveCalibration& c) {
  v1::CollectiveCalibration proto;
  proto.set_op(c.op);
  proto.set_link_class(c.link_class);
  proto.set_ranks(c.ranks);
  proto.set_alpha_seconds(c.alpha_seconds);
  proto.set_beta_seconds_per_byte(c.beta_seconds_per_byte);
  proto.set_model_alpha_seconds(c.model_alpha_seconds);
  proto.set_model_beta_seconds_per_byte(c.model_beta_seconds_per_byte);
  proto.set_job_id(c.job_id);
  return proto;
}

CollectiveCalibration CalibrationFromProto(
    const v1::CollectiveCalibration& proto) {
  CollectiveCalibration c;
  c.op = proto.op();
  c.link_class = proto.link_class();
  c.ranks = proto.ranks();
  c.alpha_seconds = proto.alpha_seconds();
  c.beta_seconds_per_byte = proto.beta_seconds_per_byte();
  c.model_alpha_seconds = proto.model_alpha_seconds();
  c.model_beta_seconds_per_byte = proto.model_beta_seconds_per_byte();
  c.job_id = proto.job_id();
  return c;
}

void BoxToProto(const Box& box,
                google::protobuf::RepeatedPtrField<v1::Interval>* out) {
  out->Clear();
  for (const Interval& interval : box) {
    v1::Interval* i = out->Add();
    i->set_begin(interval.begin);
    i->set_end(interval.end);
  }
}

Box BoxFromProto(const google::protobuf::RepeatedPtrField<v1::Interval>& in) {
  Box box;
  for (const v1::Interval& i : in) box.push_back({i.begin(), i.end()});
  return box;
}

}  // namespace meshcast
