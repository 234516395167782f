#include "cli/job_format.h"


#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/text_table.h"
#include "google/protobuf/util/json_util.h"
#include "planner/kinds/job_kind.h"
#include "proto/dtype_convert.h"
#include "util/text_safety.h"

namespace meshcast::cli {
namespace {

// Messages longer than this are cut in the job list (get shows them whole).
constexpr size_t kListMessageWidth = 60;

std::string FormatTimestamp(double unix_seconds) {
  if (unix_seconds <= 0) return "-";
  return absl::FormatTime(
      "%Y-%m-%d %H:%M:%S",
      absl::FromUnixSeconds(0) + absl::Seconds(unix_seconds),
      absl::LocalTimeZone());
}

std::string FormatClock(double unix_seconds) {
  return absl::FormatTime(
      "%H:%M:%E3S", absl::FromUnixSeconds(0) + absl::Seconds(unix_seconds),
      absl::LocalTimeZone());
}

// "4s ago", "3m ago", "2h ago", "5d ago".
std::string FormatAge(double then_unix, double now_unix) {
  if (then_unix <= 0) return "-";
  const double age = std::max(0.0, now_unix - then_unix);
  if (age < 60) return absl::StrFormat("%.0fs ago", std::floor(age));
  if (age < 3600) return absl::StrFormat("%.0fm ago", std::floor(age / 60));
  if (age < 86400) return absl::StrFormat("%.0fh ago", std::floor(age / 3600));
  return absl::StrFormat("%.0fd ago", std::floor(age / 86400));
}

// Run time of a job: started to finished, or to now while it runs.
std::string FormatDuration(const v1::Job& job, double now_unix) {
  if (job.started_unix() <= 0) return "-";
  const double end = job.finished_unix() > 0 ? job.finished_unix() : now_unix;
  return FormatSeconds(std::max(0.0, end - job.started_unix()));
}

std::string Percent(double progress) {
  return absl::StrFormat("%.0f%%", std::clamp(progress, 0.0, 1.0) * 100);
}

// Escaped for the terminal and cut with an ellipsis (util/text_safety.h).
std::string Truncate(const std::string& text, size_t width) {
  return TruncateForColumn(text, width);
}

OrderedJson MeshRequestToJson(const v1::DeviceMesh& mesh) {
  OrderedJson out{{"shape", mesh.shape()}};
  if (mesh.devices_size() > 0) {
    out["devices"] = mesh.devices();
  } else if (mesh.has_first_host() && mesh.first_host() >= 0) {
    out["first_host"] = mesh.first_host();
  }
  return out;
}

std::string WorkerStateName(v1::WorkerInfo::State state) {
  switch (state) {
    case v1::WorkerInfo::STATE_READY:
      return "ready";
    case v1::WorkerInfo::STATE_BUSY:
      return "busy";
    case v1::WorkerInfo::STATE_LOST:
      return "lost";
    default:
      return "unknown";
  }
}

std::vector<int> WorkerDevices(const v1::WorkerInfo& worker,
                               const v1::Topology& topology) {
  std::vector<int> devices;
  const int per_host = topology.devices_per_host() > 0
                           ? topology.devices_per_host()
                           : worker.num_devices();
  if (worker.host_index() < 0) return devices;
  for (int local = 0; local < worker.num_devices(); ++local) {
    devices.push_back(worker.host_index() * per_host + local);
  }
  return devices;
}

double Gbps(double bytes_per_second) { return bytes_per_second * 8 / 1e9; }

// ", delivered X (Y Gbps)" when broadcasts delivered more than the steps
// moved (a broadcast's bytes reach every receiver); empty otherwise, and for
// controllers that do not report it.
std::string DeliveredText(const v1::JobResult& result) {
  if (result.bytes_delivered() <= result.bytes_moved()) return "";
  return absl::StrFormat(
      ", delivered %s (%.3f Gbps)",
      FormatBytes(static_cast<double>(result.bytes_delivered())),
      Gbps(result.bytes_delivered() / result.seconds()));
}

// "metrics:" then one line per figure, sorted by name: its label, its value
// in human units and, for a figure with companions (busbw with
// busbw_bound_bytes_per_second and busbw_predicted_bytes_per_second), the
// bound with the share of it reached and the prediction. Companions are
// shown only beside their figure.
std::string RenderMetrics(const v1::JobResult& result) {
  static constexpr const char* kCompanions[] = {"_bound", "_predicted"};
  std::map<std::string, double> sorted(result.metrics().begin(),
                                       result.metrics().end());
  const auto companion_of = [&](const std::string& label,
                                const std::string& unit) {
    for (const char* suffix : kCompanions) {
      if (absl::EndsWith(label, suffix) &&
          sorted.count(label.substr(0, label.size() - strlen(suffix)) +
                       unit) > 0) {
        return true;
      }
    }
    return false;
  };
  std::vector<std::pair<std::string, std::string>> rows;
  for (const auto& [name, value] : sorted) {
    const std::string label = MetricLabel(name);
    const std::string unit = name.substr(label.size());  // "_bytes_per_second"
    if (companion_of(label, unit)) continue;  // shown beside its figure
    std::string text = FormatMetric(name, value);
    std::vector<std::string> notes;
    if (auto bound = sorted.find(absl::StrCat(label, "_bound", unit));
        bound != sorted.end()) {
      std::string note =
          absl::StrCat("bound ", FormatMetric(name, bound->second));
      if (bound->second > 0) {
        absl::StrAppendFormat(&note, ": %.0f%%", 100 * value / bound->second);
      }
      notes.push_back(std::move(note));
    }
    if (auto predicted = sorted.find(absl::StrCat(label, "_predicted", unit));
        predicted != sorted.end()) {
      notes.push_back(
          absl::StrCat("predicted ", FormatMetric(name, predicted->second)));
    }
    if (!notes.empty()) {
      absl::StrAppend(&text, "  (", absl::StrJoin(notes, ", "), ")");
    }
    // Metric names come from the workers and the kind: escaped.
    rows.emplace_back(EscapeForTerminal(label), std::move(text));
  }
  size_t width = 0;
  for (const auto& row : rows) width = std::max(width, row.first.size());
  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "metrics:    " : "            ",
                    rows[i].first,
                    std::string(width - rows[i].first.size() + 2, ' '),
                    rows[i].second, "\n");
  }
  return out;
}

}  // namespace

std::string JobStateName(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_QUEUED:
      return "QUEUED";
    case v1::JOB_STATE_PLANNING:
      return "PLANNING";
    case v1::JOB_STATE_RUNNING:
      return "RUNNING";
    case v1::JOB_STATE_SUCCEEDED:
      return "SUCCEEDED";
    case v1::JOB_STATE_FAILED:
      return "FAILED";
    case v1::JOB_STATE_CANCELLED:
      return "CANCELLED";
    default:
      return "UNSPECIFIED";
  }
}

bool IsFinalState(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

std::string DTypeText(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_INT8:
      return "int8";
    case v1::DTYPE_UINT8:
      return "uint8";
    case v1::DTYPE_INT32:
      return "int32";
    case v1::DTYPE_INT64:
      return "int64";
    case v1::DTYPE_FLOAT16:
      return "float16";
    case v1::DTYPE_BFLOAT16:
      return "bfloat16";
    case v1::DTYPE_FLOAT32:
      return "float32";
    case v1::DTYPE_FLOAT64:
      return "float64";
    default:
      return "unspecified";
  }
}

std::string DescribeMeshRequest(const v1::DeviceMesh& mesh) {
  std::string out = absl::StrJoin(mesh.shape(), "x");
  if (mesh.devices_size() > 0) {
    absl::StrAppend(&out, "[", absl::StrJoin(mesh.devices(), ","), "]");
  } else if (mesh.has_first_host() && mesh.first_host() >= 0) {
    absl::StrAppend(&out, "@", mesh.first_host());
  }
  return out;
}

std::string DescribeReshard(const v1::ReshardSpec& reshard) {
  int64_t elements = 1;
  for (int64_t extent : reshard.tensor().shape()) elements *= extent;
  const double bytes =
      static_cast<double>(elements) * DTypeProtoSize(reshard.tensor().dtype());
  return absl::StrCat(
      absl::StrJoin(reshard.tensor().shape(), "x"), " ",
      DTypeText(reshard.tensor().dtype()), " (", FormatBytes(bytes),
      "): ", DescribeMeshRequest(reshard.src_mesh()), " ",
      reshard.src_spec().text(), " -> ",
      DescribeMeshRequest(reshard.dst_mesh()), " ", reshard.dst_spec().text(),
      ", strategy ", reshard.strategy().empty() ? "auto" : reshard.strategy(),
      reshard.allow_overlap() ? ", overlap allowed" : "");
}

std::string DescribeCollective(const v1::CollectiveSpec& collective) {
  const int iterations = std::max(1, collective.iterations());
  return absl::StrCat(
      collective.op().empty() ? "?" : collective.op(), " of ",
      collective.size().empty() ? "?" : collective.size(), " ",
      DTypeText(collective.dtype()), " on ",
      DescribeMeshRequest(collective.mesh()), ", ",
      collective.reduction().empty() ? "sum" : collective.reduction(), ", ",
      iterations, iterations == 1 ? " iteration" : " iterations");
}

std::string DescribeSpec(const v1::JobSpec& spec) {
  if (spec.has_reshard()) return DescribeReshard(spec.reshard());
  if (spec.has_collective()) return DescribeCollective(spec.collective());
  // Any other kind: its spec as compact JSON (protobuf's mapping).
  const google::protobuf::OneofDescriptor* kind =
      spec.GetDescriptor()->FindOneofByName("kind");
  const google::protobuf::FieldDescriptor* field =
      kind == nullptr
          ? nullptr
          : spec.GetReflection()->GetOneofFieldDescriptor(spec, kind);
  if (field == nullptr) return "(no kind)";
  std::string text;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(
      spec.GetReflection()->GetMessage(spec, field), &text, print);
  return text;
}

std::string SpecKindName(const v1::JobSpec& spec) {
  absl::StatusOr<const JobKind*> kind = FindJobKind(spec);
  return kind.ok() ? (*kind)->name() : "";
}

std::string VerifyModeName(v1::VerifyMode mode) {
  switch (mode) {
    case v1::VERIFY_MODE_SAMPLE:
      return "sample";
    case v1::VERIFY_MODE_OFF:
      return "off";
    default:
      return "full";
  }
}

std::string StepOpName(v1::Step::Op op) {
  switch (op) {
    case v1::Step::OP_BROADCAST:
      return "broadcast";
    case v1::Step::OP_SEND_RECV:
      return "send_recv";
    case v1::Step::OP_ALL_GATHER:
      return "all_gather";
    case v1::Step::OP_REDUCE_SCATTER:
      return "reduce_scatter";
    case v1::Step::OP_ALL_REDUCE:
      return "all_reduce";
    case v1::Step::OP_ALL_TO_ALL:
      return "all_to_all";
    case v1::Step::OP_LOCAL_COPY:
      return "local_copy";
    case v1::Step::OP_COMPUTE:
      return "compute";
    default:
      return "step";
  }
}

std::string MetricLabel(absl::string_view name) {
  for (absl::string_view suffix :
       {"_bytes_per_second", "_seconds", "_bytes"}) {
    if (absl::EndsWith(name, suffix) && name.size() > suffix.size()) {
      return std::string(name.substr(0, name.size() - suffix.size()));
    }
  }
  return std::string(name);
}

std::string FormatMetric(absl::string_view name, double value) {
  if (absl::EndsWith(name, "_bytes_per_second")) {
    // Decimal GB/s: the unit nccl-tests prints algbw and busbw in, so the
    // figures compare one to one.
    return absl::StrFormat("%.2f GB/s", value / 1e9);
  }
  if (absl::EndsWith(name, "_seconds")) return FormatSeconds(value);
  if (absl::EndsWith(name, "_bytes")) return FormatBytes(value);
  return absl::StrFormat("%g", value);
}

std::string DescribeTopology(const v1::Topology& topology) {
  std::string out = absl::StrFormat(
      "%d hosts x %d devices, %g Gbps between hosts, %g Gbps inside a host",
      topology.num_hosts(), topology.devices_per_host(),
      Gbps(topology.inter_host_bandwidth()),
      Gbps(topology.intra_host_bandwidth()));
  // The CPU-side costs show only when the controller reports them, so GPU
  // clusters read as before (0 means unlimited / none).
  if (topology.host_copy_bandwidth() > 0) {
    absl::StrAppendFormat(&out, ", host copy %g Gbps",
                          Gbps(topology.host_copy_bandwidth()));
  }
  if (topology.transfer_setup_seconds() > 0) {
    absl::StrAppend(&out, ", transfer setup ",
                    FormatSeconds(topology.transfer_setup_seconds()));
  }
  if (topology.pipeline_chunk_bytes() > 0) {
    absl::StrAppend(&out, ", pipeline chunks of ",
                    FormatBytes(topology.pipeline_chunk_bytes()));
  }
  if (topology.device_flops() > 0) {
    absl::StrAppendFormat(&out, ", %.3g GFLOP/s per device",
                          topology.device_flops() / 1e9);
  }
  if (topology.cpu_cores_per_device() > 0) {
    absl::StrAppendFormat(&out, ", %.3g cores per CPU device",
                          topology.cpu_cores_per_device());
  }
  return out;
}

std::string DescribePlacedMesh(absl::string_view side,
                               const v1::DeviceMesh& mesh) {
  std::vector<int> devices(mesh.devices().begin(), mesh.devices().end());
  std::sort(devices.begin(), devices.end());
  return absl::StrCat(side, " mesh ", absl::StrJoin(mesh.shape(), "x"),
                      " on devices ", FormatDeviceRanges(devices));
}

std::string DescribePlacedMeshes(const v1::Job& job) {
  std::vector<std::string> parts;
  if (job.has_placed_src_mesh()) {
    parts.push_back(DescribePlacedMesh("src", job.placed_src_mesh()));
  }
  if (job.has_placed_dst_mesh()) {
    parts.push_back(DescribePlacedMesh("dst", job.placed_dst_mesh()));
  }
  if (parts.empty()) {
    // Kinds other than reshard report their meshes only here.
    const bool one = job.placed_meshes_size() == 1;
    for (int i = 0; i < job.placed_meshes_size(); ++i) {
      parts.push_back(DescribePlacedMesh(
          one ? "" : absl::StrCat("meshes[", i, "]"), job.placed_meshes(i)));
    }
    if (one) return parts.front().substr(1);  // drop the empty side's space
  }
  return absl::StrJoin(parts, ", ");
}

std::vector<int> PlanDevices(const v1::Plan& plan, v1::Buffer::Role role) {
  std::set<int> devices;
  for (const v1::Buffer& buffer : plan.buffers()) {
    if (buffer.role() == role) devices.insert(buffer.device());
  }
  return std::vector<int>(devices.begin(), devices.end());
}

OrderedJson TopologyToJson(const v1::Topology& topology) {
  return OrderedJson{
      {"num_hosts", topology.num_hosts()},
      {"devices_per_host", topology.devices_per_host()},
      {"inter_host_bandwidth_bytes_per_second",
       topology.inter_host_bandwidth()},
      {"intra_host_bandwidth_bytes_per_second",
       topology.intra_host_bandwidth()},
      {"inter_host_latency_seconds", topology.inter_host_latency()},
      {"intra_host_latency_seconds", topology.intra_host_latency()},
      {"host_copy_bandwidth_bytes_per_second", topology.host_copy_bandwidth()},
      {"transfer_setup_seconds", topology.transfer_setup_seconds()},
      {"pipeline_chunk_bytes", topology.pipeline_chunk_bytes()},
      {"device_flops", topology.device_flops()},
      {"device_memory_bandwidth_bytes_per_second",
       topology.device_memory_bandwidth()},
      {"cpu_cores_per_device", topology.cpu_cores_per_device()}};
}

OrderedJson PlacedMeshToJson(const v1::DeviceMesh& mesh) {
  return OrderedJson{{"shape", mesh.shape()}, {"devices", mesh.devices()}};
}

OrderedJson ReshardToJson(const v1::ReshardSpec& reshard) {
  return OrderedJson{
      {"shape", reshard.tensor().shape()},
      {"dtype", DTypeText(reshard.tensor().dtype())},
      {"src_mesh", MeshRequestToJson(reshard.src_mesh())},
      {"src_spec", reshard.src_spec().text()},
      {"dst_mesh", MeshRequestToJson(reshard.dst_mesh())},
      {"dst_spec", reshard.dst_spec().text()},
      {"strategy", reshard.strategy().empty() ? "auto" : reshard.strategy()},
      {"allow_overlap", reshard.allow_overlap()}};
}

OrderedJson CollectiveToJson(const v1::CollectiveSpec& collective) {
  return OrderedJson{
      {"op", collective.op()},
      {"mesh", MeshRequestToJson(collective.mesh())},
      {"size", collective.size()},
      {"dtype", DTypeText(collective.dtype())},
      {"reduction",
       collective.reduction().empty() ? "sum" : collective.reduction()},
      {"iterations", std::max(1, collective.iterations())}};
}

OrderedJson JobToJson(const v1::Job& job, bool details) {
  OrderedJson out{{"id", job.id()},
                  {"name", job.spec().name()},
                  {"state", JobStateName(job.state())},
                  {"message", job.message()},
                  {"owner", job.owner()},
                  {"progress", job.progress()},
                  {"created_unix", job.created_unix()},
                  {"started_unix", job.started_unix()},
                  {"finished_unix", job.finished_unix()}};
  OrderedJson spec = OrderedJson::object();
  if (job.spec().has_reshard()) {
    spec["reshard"] = ReshardToJson(job.spec().reshard());
  }
  if (job.spec().has_collective()) {
    spec["collective"] = CollectiveToJson(job.spec().collective());
  }
  spec["verify"] = VerifyModeName(job.spec().verify());
  out["spec"] = std::move(spec);
  if (job.has_placed_src_mesh()) {
    out["placed_src_mesh"] = PlacedMeshToJson(job.placed_src_mesh());
  }
  if (job.has_placed_dst_mesh()) {
    out["placed_dst_mesh"] = PlacedMeshToJson(job.placed_dst_mesh());
  }
  if (job.placed_meshes_size() > 0) {
    OrderedJson meshes = OrderedJson::array();
    for (const v1::DeviceMesh& mesh : job.placed_meshes()) {
      meshes.push_back(PlacedMeshToJson(mesh));
    }
    out["placed_meshes"] = std::move(meshes);
  }
  if (job.has_plan()) {
    const v1::Plan& plan = job.plan();
    out["plan"] = OrderedJson{
        {"kind", plan.kind().empty() ? SpecKindName(job.spec()) : plan.kind()},
        {"strategy", plan.strategy()},
        {"predicted_seconds", plan.predicted_seconds()},
        {"lower_bound_seconds", plan.lower_bound_seconds()},
        {"steps", plan.steps_size()},
        {"buffers", plan.buffers_size()},
        {"src_devices", PlanDevices(plan, v1::Buffer::ROLE_SOURCE)},
        {"dst_devices", PlanDevices(plan, v1::Buffer::ROLE_DESTINATION)}};
  }
  if (job.has_result()) {
    const v1::JobResult& result = job.result();
    OrderedJson r{{"seconds", result.seconds()},
                  {"predicted_seconds", result.predicted_seconds()},
                  {"lower_bound_seconds", result.lower_bound_seconds()},
                  {"bytes_moved", result.bytes_moved()},
                  {"bytes_delivered", result.bytes_delivered()},
                  {"elements_verified", result.elements_verified()},
                  {"mismatches", result.mismatches()},
                  {"max_abs_error", result.max_abs_error()}};
    // Sorted by name (the proto map has no order), so output is stable.
    OrderedJson metrics = OrderedJson::object();
    std::map<std::string, double> sorted(result.metrics().begin(),
                                         result.metrics().end());
    for (const auto& [name, value] : sorted) metrics[name] = value;
    r["metrics"] = std::move(metrics);
    if (details) {
      OrderedJson steps = OrderedJson::array();
      for (const v1::StepResult& step : result.steps()) {
        steps.push_back(OrderedJson{{"step", step.step()},
                                    {"worker", step.worker()},
                                    {"bytes", step.bytes()},
                                    {"seconds", step.seconds()},
                                    {"start_seconds", step.start_seconds()},
                                    {"end_seconds", step.end_seconds()},
                                    {"device", step.device()}});
      }
      r["steps"] = std::move(steps);
    }
    out["result"] = std::move(r);
  }
  return out;
}

OrderedJson EventToJson(const v1::JobEvent& event) {
  return OrderedJson{{"job_id", event.job_id()},
                     {"state", JobStateName(event.state())},
                     {"message", event.message()},
                     {"progress", event.progress()},
                     {"time_unix", event.time_unix()}};
}

OrderedJson ClusterToJson(const v1::GetClusterResponse& cluster,
                          const std::string& controller) {
  OrderedJson workers = OrderedJson::array();
  for (const v1::WorkerInfo& worker : cluster.workers()) {
    workers.push_back(
        OrderedJson{{"name", worker.name()},
                    {"address", worker.address()},
                    {"data_address", worker.data_address()},
                    {"host_index", worker.host_index()},
                    {"device_kind", worker.device_kind()},
                    {"num_devices", worker.num_devices()},
                    {"memory_bytes", worker.memory_bytes()},
                    {"probed_host_copy_bytes_per_second",
                     worker.probed_host_copy_bytes_per_second()},
                    {"probed_device_flops", worker.probed_device_flops()},
                    {"machine_id", worker.machine_id()},
                    {"cpu_cores", worker.cpu_cores()},
                    {"devices", WorkerDevices(worker, cluster.topology())},
                    {"state", WorkerStateName(worker.state())},
                    {"last_heartbeat_unix", worker.last_heartbeat_unix()}});
  }
  return OrderedJson{{"controller", controller},
                     {"topology", TopologyToJson(cluster.topology())},
                     {"workers", std::move(workers)}};
}

OrderedJson PlanTransfersToJson(const v1::Plan& plan) {
  OrderedJson transfers = OrderedJson::array();
  for (const v1::Step& step : plan.steps()) {
    OrderedJson slice = OrderedJson::array();
    for (const v1::Interval& interval : step.slice()) {
      slice.push_back(OrderedJson::array({interval.begin(), interval.end()}));
    }
    int src_device = -1;
    std::vector<int> dst_devices;
    // A relay tree's parents as `meshctl plan` prints them: the chain
    // position (0 = src) that forwards to each dst device.
    std::vector<int> parents;
    for (const v1::CommGroup& group : plan.groups()) {
      if (group.id() != step.group()) continue;
      for (int i = 0; i < group.devices_size(); ++i) {
        if (i == 0) {
          src_device = group.devices(i);
        } else {
          dst_devices.push_back(group.devices(i));
          if (i < group.parents_size()) parents.push_back(group.parents(i));
        }
      }
    }
    OrderedJson transfer{{"slice", std::move(slice)},
                         {"src_device", src_device},
                         {"dst_devices", dst_devices}};
    if (!parents.empty()) transfer["parents"] = parents;
    if (step.chunk_bytes() > 0) transfer["chunk_bytes"] = step.chunk_bytes();
    transfer["bytes"] = step.bytes();
    transfer["stage"] = step.stage();
    transfer["deps"] = step.deps();
    transfers.push_back(std::move(transfer));
  }
  return transfers;
}

std::string RenderJobDetails(const v1::Job& job, double now_unix) {
  std::string out;
  // Values hold ids, names and messages from the controller: escaped.
  const auto line = [&out](absl::string_view key, const std::string& value) {
    absl::StrAppend(&out, key, std::string(12 - key.size(), ' '),
                    EscapeForTerminal(value), "\n");
  };
  line("id:", job.id());
  if (!job.spec().name().empty()) line("name:", job.spec().name());
  std::string state = JobStateName(job.state());
  if (!IsFinalState(job.state())) {
    absl::StrAppend(&state, " (", Percent(job.progress()), ")");
  }
  line("state:", state);
  if (!job.message().empty()) line("message:", job.message());
  if (job.spec().has_reshard()) {
    line("reshard:", DescribeReshard(job.spec().reshard()));
  }
  if (job.spec().has_collective()) {
    line("collective:", DescribeCollective(job.spec().collective()));
  }
  if (job.spec().verify() != v1::VERIFY_MODE_FULL) {
    line("verify:", VerifyModeName(job.spec().verify()));
  }
  if (const std::string meshes = DescribePlacedMeshes(job); !meshes.empty()) {
    line("meshes:", meshes);
  }
  if (job.has_plan()) {
    const v1::Plan& plan = job.plan();
    // A reshard's tiles tell where data starts and lands; other kinds'
    // meshes are on the "meshes:" line already.
    if (!job.spec().has_collective()) {
      line("placed:",
           absl::StrCat("source tiles on devices ",
                        FormatDeviceRanges(
                            PlanDevices(plan, v1::Buffer::ROLE_SOURCE)),
                        ", destination tiles on devices ",
                        FormatDeviceRanges(
                            PlanDevices(plan, v1::Buffer::ROLE_DESTINATION))));
    }
    line("plan:",
         absl::StrCat(plan.strategy(), ", ", plan.steps_size(),
                      job.spec().has_reshard() ? " transfers" : " steps",
                      ", predicted ",
                      FormatSeconds(plan.predicted_seconds()), " (lower bound ",
                      FormatSeconds(plan.lower_bound_seconds()), ")"));
  }
  if (job.has_result() && job.result().seconds() > 0) {
    const v1::JobResult& result = job.result();
    line("result:",
         absl::StrFormat("moved %s in %s (%.3f Gbps)%s; verified %d elements, "
                         "%d mismatches",
                         FormatBytes(static_cast<double>(result.bytes_moved())),
                         FormatSeconds(result.seconds()),
                         Gbps(result.bytes_moved() / result.seconds()),
                         DeliveredText(result), result.elements_verified(),
                         result.mismatches()));
    if (result.max_abs_error() != 0) {
      line("max error:", absl::StrFormat("%.6g (largest |actual - reference| "
                                         "of a computed element)",
                                         result.max_abs_error()));
    }
  }
  if (job.has_result() && !job.result().metrics().empty()) {
    const std::string metrics = RenderMetrics(job.result());
    out += metrics;
  }
  line("created:", absl::StrCat(FormatTimestamp(job.created_unix()), " (",
                                FormatAge(job.created_unix(), now_unix), ")"));
  if (job.started_unix() > 0) {
    line("started:", FormatTimestamp(job.started_unix()));
  }
  if (job.finished_unix() > 0) {
    line("finished:", FormatTimestamp(job.finished_unix()));
  }
  if (job.started_unix() > 0) line("duration:", FormatDuration(job, now_unix));
  return out;
}

namespace {

// The meshes the controller placed for `job`, src and dst first for a
// reshard, else every mesh in the kind's order.
std::vector<v1::DeviceMesh> PlacedMeshList(const v1::Job& job) {
  std::vector<v1::DeviceMesh> meshes;
  if (job.has_placed_src_mesh()) meshes.push_back(job.placed_src_mesh());
  if (job.has_placed_dst_mesh()) meshes.push_back(job.placed_dst_mesh());
  if (meshes.empty()) {
    meshes.assign(job.placed_meshes().begin(), job.placed_meshes().end());
  }
  return meshes;
}

// `meshctl list -o wide`: the columns of the table and, before the message,
// the kind, placed meshes ("2x4 -> 2x4") and their devices, the owner and
// the predicted against the measured data-plane time.
std::string RenderWideJobList(const std::vector<v1::Job>& jobs,
                              double now_unix) {
  TextTable table(
      {"ID", "NAME", "KIND", "STATE", "PROGRESS", "CREATED", "DURATION",
       "MESHES", "DEVICES", "OWNER", "PREDICTED", "MEASURED", "MESSAGE"},
      {TextTable::kLeft, TextTable::kLeft, TextTable::kLeft, TextTable::kLeft,
       TextTable::kRight, TextTable::kRight, TextTable::kRight,
       TextTable::kLeft, TextTable::kLeft, TextTable::kLeft, TextTable::kRight,
       TextTable::kRight, TextTable::kLeft});
  for (const v1::Job& job : jobs) {
    std::vector<std::string> shapes;
    std::set<int> devices;
    for (const v1::DeviceMesh& mesh : PlacedMeshList(job)) {
      shapes.push_back(absl::StrJoin(mesh.shape(), "x"));
      devices.insert(mesh.devices().begin(), mesh.devices().end());
    }
    const std::string kind = SpecKindName(job.spec());
    const std::string owner = !job.owner().empty() ? job.owner()
                                                   : job.spec().owner();
    const v1::JobResult& result = job.result();
    table.AddRow(
        {job.id(), job.spec().name().empty() ? "-" : job.spec().name(),
         kind.empty() ? "-" : kind, JobStateName(job.state()),
         Percent(job.progress()), FormatAge(job.created_unix(), now_unix),
         FormatDuration(job, now_unix),
         shapes.empty() ? "-" : absl::StrJoin(shapes, " -> "),
         devices.empty() ? "-"
                         : FormatDeviceRanges(std::vector<int>(
                               devices.begin(), devices.end())),
         owner.empty() ? "-" : owner,
         result.predicted_seconds() > 0
             ? FormatSeconds(result.predicted_seconds())
             : "-",
         result.seconds() > 0 ? FormatSeconds(result.seconds()) : "-",
         Truncate(job.message(), kListMessageWidth)});
  }
  return table.Render();
}

}  // namespace

std::string RenderJobList(const std::vector<v1::Job>& jobs, double now_unix,
                          bool wide) {
  if (jobs.empty()) {
    return "no jobs yet; submit one with 'meshctl submit reshard ...'\n";
  }
  if (wide) return RenderWideJobList(jobs, now_unix);
  TextTable table(
      {"ID", "NAME", "STATE", "PROGRESS", "CREATED", "DURATION", "MESSAGE"},
      {TextTable::kLeft, TextTable::kLeft, TextTable::kLeft, TextTable::kRight,
       TextTable::kRight, TextTable::kRight, TextTable::kLeft});
  for (const v1::Job& job : jobs) {
    table.AddRow({job.id(), job.spec().name().empty() ? "-" : job.spec().name(),
                  JobStateName(job.state()), Percent(job.progress()),
                  FormatAge(job.created_unix(), now_unix),
                  FormatDuration(job, now_unix),
                  Truncate(job.message(), kListMessageWidth)});
  }
  return table.Render();
}

std::string RenderEvent(const v1::JobEvent& event) {
  std::string state = JobStateName(event.state());
  state.resize(std::max<size_t>(state.size(), 9), ' ');
  return absl::StrCat(
      FormatClock(event.time_unix() > 0 ? event.time_unix() : NowUnix()), "  ",
      state, " ", absl::StrFormat("%4s", Percent(event.progress())), "  ",
      EscapeForTerminal(event.message()), "\n");
}

std::string RenderCluster(const v1::GetClusterResponse& cluster,
                          const std::string& controller, double now_unix,
                          bool wide) {
  int ready = 0, busy = 0, lost = 0;
  for (const v1::WorkerInfo& worker : cluster.workers()) {
    switch (worker.state()) {
      case v1::WorkerInfo::STATE_READY:
        ++ready;
        break;
      case v1::WorkerInfo::STATE_BUSY:
        ++busy;
        break;
      case v1::WorkerInfo::STATE_LOST:
        ++lost;
        break;
      default:
        break;
    }
  }
  std::string out;
  absl::StrAppend(&out, "controller: ", controller, "\n");
  absl::StrAppend(&out, "topology:   ", DescribeTopology(cluster.topology()),
                  "\n");
  absl::StrAppend(&out, "workers:    ", cluster.workers_size(), " (", ready,
                  " ready, ", busy, " busy, ", lost, " lost)\n");
  if (cluster.workers_size() == 0) {
    absl::StrAppend(&out,
                    "\nno worker has registered yet; start some with "
                    "'meshctl up' or meshcast-worker --controller ",
                    controller, "\n");
    return out;
  }
  std::vector<v1::WorkerInfo> workers(cluster.workers().begin(),
                                      cluster.workers().end());
  std::sort(workers.begin(), workers.end(),
            [](const v1::WorkerInfo& a, const v1::WorkerInfo& b) {
              return a.host_index() < b.host_index();
            });
  std::vector<std::string> header = {"HOST",   "NAME",  "ADDRESS",
                                     "DEVICES", "MEMORY", "STATE",
                                     "LAST HEARTBEAT"};
  std::vector<TextTable::Align> align = {
      TextTable::kRight, TextTable::kLeft,  TextTable::kLeft, TextTable::kLeft,
      TextTable::kRight, TextTable::kLeft, TextTable::kRight};
  if (wide) {
    // The address the data plane connects to, beside the control one; and
    // what the worker measured at start (WorkerInfo.probed_*).
    header.insert(header.begin() + 3, "DATA ADDRESS");
    align.insert(align.begin() + 3, TextTable::kLeft);
    header.insert(header.end() - 2, "HOST COPY");
    align.insert(align.end() - 2, TextTable::kRight);
    header.insert(header.end() - 2, "GEMM/DEVICE");
    align.insert(align.end() - 2, TextTable::kRight);
  }
  TextTable table(header, align);
  for (const v1::WorkerInfo& worker : workers) {
    std::vector<std::string> row = {
        absl::StrCat(worker.host_index()), worker.name(), worker.address(),
        absl::StrCat(
            FormatDeviceRanges(WorkerDevices(worker, cluster.topology())),
            " (", worker.num_devices(), " ",
            worker.device_kind().empty() ? "?" : worker.device_kind(), ")"),
        worker.memory_bytes() > 0
            ? FormatBytes(static_cast<double>(worker.memory_bytes()))
            : "-",
        WorkerStateName(worker.state()),
        FormatAge(worker.last_heartbeat_unix(), now_unix)};
    if (wide) {
      row.insert(row.begin() + 3, worker.data_address().empty()
                                      ? "-"
                                      : worker.data_address());
      const double copy = worker.probed_host_copy_bytes_per_second();
      const double flops = worker.probed_device_flops();
      row.insert(row.end() - 2,
                 copy > 0 ? absl::StrCat(FormatBytes(copy), "/s") : "-");
      row.insert(row.end() - 2,
                 flops > 0 ? absl::StrFormat("%.1f GFLOP/s", flops / 1e9)
                           : "-");
    }
    table.AddRow(std::move(row));
  }
  absl::StrAppend(&out, "\n", table.Render());
  return out;
}

std::string RenderJobMetrics(const v1::JobResult& result) {
  return RenderMetrics(result);
}

double NowUnix() { return absl::ToUnixMicros(absl::Now()) / 1e6; }

}  // namespace meshcast::cli
