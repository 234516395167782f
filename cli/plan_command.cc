#include "cli/plan_command.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "cli/client_flags.h"
#include "cli/collective_input.h"
#include "cli/command_errors.h"
#include "cli/controller_client.h"
#include "cli/flags.h"
#include "cli/job_commands.h"
#include "cli/job_file.h"
#include "cli/job_format.h"
#include "cli/output_format.h"
#include "cli/reshard_input.h"
#include "cli/text_table.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "planner/cost_model.h"
#include "planner/ir/spec_convert.h"
#include "planner/kinds/job_kind.h"
#include "planner/mesh.h"
#include "planner/placement.h"
#include "planner/plan.h"
#include "planner/sharding.h"
#include "planner/strategy.h"
#include "planner/tensor.h"
#include "planner/topology.h"
#include "planner/unit_task.h"
#include "util/status_macros.h"

namespace meshcast::cli {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kCommand[] = "meshctl plan";

constexpr char kDescription[] =
    "Plans moving one tensor from a source device mesh and sharding spec to a\n"
    "destination mesh and spec, offline (no cluster needed). With --strategy\n"
    "auto every strategy that can win is planned and timed with the "
    "flow-level\n"
    "cost model (one whose own lower bound is already slower than the best\n"
    "plan is listed as pruned); with a strategy named, only that one. The\n"
    "table compares them against the lower bound, and --output json prints\n"
    "the chosen plan.\n"
    "\n"
    "Devices are numbered host*G + local on a cluster of H hosts x G devices.\n"
    "A mesh is HxG@h (H hosts x the first G devices of each, from host h),\n"
    "HxG or N (a 1-D mesh of N devices on one host) placed as the\n"
    "controller places them for 'meshctl submit' (one mesh row per host,\n"
    "source and destination on disjoint hosts unless --allow-overlap), or\n"
    "an explicit device list with a shape.\n"
    "A sharding spec has one entry per tensor dimension: R (replicated),\n"
    "S0 / S1 (split over mesh axis 0 = hosts, or 1 = devices of a host), S01\n"
    "(over both, axis 0 major); written S0RR or S0,R,R. Uneven splits use\n"
    "ceil-sized chunks.\n"
    "\n"
    "example:\n"
    "  meshctl plan --cluster 5x4 --inter-gbps 10 --intra-gbps 1200 \\\n"
    "    --shape 1024x1024x512 --dtype int32 \\\n"
    "    --src-mesh 2x4@0 --src-spec S0RR --dst-mesh 2x4@2 --dst-spec S0RR\n"
    "\n"
    "strategies (--strategy):\n"
    "  send_recv        every receiver gets its own point-to-point copy from\n"
    "                   the least-loaded replica\n"
    "  local_allgather  Alpa's older method: one copy into each receiving\n"
    "                   host, then an all-gather inside the host\n"
    "  broadcast        one broadcast per unit task from its first replica\n"
    "  broadcast_lb     the cross-mesh resharding paper: sender hosts load-\n"
    "                   balanced, host-disjoint rounds of broadcasts\n"
    "  meshcast         splits tasks across replica hosts and relays host to\n"
    "                   host so each byte crosses each NIC at most once; a\n"
    "                   broadcast to many hosts goes as one piece per host,\n"
    "                   which that host sends on to the others, or as two\n"
    "                   binary relay trees over the hosts, whichever the\n"
    "                   simulator finds faster\n"
    "  auto             whichever has the lowest predicted time (default)\n"
    "\n"
    "output:\n"
    "  table  one row per strategy: predicted time (flow-level simulation),\n"
    "         effective Gbps (tensor bits / predicted time), ratio to the\n"
    "         lower bound on any plan, number of transfers; * marks the\n"
    "         chosen strategy.\n"
    "  json   one object, snake_case keys, bytes and seconds: strategy,\n"
    "         predicted_seconds, lower_bound_seconds, topology, tensor,\n"
    "         src_mesh, dst_mesh, src_spec, dst_spec, strategies (the\n"
    "         comparison) and transfers: {slice: [[begin, end], ...] per\n"
    "         tensor dimension, src_device, dst_devices (relay chain order),\n"
    "         parents (relay trees only: the chain position, 0 = src_device,\n"
    "         that forwards to each dst device), chunk_bytes (only where the\n"
    "         plan sets the relay's chunk size), bytes, stage, deps}.\n"
    "\n"
    "Give each mesh as --src-mesh, or as --src-devices with --src-shape (the\n"
    "same for --dst-*).\n"
    "\n"
    "live (--live or --controller HOST:PORT): the controller plans on the\n"
    "topology of its registered workers, as if the cluster were idle, and\n"
    "nothing runs. --cluster and the link flags do not apply; meshes may\n"
    "also be written HxG to let the controller place them, as in 'meshctl\n"
    "submit'. The JSON has the same keys, except moved_bytes and\n"
    "unit_tasks, plus \"controller\"; a placed mesh's \"devices\" are those\n"
    "holding its tiles. The controller is found as for every client\n"
    "command: --controller, $MESHCAST_CONTROLLER, --dir's cluster.json.\n"
    "\n"
    "other kinds: 'meshctl plan collective --cluster 2x4 --op all_reduce\n"
    "--mesh 2x4 --bytes 256MiB [--dtype T] [--reduction sum|max]\n"
    "[--iterations N]' (or --live) places the mesh as the controller would,\n"
    "plans it with the same planner library and prints the alternatives, the\n"
    "predicted time against the lower bound and the kind's predicted figures\n"
    "(a collective's algbw and busbw, busbw beside its bound). --output json\n"
    "prints {kind, strategy, predicted_seconds, lower_bound_seconds,\n"
    "topology, spec, meshes, alternatives, predicted_metrics, plan}, where\n"
    "plan is the plan IR (meshcast.v1.Plan, protobuf JSON mapping). The\n"
    "reshard flags (--shape, --src-*, --dst-*, --strategy, --verify) are a\n"
    "reshard's only; 'meshctl plan reshard ...' is the same as 'meshctl plan\n"
    "...'.\n"
    "\n"
    "exit codes: 0 ok, 1 planning or verification failed, 2 bad input,\n"
    "3 controller unreachable (live).";

struct PlanOptions {
  std::string cluster;
  double inter_gbps = 10;
  double intra_gbps = 1200;
  double inter_latency_us = 10;
  double intra_latency_us = 2;
  // CPU-side costs; 0 = unlimited host copy rate / no setup time.
  double host_copy_gbps = 0;
  double transfer_setup_us = 0;
  // Cores per CPU device where devices share a machine's cores (0 = not
  // known); below 1 tp_overlap's auto keeps overlap modes out.
  double cpu_cores_per_device = 0;
  // Compute rates of every device (DeviceRatesFor): cpu (default), h100,
  // h200; they time OP_COMPUTE steps (tp_overlap's GEMMs).
  std::string device_kind = "cpu";
  std::string shape;
  std::string dtype = "float32";
  std::string src_mesh;
  std::string src_devices;
  std::string src_shape;
  std::string src_spec;
  std::string dst_mesh;
  std::string dst_devices;
  std::string dst_shape;
  std::string dst_spec;
  std::string strategy = "auto";
  std::string output = "table";
  bool verify = false;
  // Live mode: plan against a running controller's topology.
  bool live = false;
  bool allow_overlap = false;
  // Collective flags (--op, --mesh, --bytes, ...), by CollectiveSpec field.
  std::map<std::string, std::string> collective_text;
  // A job file: plans the job it describes, of any kind.
  std::string file;
  ClientFlags client;
};

void RegisterFlags(FlagSet& flags, PlanOptions& options) {
  flags.String("cluster", &options.cluster, "HxG",
               "cluster of H hosts x G devices per host, e.g. 5x4 (required)");
  flags.Double("inter-gbps", &options.inter_gbps, "GBPS",
               "per-host NIC bandwidth, each direction, in Gbit/s");
  flags.Double("intra-gbps", &options.intra_gbps, "GBPS",
               "per-device bandwidth inside a host (NVLink), in Gbit/s");
  flags.Double("inter-latency-us", &options.inter_latency_us, "US",
               "per-message latency between hosts, in microseconds");
  flags.Double("intra-latency-us", &options.intra_latency_us, "US",
               "per-message latency inside a host, in microseconds");
  flags.Double("host-copy-gbps", &options.host_copy_gbps, "GBPS",
               "memory-copy rate of each host, shared by its devices\n"
               "(CPU hosts; 0 = unlimited)");
  flags.Double("transfer-setup-us", &options.transfer_setup_us, "US",
               "fixed start-up time of every transfer, in microseconds");
  flags.Double("cpu-cores-per-device", &options.cpu_cores_per_device, "N",
               "cores per CPU device on the most crowded machine, as the\n"
               "live controller derives it from its workers (0 = not known;\n"
               "below 1, tp_overlap's auto leaves out the overlap modes)");
  flags.String("device-kind", &options.device_kind, "KIND",
               "compute rates of each device: cpu (one core), v100, h100 or\n"
               "h200 (published peaks; they time GEMMs and elementwise steps)");
  flags.String("shape", &options.shape, "AxBx...",
               "tensor shape, e.g. 1024x1024x512 (required)");
  flags.String("dtype", &options.dtype, "TYPE",
               "element type: int8, uint8, int32, int64, float16, bfloat16,\n"
               "float32, float64 (aliases fp16, bf16, fp32, ...)");
  flags.String("src-mesh", &options.src_mesh, "HxG@h",
               "source mesh: H hosts x first G devices, from host h (HxG:\n"
               "from host 0; N: a 1-D mesh, host 0's first N devices)");
  flags.String("src-devices", &options.src_devices, "IDS",
               "source mesh as a device list, e.g. 0,1,4,5 (with --src-shape)");
  flags.String("src-shape", &options.src_shape, "AxB",
               "shape of the --src-devices mesh, e.g. 2x2");
  flags.String("src-spec", &options.src_spec, "SPEC",
               "source sharding spec, e.g. S0RR (required)");
  flags.String("dst-mesh", &options.dst_mesh, "HxG@h",
               "destination mesh, as --src-mesh");
  flags.String("dst-devices", &options.dst_devices, "IDS",
               "destination mesh as a device list (with --dst-shape)");
  flags.String("dst-shape", &options.dst_shape, "AxB",
               "shape of the --dst-devices mesh");
  flags.String("dst-spec", &options.dst_spec, "SPEC",
               "destination sharding spec, e.g. S0RR (required)");
  flags.String("strategy", &options.strategy, "NAME",
               "auto (lowest predicted time) or one of send_recv,\n"
               "local_allgather, broadcast, broadcast_lb, meshcast");
  AddOutputFlag(flags, &options.output,
                "table: compare strategies (wide: the same); json: the\n"
                "chosen plan as one object; yaml: the same data as YAML");
  flags.Bool("verify", &options.verify,
             "check every plan delivers all data from devices that hold it");
  flags.Bool("live", &options.live,
             "plan on the live cluster's topology (Controller.Plan, a dry\n"
             "run) instead of --cluster; implied by --controller");
  flags.Bool("allow-overlap", &options.allow_overlap,
             "let source and destination meshes given without @h share\n"
             "hosts (placement as the controller does it)");
  AddCollectiveFlags(flags, options.collective_text);
  flags.String("f", &options.file, "FILE",
               "plan the job a job file describes (any kind; the format\n"
               "of 'meshctl submit -f')");
  flags.String("file", &options.file, "FILE", "the same as -f");
  options.client.Register(flags);
}

struct PlanInputs {
  Topology topology;
  ReshardProblem problem;
  bool auto_strategy = true;
  Strategy strategy = Strategy::kAuto;
};

absl::Status Flagged(absl::string_view flag, const absl::Status& status) {
  if (status.ok()) return status;
  // Library messages sometimes name the field already ("strategy: ...");
  // the flag replaces that name rather than repeating it.
  absl::string_view message = status.message();
  absl::ConsumePrefix(&message, absl::StrCat(flag.substr(2), ": "));
  return absl::Status(status.code(), absl::StrCat(flag, ": ", message));
}

absl::Status Required(const FlagSet& flags, absl::string_view name,
                      absl::string_view example) {
  if (flags.IsSet(name)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, ": required, e.g. --", name, " ", example));
}

absl::Status CheckPositive(absl::string_view flag, double value, bool zero_ok) {
  if (std::isfinite(value) && (value > 0 || (zero_ok && value == 0))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": must be ", zero_ok ? ">= 0" : "> 0",
                   " and finite, got ", value));
}

// --src-mesh / --dst-mesh offline (PlaceUnpinnedMeshes then moves meshes
// given without @h): HxG@h and HxG as the planner parses
// them, and N, a 1-D mesh of the first N devices of host 0 (`submit` and
// the controller take N as a 1-D mesh laid out as 1 x N, so that a spec
// over it uses axis 0 only; the same mesh here).
absl::StatusOr<DeviceMesh> ParseOfflineMesh(const std::string& text,
                                            const Topology& topology,
                                            const std::string& flag) {
  int extent = 0;
  if (!absl::SimpleAtoi(text, &extent)) {
    return ParseMesh(text, topology, flag);
  }
  if (extent < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": cannot parse mesh \"", text,
        "\": a 1-D mesh needs N >= 1 devices; expected N, HxG or HxG@h, "
        "e.g. 4 or 2x4@2"));
  }
  if (extent > topology.devices_per_host) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": 1-D mesh ", text, " is the first ", extent,
        " devices of one host but the cluster has ",
        topology.devices_per_host, " per host; use HxG for more hosts"));
  }
  ASSIGN_OR_RETURN(DeviceMesh mesh,
                   ParseMesh(absl::StrCat("1x", extent), topology, flag));
  mesh.shape = {extent};
  return mesh;
}

absl::StatusOr<DeviceMesh> BuildMesh(const FlagSet& flags,
                                     const Topology& topology,
                                     absl::string_view side,
                                     const std::string& mesh_text,
                                     const std::string& devices,
                                     const std::string& shape) {
  const std::string mesh_flag = absl::StrCat("--", side, "-mesh");
  const std::string devices_flag = absl::StrCat("--", side, "-devices");
  const std::string shape_flag = absl::StrCat("--", side, "-shape");
  const bool has_mesh = flags.IsSet(mesh_flag.substr(2));
  const bool has_devices = flags.IsSet(devices_flag.substr(2));
  const bool has_shape = flags.IsSet(shape_flag.substr(2));
  if (has_mesh && (has_devices || has_shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat(mesh_flag, ": give either ", mesh_flag, " or ",
                     devices_flag, " with ", shape_flag, ", not both"));
  }
  if (has_mesh) return ParseOfflineMesh(mesh_text, topology, mesh_flag);
  if (has_devices != has_shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        has_devices ? shape_flag : devices_flag, ": required with ",
        has_devices ? devices_flag : shape_flag, ", e.g. ", devices_flag,
        " 0,1,4,5 ", shape_flag, " 2x2"));
  }
  if (!has_devices) {
    return absl::InvalidArgumentError(
        absl::StrCat(mesh_flag, ": required (HxG@h, e.g. 2x4@0), or ",
                     devices_flag, " with ", shape_flag));
  }
  return MeshFromDevices(devices, shape, topology, devices_flag);
}

// True when --<side>-mesh was given without @h (HxG or N): the controller
// would place it anywhere, so the offline plan places it the same way.
bool IsUnpinnedMesh(const FlagSet& flags, absl::string_view side,
                    const std::string& text) {
  return flags.IsSet(absl::StrCat(side, "-mesh")) &&
         text.find('@') == std::string::npos;
}

// Re-places meshes given without @h with the controller's rules on an idle
// cluster (planner/placement.h): source and destination on disjoint hosts
// unless --allow-overlap, the other (pinned) mesh kept where it is. Without
// this an unpinned 2x4 -> 2x4 would put both meshes on host 0's devices and
// predict a plan `submit` never runs.
absl::Status PlaceUnpinnedMeshes(const FlagSet& flags,
                                 const PlanOptions& options,
                                 PlanInputs& inputs) {
  const bool src_free = IsUnpinnedMesh(flags, "src", options.src_mesh);
  const bool dst_free = IsUnpinnedMesh(flags, "dst", options.dst_mesh);
  if (!src_free && !dst_free) return absl::OkStatus();
  const auto request_for = [](const DeviceMesh& mesh, bool free) {
    MeshRequest request;
    request.shape = mesh.shape;
    if (!free) request.devices = mesh.devices;  // kept as parsed
    return request;
  };
  PlacementRequest request;
  request.meshes = {request_for(inputs.problem.src_mesh, src_free),
                    request_for(inputs.problem.dst_mesh, dst_free)};
  request.names = {"src_mesh", "dst_mesh"};
  request.allow_overlap = options.allow_overlap;
  absl::StatusOr<Placement> placed =
      DeviceAllocator::PlaceOnIdleCluster(request, inputs.topology);
  if (!placed.ok()) {
    return absl::Status(
        placed.status().code(),
        absl::StrCat(dst_free ? "--dst-mesh" : "--src-mesh", ": ",
                     placed.status().message(),
                     "; pin meshes with HxG@h, e.g. --src-mesh 2x4@0"));
  }
  inputs.problem.src_mesh = placed->meshes[0];
  inputs.problem.dst_mesh = placed->meshes[1];
  return absl::OkStatus();
}

// The error for an offline plan without --cluster: the likely intent may be
// the running cluster.
absl::Status ClusterMissing(const CommandContext& context) {
  const std::optional<std::string> env = context.Env("MESHCAST_CONTROLLER");
  return absl::InvalidArgumentError(absl::StrCat(
      "--cluster: required for an offline plan, e.g. --cluster 5x4; or "
      "--live to plan on the running cluster",
      env.has_value() && !env->empty()
          ? absl::StrCat(" ($MESHCAST_CONTROLLER is ", *env, ")")
          : " (its controller is found as for 'meshctl list')"));
}

// The offline topology from --cluster and the link flags.
absl::StatusOr<Topology> BuildTopology(const PlanOptions& options) {
  auto cluster = ParseClusterShape(options.cluster);
  RETURN_IF_ERROR(Flagged("--cluster", cluster.status()));
  RETURN_IF_ERROR(CheckPositive("--inter-gbps", options.inter_gbps, false));
  RETURN_IF_ERROR(CheckPositive("--intra-gbps", options.intra_gbps, false));
  RETURN_IF_ERROR(
      CheckPositive("--inter-latency-us", options.inter_latency_us, true));
  RETURN_IF_ERROR(
      CheckPositive("--intra-latency-us", options.intra_latency_us, true));
  Topology topology = Topology::FromGbps(cluster->first, cluster->second,
                                         options.inter_gbps,
                                         options.intra_gbps);
  topology.inter_host_latency = options.inter_latency_us * 1e-6;
  topology.intra_host_latency = options.intra_latency_us * 1e-6;
  RETURN_IF_ERROR(
      CheckPositive("--host-copy-gbps", options.host_copy_gbps, true));
  RETURN_IF_ERROR(
      CheckPositive("--transfer-setup-us", options.transfer_setup_us, true));
  topology.host_copy_bandwidth = options.host_copy_gbps * 1e9 / 8;
  topology.transfer_setup_seconds = options.transfer_setup_us * 1e-6;
  RETURN_IF_ERROR(CheckPositive("--cpu-cores-per-device",
                                options.cpu_cores_per_device, true));
  topology.cpu_cores_per_device = options.cpu_cores_per_device;
  absl::StatusOr<DeviceRates> rates = DeviceRatesFor(options.device_kind);
  RETURN_IF_ERROR(Flagged("--device-kind", rates.status()));
  topology.SetDeviceRates(*rates);
  RETURN_IF_ERROR(Flagged("--cluster", topology.Validate()));
  return topology;
}

absl::StatusOr<PlanInputs> BuildInputs(const FlagSet& flags,
                                       const PlanOptions& options,
                                       const CommandContext& context) {
  if (!flags.positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", flags.positional().front(),
                     "'; every input is a flag, see 'meshctl plan --help'"));
  }
  if (!flags.IsSet("cluster")) return ClusterMissing(context);
  RETURN_IF_ERROR(Required(flags, "shape", "1024x1024x512"));
  RETURN_IF_ERROR(Required(flags, "src-spec", "S0RR"));
  RETURN_IF_ERROR(Required(flags, "dst-spec", "S0RR"));

  PlanInputs inputs;
  ASSIGN_OR_RETURN(inputs.topology, BuildTopology(options));

  ReshardProblem& problem = inputs.problem;
  auto shape = ParseShape(options.shape);
  RETURN_IF_ERROR(Flagged("--shape", shape.status()));
  problem.tensor.shape = *std::move(shape);
  auto dtype = ParseDType(options.dtype);
  RETURN_IF_ERROR(Flagged("--dtype", dtype.status()));
  problem.tensor.dtype = *dtype;

  ASSIGN_OR_RETURN(problem.src_mesh,
                   BuildMesh(flags, inputs.topology, "src", options.src_mesh,
                             options.src_devices, options.src_shape));
  ASSIGN_OR_RETURN(problem.dst_mesh,
                   BuildMesh(flags, inputs.topology, "dst", options.dst_mesh,
                             options.dst_devices, options.dst_shape));
  RETURN_IF_ERROR(PlaceUnpinnedMeshes(flags, options, inputs));

  auto src_spec = ShardingSpec::Parse(options.src_spec);
  RETURN_IF_ERROR(Flagged("--src-spec", src_spec.status()));
  problem.src_spec = *std::move(src_spec);
  RETURN_IF_ERROR(Flagged("--src-spec", problem.src_spec.Validate(
                                            problem.tensor, problem.src_mesh)));
  auto dst_spec = ShardingSpec::Parse(options.dst_spec);
  RETURN_IF_ERROR(Flagged("--dst-spec", dst_spec.status()));
  problem.dst_spec = *std::move(dst_spec);
  RETURN_IF_ERROR(Flagged("--dst-spec", problem.dst_spec.Validate(
                                            problem.tensor, problem.dst_mesh)));
  RETURN_IF_ERROR(problem.Validate(inputs.topology));

  auto strategy = ParseStrategy(options.strategy);
  RETURN_IF_ERROR(Flagged("--strategy", strategy.status()));
  inputs.strategy = *strategy;
  inputs.auto_strategy = *strategy == Strategy::kAuto;
  return inputs;
}

std::string DescribeMesh(const DeviceMesh& mesh) {
  return absl::StrCat(absl::StrJoin(mesh.shape, "x"), " [devices ",
                      FormatDeviceRanges(mesh.devices), "]");
}

double EffectiveGbps(int64_t bytes, double seconds) {
  return seconds > 0 ? bytes * 8.0 / seconds / 1e9 : 0;
}

double Ratio(double seconds, double bound) {
  return bound > 0 ? seconds / bound : 1.0;
}

Json MeshJson(const DeviceMesh& mesh) {
  return Json{{"shape", mesh.shape}, {"devices", mesh.devices}};
}

// Plans with at least this many transfers go to --output json as a stream
// (CommandContext::stream_out), not one string: at a million transfers the
// text is about 100 MB. Smaller ones are returned whole, as every other
// command's output is.
constexpr size_t kStreamJsonTransfers = 10000;

// Receives JSON text piece by piece.
using TextSink = std::function<void(absl::string_view)>;

// Pieces of about this size go to a TextSink.
constexpr size_t kJsonPieceBytes = size_t{1} << 20;

// `values` as a JSON array of integers, appended to `out`.
void AppendIntList(std::string& out, absl::Span<const int> values) {
  out.push_back('[');
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    absl::StrAppend(&out, values[i]);
  }
  out.push_back(']');
}

// The transfers as a JSON array, written as text to `sink` in pieces: a
// JSON tree of millions of transfers (1M at 1024x8 -> 1024x8) took about a
// kilobyte each, the text takes about 70 bytes. The same text nlohmann's
// dump() writes.
void WriteTransfersJson(const ReshardPlan& plan, const TextSink& sink) {
  std::string out = "[";
  for (size_t t = 0; t < plan.transfers.size(); ++t) {
    const Transfer& transfer = plan.transfers[t];
    if (t > 0) out.push_back(',');
    out += "{\"slice\":[";
    for (size_t d = 0; d < transfer.slice.size(); ++d) {
      absl::StrAppend(&out, d > 0 ? "," : "", "[", transfer.slice[d].begin,
                      ",", transfer.slice[d].end, "]");
    }
    absl::StrAppend(&out, "],\"src_device\":", transfer.src_device,
                    ",\"dst_devices\":");
    AppendIntList(out, transfer.dst_devices);
    if (!transfer.parents.empty()) {
      out += ",\"parents\":";
      AppendIntList(out, transfer.parents);
    }
    if (transfer.chunk_bytes > 0) {
      absl::StrAppend(&out, ",\"chunk_bytes\":", transfer.chunk_bytes);
    }
    absl::StrAppend(&out, ",\"bytes\":", transfer.bytes,
                    ",\"stage\":", transfer.stage, ",\"deps\":");
    AppendIntList(out, transfer.deps);
    out.push_back('}');
    if (out.size() >= kJsonPieceBytes) {
      sink(out);
      out.clear();
    }
  }
  out.push_back(']');
  sink(out);
}

// The --output json document, written to `sink` in pieces.
void WriteJson(const PlanInputs& inputs, const StrategyComparison& cmp,
               int chosen, size_t unit_tasks, bool verified,
               const TextSink& sink) {
  const ReshardProblem& problem = inputs.problem;
  const Topology& topology = inputs.topology;
  const StrategyEvaluation& row = cmp.rows[chosen];
  Json strategies = Json::array();
  for (size_t i = 0; i < cmp.rows.size(); ++i) {
    const StrategyEvaluation& r = cmp.rows[i];
    strategies.push_back(
        Json{{"strategy", StrategyName(r.strategy)},
             {"predicted_seconds", r.predicted_seconds},
             {"lower_bound_seconds", r.lower_bound_seconds},
             {"ratio_to_lower_bound",
              Ratio(r.predicted_seconds, r.lower_bound_seconds)},
             {"num_transfers", r.plan.transfers.size()},
             {"transfer_bytes", r.plan.total_bytes()},
             {"chosen", static_cast<int>(i) == chosen}});
    // Not planned: predicted_seconds is the bound that ruled it out.
    if (r.pruned) strategies.back()["pruned"] = true;
  }
  Json out{
      {"strategy", StrategyName(row.strategy)},
      {"requested_strategy",
       inputs.auto_strategy ? "auto" : StrategyName(inputs.strategy)},
      {"predicted_seconds", row.predicted_seconds},
      {"lower_bound_seconds", row.lower_bound_seconds},
      {"ratio_to_lower_bound",
       Ratio(row.predicted_seconds, row.lower_bound_seconds)},
      {"effective_bytes_per_second",
       row.predicted_seconds > 0
           ? problem.tensor.num_bytes() / row.predicted_seconds
           : 0.0},
      {"moved_bytes", row.moved_bytes},
      {"unit_tasks", unit_tasks},
      {"num_transfers", row.plan.transfers.size()},
      {"topology",
       Json{{"num_hosts", topology.num_hosts},
            {"devices_per_host", topology.devices_per_host},
            {"inter_host_bandwidth_bytes_per_second",
             topology.inter_host_bandwidth},
            {"intra_host_bandwidth_bytes_per_second",
             topology.intra_host_bandwidth},
            {"inter_host_latency_seconds", topology.inter_host_latency},
            {"intra_host_latency_seconds", topology.intra_host_latency},
            {"host_copy_bandwidth_bytes_per_second",
             topology.host_copy_bandwidth},
            {"transfer_setup_seconds", topology.transfer_setup_seconds},
            {"pipeline_chunk_bytes", topology.pipeline_chunk_bytes}}},
      {"tensor", Json{{"shape", problem.tensor.shape},
                      {"dtype", DTypeName(problem.tensor.dtype)},
                      {"bytes", problem.tensor.num_bytes()}}},
      {"src_mesh", MeshJson(problem.src_mesh)},
      {"src_spec", problem.src_spec.ToString()},
      {"dst_mesh", MeshJson(problem.dst_mesh)},
      {"dst_spec", problem.dst_spec.ToString()},
      {"strategies", std::move(strategies)},
  };
  if (verified) out["verified"] = true;
  // Everything but the transfers as a tree, then the transfers written as
  // text before the closing brace.
  std::string head = out.dump();
  head.pop_back();  // the closing brace
  head += ",\"transfers\":";
  sink(head);
  WriteTransfersJson(row.plan, sink);
  sink("}\n");
}

std::string RenderJson(const PlanInputs& inputs, const StrategyComparison& cmp,
                       int chosen, size_t unit_tasks, bool verified) {
  std::string text;
  WriteJson(inputs, cmp, chosen, unit_tasks, verified,
            [&](absl::string_view piece) {
              text.append(piece.data(), piece.size());
            });
  return text;
}

std::string RenderTable(const PlanInputs& inputs, const StrategyComparison& cmp,
                        int chosen, size_t unit_tasks, bool verified) {
  const ReshardProblem& problem = inputs.problem;
  const int64_t tensor_bytes = problem.tensor.num_bytes();
  std::string out;
  absl::StrAppend(&out, "topology:    ", inputs.topology.ToString(), "\n");
  absl::StrAppend(
      &out, "tensor:      ", absl::StrJoin(problem.tensor.shape, "x"), " ",
      DTypeName(problem.tensor.dtype), " (", FormatBytes(tensor_bytes), ")\n");
  absl::StrAppend(&out, "source:      ", DescribeMesh(problem.src_mesh), " ",
                  problem.src_spec.ToString(), "\n");
  absl::StrAppend(&out, "destination: ", DescribeMesh(problem.dst_mesh), " ",
                  problem.dst_spec.ToString(), "\n");
  const int64_t moved = cmp.rows.empty() ? 0 : cmp.rows[0].moved_bytes;
  absl::StrAppend(&out, "unit tasks:  ", unit_tasks, " (", FormatBytes(moved),
                  " to deliver to destination devices)\n\n");

  TextTable table(
      {"  strategy", "predicted", "eff. Gbps", "x lower bound", "transfers"},
      {TextTable::kLeft});
  double lower_bound = 0;
  for (size_t i = 0; i < cmp.rows.size(); ++i) {
    const StrategyEvaluation& row = cmp.rows[i];
    lower_bound = std::max(lower_bound, row.lower_bound_seconds);
    if (row.pruned) {
      table.AddRow({absl::StrCat("  ", StrategyName(row.strategy)),
                    absl::StrCat(">= ", FormatSeconds(row.predicted_seconds)),
                    "", "", "pruned"});
      continue;
    }
    table.AddRow({absl::StrCat(static_cast<int>(i) == chosen ? "* " : "  ",
                               StrategyName(row.strategy)),
                  FormatSeconds(row.predicted_seconds),
                  absl::StrFormat("%.2f", EffectiveGbps(tensor_bytes,
                                                        row.predicted_seconds)),
                  absl::StrFormat("%.3f", Ratio(row.predicted_seconds,
                                                row.lower_bound_seconds)),
                  absl::StrCat(row.plan.transfers.size())});
  }
  table.AddRow(
      {"  lower bound", FormatSeconds(lower_bound),
       absl::StrFormat("%.2f", EffectiveGbps(tensor_bytes, lower_bound)),
       "1.000", ""});
  out += table.Render();
  absl::StrAppend(
      &out, "\n* chosen: ", StrategyName(cmp.rows[chosen].strategy),
      inputs.auto_strategy ? " (auto: lowest predicted time)" : " (--strategy)",
      "\n");
  absl::StrAppend(&out,
                  "eff. Gbps = tensor bits / predicted time; x lower bound = "
                  "predicted / lower bound on any plan\n");
  const auto planned = std::count_if(
      cmp.rows.begin(), cmp.rows.end(),
      [](const StrategyEvaluation& r) { return !r.pruned; });
  if (planned < static_cast<long>(cmp.rows.size())) {
    absl::StrAppend(&out,
                    "pruned = not planned: its own lower bound is already "
                    "slower than the chosen plan\n");
  }
  if (verified) {
    absl::StrAppend(&out, "verified: all ", planned,
                    " plans deliver every element from devices holding it\n");
  }
  return out;
}

// The one error line of `meshctl plan`, as every command writes it
// (command_errors.h: one line, with the "did you mean" hint).
CommandResult PlanFail(int code, absl::string_view message) {
  return Fail(kCommand, code, message);
}

// ---- kinds other than reshard (collective, ...) -----------------------------
// Planned through the job-kind plug-ins (planner/kinds), offline with the
// same library the controller links and live through Controller.Plan with
// PlanRequest.spec; both render from the same proto view.

// Flags only a reshard plan takes (refused, by name, for other kinds).
constexpr const char* kReshardPlanFlags[] = {
    "shape",    "src-mesh",    "src-devices", "src-shape",
    "src-spec", "dst-mesh",    "dst-devices", "dst-shape",
    "dst-spec", "strategy",    "allow-overlap"};

struct KindPlanView {
  v1::JobSpec spec;
  v1::Topology topology;
  std::vector<v1::DeviceMesh> meshes;  // as placed
  v1::Plan plan;
  std::vector<v1::StrategyRow> rows;   // alternatives
  std::string controller;              // live only
  v1::JobResult predicted;             // the kind's figures of the plan
};

// The kind's figures for the simulated plan: its Summarize over a result
// that took the predicted time.
void PredictFigures(const JobKind& kind, KindPlanView& view) {
  view.predicted.set_seconds(view.plan.predicted_seconds());
  view.predicted.set_predicted_seconds(view.plan.predicted_seconds());
  view.predicted.set_lower_bound_seconds(view.plan.lower_bound_seconds());
  kind.Summarize(view.spec, view.plan, view.predicted);
  // Every figure here is a prediction; its "_predicted" twin repeats it.
  auto& metrics = *view.predicted.mutable_metrics();
  for (auto it = metrics.begin(); it != metrics.end();) {
    it = absl::StrContains(it->first, "_predicted_") ? metrics.erase(it)
                                                      : std::next(it);
  }
}

std::string RenderKindTable(const KindPlanView& view) {
  std::string out;
  if (!view.controller.empty()) {
    absl::StrAppend(&out, "controller:  ", view.controller,
                    " (live dry run)\n");
  }
  absl::StrAppend(&out, "topology:    ", DescribeTopology(view.topology),
                  "\n");
  absl::StrAppend(&out, "job:         ", SpecKindName(view.spec), ": ",
                  DescribeSpec(view.spec), "\n");
  for (size_t i = 0; i < view.meshes.size(); ++i) {
    const std::string side =
        view.meshes.size() == 1 ? "" : absl::StrCat("meshes[", i, "]");
    std::string text = DescribePlacedMesh(side, view.meshes[i]);
    if (side.empty()) text = text.substr(1);  // "mesh 2x4 on devices 0-7"
    absl::StrAppend(&out, i == 0 ? "placed:      " : "             ", text,
                    view.controller.empty()
                        ? " (as the controller places it on the idle cluster)"
                        : "",
                    "\n");
  }
  absl::StrAppend(&out, "plan:        ", view.plan.steps_size(),
                  view.plan.steps_size() == 1 ? " step, " : " steps, ",
                  view.plan.buffers_size(), " buffers, ",
                  view.plan.groups_size(), " groups\n\n");
  // A kind that predicts each alternative's memory gets a column for it.
  const bool memory =
      std::any_of(view.rows.begin(), view.rows.end(),
                  [](const v1::StrategyRow& r) { return r.peak_memory_bytes() > 0; });
  std::vector<std::string> header = {"  alternative", "predicted",
                                     "x lower bound", "steps", "bytes"};
  if (memory) header.push_back("peak memory/device");
  const bool notes =
      std::any_of(view.rows.begin(), view.rows.end(),
                  [](const v1::StrategyRow& r) { return !r.note().empty(); });
  if (notes) header.push_back("note");
  TextTable table(header, {TextTable::kLeft});
  double lower_bound = view.plan.lower_bound_seconds();
  std::string chosen = view.plan.strategy();
  for (const v1::StrategyRow& row : view.rows) {
    lower_bound = std::max(lower_bound, row.lower_bound_seconds());
    if (row.chosen()) chosen = row.strategy();
    std::vector<std::string> cells = {
        absl::StrCat(row.chosen() ? "* " : "  ", row.strategy()),
        FormatSeconds(row.predicted_seconds()),
        absl::StrFormat("%.3f", Ratio(row.predicted_seconds(),
                                      row.lower_bound_seconds())),
        absl::StrCat(row.transfers()),
        FormatBytes(static_cast<double>(row.bytes()))};
    if (memory) {
      cells.push_back(FormatBytes(static_cast<double>(row.peak_memory_bytes())));
    }
    if (notes) cells.push_back(row.note());
    table.AddRow(cells);
  }
  std::vector<std::string> bound_row = {"  lower bound",
                                        FormatSeconds(lower_bound), "1.000",
                                        "", ""};
  if (memory) bound_row.push_back("");
  if (notes) bound_row.push_back("");
  table.AddRow(bound_row);
  out += table.Render();
  absl::StrAppend(&out, "\n* chosen: ", chosen, ", predicted ",
                  FormatSeconds(view.plan.predicted_seconds()),
                  " (lower bound ",
                  FormatSeconds(view.plan.lower_bound_seconds()), ")\n");
  if (!view.predicted.metrics().empty()) {
    absl::StrAppend(&out, "\npredicted figures (of the simulated plan):\n",
                    RenderJobMetrics(view.predicted));
  }
  return out;
}

std::string RenderKindJson(const KindPlanView& view) {
  Json alternatives = Json::array();
  for (const v1::StrategyRow& row : view.rows) {
    Json entry =
        Json{{"name", row.strategy()},
             {"predicted_seconds", row.predicted_seconds()},
             {"lower_bound_seconds", row.lower_bound_seconds()},
             {"ratio_to_lower_bound",
              Ratio(row.predicted_seconds(), row.lower_bound_seconds())},
             {"steps", row.transfers()},
             {"bytes", row.bytes()},
             {"chosen", row.chosen()}};
    if (row.peak_memory_bytes() > 0) {
      entry["peak_memory_bytes"] = row.peak_memory_bytes();
    }
    if (!row.note().empty()) entry["note"] = row.note();
    alternatives.push_back(std::move(entry));
  }
  Json meshes = Json::array();
  for (const v1::DeviceMesh& mesh : view.meshes) {
    meshes.push_back(PlacedMeshToJson(mesh));
  }
  Json metrics = Json::object();
  std::map<std::string, double> sorted(view.predicted.metrics().begin(),
                                       view.predicted.metrics().end());
  for (const auto& [name, value] : sorted) metrics[name] = value;
  // The plan IR itself, as protobuf's JSON mapping with proto field names.
  std::string plan_text;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(view.plan, &plan_text,
                                                    print);
  Json out{{"kind", SpecKindName(view.spec)},
           {"strategy", view.plan.strategy()},
           {"predicted_seconds", view.plan.predicted_seconds()},
           {"lower_bound_seconds", view.plan.lower_bound_seconds()},
           {"ratio_to_lower_bound", Ratio(view.plan.predicted_seconds(),
                                          view.plan.lower_bound_seconds())}};
  if (!view.controller.empty()) out["controller"] = view.controller;
  out["topology"] = TopologyToJson(view.topology);
  if (view.spec.has_collective()) {
    out["spec"] = Json{{"collective", CollectiveToJson(view.spec.collective())}};
  }
  out["meshes"] = std::move(meshes);
  out["alternatives"] = std::move(alternatives);
  out["predicted_metrics"] = std::move(metrics);
  out["plan"] = Json::parse(plan_text.empty() ? "{}" : plan_text);
  return out.dump() + "\n";
}

// Flags given that this kind does not take, as an error; OK otherwise.
absl::Status CheckKindFlags(const FlagSet& flags, const std::string& kind) {
  if (kind == "reshard") {
    for (const auto& [flag, field] : kCollectiveFlags) {
      if (flags.IsSet(flag)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", flag, ": not a flag of reshard plans; 'meshctl plan "
            "collective --op ...' plans a collective"));
      }
    }
    return absl::OkStatus();
  }
  for (const char* flag : kReshardPlanFlags) {
    if (flags.IsSet(flag)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": not a flag of ", kind,
                       " plans; see 'meshctl plan --help'"));
    }
  }
  if (flags.IsSet("verify")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--verify: checks reshard plans only; ", kind,
                     " plans are checked when they are built"));
  }
  return absl::OkStatus();
}

// The spec of a non-reshard plan from its flags, checked by the kind.
absl::StatusOr<v1::JobSpec> KindSpec(const FlagSet& flags,
                                     const PlanOptions& options,
                                     std::map<std::string, std::string>* origins) {
  if (!options.file.empty()) {
    ASSIGN_OR_RETURN(const JobFile file, LoadJobSpecFile(options.file));
    v1::JobSpec spec = file.spec;
    if (file.compact) {
      ASSIGN_OR_RETURN(spec, BuildJobSpec(file.reshard));
    }
    RETURN_IF_ERROR(ValidateOffline(spec));
    return spec;
  }
  std::map<std::string, std::string> text = options.collective_text;
  text["dtype"] = options.dtype;
  v1::JobSpec spec;
  ASSIGN_OR_RETURN(*spec.mutable_collective(),
                   BuildCollectiveSpec(flags, text, nullptr, origins));
  RETURN_IF_ERROR(AttributeCollectiveError(ValidateOffline(spec), *origins));
  return spec;
}

CommandResult RunKindPlan(const FlagSet& flags, const PlanOptions& options,
                          const CommandContext& context, bool live) {
  if (!flags.positional().empty()) {
    return PlanFail(kExitUsage,
                    absl::StrCat("unexpected argument '",
                                 flags.positional().front(),
                                 "'; after the kind every input is a flag, "
                                 "see 'meshctl plan --help'"));
  }
  if (!live && !flags.IsSet("cluster")) {
    return PlanFail(kExitUsage, ClusterMissing(context).message());
  }
  std::map<std::string, std::string> origins;
  absl::StatusOr<v1::JobSpec> spec = KindSpec(flags, options, &origins);
  if (!spec.ok()) return FailWithStatus(kCommand, spec.status());
  absl::StatusOr<const JobKind*> kind = FindJobKind(*spec);
  if (!kind.ok()) return FailWithStatus(kCommand, kind.status());
  KindPlanView view;
  view.spec = *spec;
  if (live) {
    absl::StatusOr<std::unique_ptr<ControllerClient>> client =
        options.client.Connect(context);
    if (!client.ok()) return FailWithStatus(kCommand, client.status());
    v1::PlanRequest request;
    *request.mutable_spec() = *spec;
    absl::StatusOr<v1::PlanResponse> response = (*client)->Plan(request);
    if (!response.ok()) {
      return FailWithStatus(
          kCommand, AttributeCollectiveError(response.status(), origins));
    }
    view.controller = (*client)->address();
    view.topology = response->topology();
    view.meshes.assign(response->placed_meshes().begin(),
                       response->placed_meshes().end());
    view.plan = response->plan();
    view.rows.assign(response->rows().begin(), response->rows().end());
  } else {
    absl::StatusOr<Topology> topology = BuildTopology(options);
    if (!topology.ok()) return PlanFail(kExitUsage, topology.status().message());
    absl::StatusOr<PlacementRequest> meshes = (*kind)->Meshes(*spec);
    if (!meshes.ok()) {
      return FailWithStatus(kCommand,
                            AttributeCollectiveError(meshes.status(), origins));
    }
    absl::StatusOr<Placement> placed =
        DeviceAllocator::PlaceOnIdleCluster(*meshes, *topology);
    if (!placed.ok()) {
      // The allocator names the mesh by the kind's name for it ("mesh",
      // "collective.mesh"); the flag replaces that name.
      absl::Status attributed =
          AttributeCollectiveError(placed.status(), origins);
      if (attributed.message() == placed.status().message()) {
        attributed = absl::Status(
            placed.status().code(),
            absl::StrCat(CollectiveFlagOf("mesh"), ": ",
                         placed.status().message()));
      }
      return FailWithStatus(kCommand, attributed);
    }
    meshcast::PlanOptions plan_options;
    plan_options.compare_all = true;
    absl::StatusOr<PlannedJob> planned =
        (*kind)->Plan(*spec, placed->meshes, *topology, plan_options);
    if (!planned.ok()) {
      return PlanFail(kExitFailure, absl::StrCat("planning failed: ",
                                                 planned.status().message()));
    }
    view.topology = TopologyToProto(*topology);
    for (const DeviceMesh& mesh : placed->meshes) {
      view.meshes.push_back(MeshToProto(mesh));
    }
    view.plan = planned->plan;
    for (const PlanAlternative& alternative : planned->alternatives) {
      view.rows.push_back(AlternativeToRow(alternative));
    }
  }
  if (view.rows.empty()) {
    // A kind with a single way to plan: the plan is its one row.
    v1::StrategyRow row;
    row.set_strategy(view.plan.strategy());
    row.set_predicted_seconds(view.plan.predicted_seconds());
    row.set_lower_bound_seconds(view.plan.lower_bound_seconds());
    row.set_transfers(view.plan.steps_size());
    int64_t bytes = 0;
    for (const v1::Step& step : view.plan.steps()) bytes += step.bytes();
    row.set_bytes(bytes);
    row.set_chosen(true);
    view.rows.push_back(std::move(row));
  }
  PredictFigures(**kind, view);
  CommandResult result;
  result.out = IsStructuredOutput(options.output)
                   ? RenderStructuredText(RenderKindJson(view), options.output)
                   : RenderKindTable(view);
  return result;
}

// ---- live mode ------------------------------------------------------------

bool LiveMode(const FlagSet& flags, const PlanOptions& options) {
  return options.live || flags.IsSet("controller");
}

// Flags that only make sense on one side of the offline/live split.
absl::Status CheckModeFlags(const FlagSet& flags, bool live) {
  if (live) {
    for (const char* flag :
         {"cluster", "inter-gbps", "intra-gbps", "inter-latency-us",
          "intra-latency-us", "host-copy-gbps", "transfer-setup-us",
          "cpu-cores-per-device", "device-kind", "verify"}) {
      if (flags.IsSet(flag)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", flag,
            ": not used with --live/--controller; the live cluster's "
            "topology and the controller's planner apply"));
      }
    }
    return absl::OkStatus();
  }
  for (const char* flag : {"dir", "connect-timeout"}) {
    if (flags.IsSet(flag)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": only with --live or --controller"));
    }
  }
  return absl::OkStatus();
}

// The reshard flags that were given, for BuildJobSpec.
ReshardInput LiveInput(const FlagSet& flags, const PlanOptions& options) {
  ReshardInput input;
  const std::pair<const char*, const std::string*> fields[] = {
      {"shape", &options.shape},         {"dtype", &options.dtype},
      {"src_mesh", &options.src_mesh},   {"src_devices", &options.src_devices},
      {"src_shape", &options.src_shape}, {"src_spec", &options.src_spec},
      {"dst_mesh", &options.dst_mesh},   {"dst_devices", &options.dst_devices},
      {"dst_shape", &options.dst_shape}, {"dst_spec", &options.dst_spec},
      {"strategy", &options.strategy}};
  for (const auto& [field, value] : fields) {
    const std::string flag = absl::StrReplaceAll(field, {{"_", "-"}});
    if (flags.IsSet(flag)) input.Set(field, *value, "--" + flag);
  }
  if (options.allow_overlap) {
    input.Set("allow_overlap", "true", "--allow-overlap");
  }
  return input;
}

// The devices of a mesh: as requested, else where the controller placed it,
// else (older controllers) those holding its tiles in the plan.
Json LiveMeshJson(const v1::DeviceMesh& request, const v1::DeviceMesh& placed,
                  const v1::Plan& plan, v1::Buffer::Role role) {
  std::vector<int> devices(request.devices().begin(), request.devices().end());
  if (devices.empty()) {
    devices.assign(placed.devices().begin(), placed.devices().end());
  }
  if (devices.empty()) devices = PlanDevices(plan, role);
  return Json{{"shape", request.shape()}, {"devices", devices}};
}

int LiveChosenRow(const v1::PlanResponse& response) {
  for (int i = 0; i < response.rows_size(); ++i) {
    if (response.rows(i).chosen()) return i;
  }
  for (int i = 0; i < response.rows_size(); ++i) {
    if (response.rows(i).strategy() == response.plan().strategy()) return i;
  }
  return -1;
}

int64_t TensorBytes(const v1::TensorSpec& tensor) {
  int64_t elements = 1;
  for (int64_t extent : tensor.shape()) elements *= extent;
  auto dtype = ParseDType(DTypeText(tensor.dtype()));
  return dtype.ok() ? elements * DTypeSize(*dtype) : 0;
}

std::string RenderLiveJson(const std::string& controller,
                           const v1::ReshardSpec& reshard,
                           const v1::PlanResponse& response) {
  const v1::Plan& plan = response.plan();
  const int chosen = LiveChosenRow(response);
  const int64_t bytes = TensorBytes(reshard.tensor());
  Json strategies = Json::array();
  for (int i = 0; i < response.rows_size(); ++i) {
    const v1::StrategyRow& r = response.rows(i);
    strategies.push_back(
        Json{{"strategy", r.strategy()},
             {"predicted_seconds", r.predicted_seconds()},
             {"lower_bound_seconds", r.lower_bound_seconds()},
             {"ratio_to_lower_bound",
              Ratio(r.predicted_seconds(), r.lower_bound_seconds())},
             {"num_transfers", r.transfers()},
             {"transfer_bytes", r.bytes()},
             {"chosen", i == chosen}});
  }
  Json out{
      {"strategy", plan.strategy()},
      {"requested_strategy", reshard.strategy()},
      {"predicted_seconds", plan.predicted_seconds()},
      {"lower_bound_seconds", plan.lower_bound_seconds()},
      {"ratio_to_lower_bound",
       Ratio(plan.predicted_seconds(), plan.lower_bound_seconds())},
      {"effective_bytes_per_second",
       plan.predicted_seconds() > 0 ? bytes / plan.predicted_seconds() : 0.0},
      {"num_transfers", plan.steps_size()},
      {"controller", controller},
      {"topology", TopologyToJson(response.topology())},
      {"tensor", Json{{"shape", reshard.tensor().shape()},
                      {"dtype", DTypeText(reshard.tensor().dtype())},
                      {"bytes", bytes}}},
      {"src_mesh",
       LiveMeshJson(reshard.src_mesh(), response.placed_src_mesh(), plan,
                    v1::Buffer::ROLE_SOURCE)},
      {"src_spec", reshard.src_spec().text()},
      {"dst_mesh",
       LiveMeshJson(reshard.dst_mesh(), response.placed_dst_mesh(), plan,
                    v1::Buffer::ROLE_DESTINATION)},
      {"dst_spec", reshard.dst_spec().text()},
      {"strategies", std::move(strategies)},
  };
  out["transfers"] = PlanTransfersToJson(plan);
  return out.dump() + "\n";
}

std::string RenderLiveTable(const std::string& controller,
                            const v1::ReshardSpec& reshard,
                            const v1::PlanResponse& response) {
  const v1::Plan& plan = response.plan();
  const int chosen = LiveChosenRow(response);
  const int64_t bytes = TensorBytes(reshard.tensor());
  const auto mesh_line = [&](const v1::DeviceMesh& mesh,
                             const v1::DeviceMesh& placed,
                             v1::Buffer::Role role, const std::string& spec) {
    std::string where;
    if (mesh.devices_size() == 0) {
      where = placed.devices_size() > 0
                  ? absl::StrCat(" (placed by the controller on devices ",
                                 FormatDeviceRanges(std::vector<int>(
                                     placed.devices().begin(),
                                     placed.devices().end())),
                                 ")")
                  : " (placed by the controller)";
    }
    return absl::StrCat(
        DescribeMeshRequest(mesh), where,
        " [tiles on devices ", FormatDeviceRanges(PlanDevices(plan, role)),
        "] ", spec);
  };
  std::string out;
  absl::StrAppend(&out, "controller:  ", controller, " (live dry run)\n");
  absl::StrAppend(&out, "topology:    ", DescribeTopology(response.topology()),
                  "\n");
  absl::StrAppend(
      &out, "tensor:      ", absl::StrJoin(reshard.tensor().shape(), "x"), " ",
      DTypeText(reshard.tensor().dtype()), " (", FormatBytes(bytes), ")\n");
  absl::StrAppend(&out, "source:      ",
                  mesh_line(reshard.src_mesh(), response.placed_src_mesh(),
                            v1::Buffer::ROLE_SOURCE,
                            reshard.src_spec().text()),
                  "\n");
  absl::StrAppend(&out, "destination: ",
                  mesh_line(reshard.dst_mesh(), response.placed_dst_mesh(),
                            v1::Buffer::ROLE_DESTINATION,
                            reshard.dst_spec().text()),
                  "\n\n");
  TextTable table(
      {"  strategy", "predicted", "eff. Gbps", "x lower bound", "transfers"},
      {TextTable::kLeft});
  double lower_bound = 0;
  for (int i = 0; i < response.rows_size(); ++i) {
    const v1::StrategyRow& row = response.rows(i);
    lower_bound = std::max(lower_bound, row.lower_bound_seconds());
    table.AddRow(
        {absl::StrCat(i == chosen ? "* " : "  ", row.strategy()),
         FormatSeconds(row.predicted_seconds()),
         absl::StrFormat("%.2f", EffectiveGbps(bytes, row.predicted_seconds())),
         absl::StrFormat(
             "%.3f", Ratio(row.predicted_seconds(), row.lower_bound_seconds())),
         absl::StrCat(row.transfers())});
  }
  table.AddRow({"  lower bound", FormatSeconds(lower_bound),
                absl::StrFormat("%.2f", EffectiveGbps(bytes, lower_bound)),
                "1.000", ""});
  out += table.Render();
  absl::StrAppend(&out, "\n* chosen: ", plan.strategy(),
                  reshard.strategy() == "auto"
                      ? " (auto: lowest predicted time)"
                      : " (--strategy)",
                  "\n");
  absl::StrAppend(&out,
                  "eff. Gbps = tensor bits / predicted time; x lower bound = "
                  "predicted / lower bound on any plan\n");
  return out;
}

CommandResult RunLivePlan(const FlagSet& flags, const PlanOptions& options,
                          const CommandContext& context) {
  if (!flags.positional().empty()) {
    return PlanFail(
        kExitUsage,
        absl::StrCat("unexpected argument '", flags.positional().front(),
                     "'; every input is a flag, see 'meshctl "
                     "plan --help'"));
  }
  const ReshardInput input = LiveInput(flags, options);
  absl::StatusOr<v1::JobSpec> spec = BuildJobSpec(input);
  if (!spec.ok()) return PlanFail(kExitUsage, spec.status().message());
  absl::StatusOr<std::unique_ptr<ControllerClient>> client =
      options.client.Connect(context);
  if (!client.ok()) return FailWithStatus(kCommand, client.status());
  if (NeedsTopology(input)) {
    absl::StatusOr<v1::GetClusterResponse> cluster = (*client)->GetCluster();
    if (!cluster.ok()) return FailWithStatus(kCommand, cluster.status());
    absl::Status pinned = PinMeshes(cluster->topology(), input, &*spec);
    if (!pinned.ok()) return FailWithStatus(kCommand, pinned);
  }
  // Both forms: `spec` for controllers that plan every kind, `reshard` for
  // those that predate it.
  v1::PlanRequest request;
  *request.mutable_reshard() = spec->reshard();
  *request.mutable_spec() = *spec;
  absl::StatusOr<v1::PlanResponse> response = (*client)->Plan(request);
  if (!response.ok()) {
    return FailWithStatus(kCommand,
                          AttributeServerError(response.status(), input));
  }
  CommandResult result;
  result.out =
      IsStructuredOutput(options.output)
          ? RenderStructuredText(RenderLiveJson((*client)->address(),
                                                spec->reshard(), *response),
                                 options.output)
          : RenderLiveTable((*client)->address(), spec->reshard(), *response);
  return result;
}

}  // namespace

CommandResult RunPlanCommand(const std::vector<std::string>& args) {
  return RunPlanCommand(args, ProcessContext());
}

CommandResult RunPlanCommand(const std::vector<std::string>& args,
                             const CommandContext& context) {
  // `meshctl plan KIND ...`: the kind is the first argument that is not a
  // flag (a first parse finds it); without one, a reshard as always.
  std::string kind = "reshard";
  std::vector<std::string> rest = args;
  {
    PlanOptions probe_options;
    FlagSet probe(kCommand, kDescription);
    RegisterFlags(probe, probe_options);
    if (probe.Parse(args).ok() && !probe.positional().empty()) {
      const std::string& first = probe.positional().front();
      const std::vector<std::string>& kinds = FlagKinds();
      if (std::find(kinds.begin(), kinds.end(), first) != kinds.end()) {
        kind = first;
        rest.erase(std::find(rest.begin(), rest.end(), first));
      }
    }
  }
  PlanOptions options;
  FlagSet flags("meshctl plan [KIND]", kDescription);
  RegisterFlags(flags, options);
  absl::Status parsed = flags.Parse(rest);
  if (flags.help_requested()) {
    return CommandResult{kExitOk, flags.Usage(), ""};
  }
  if (!parsed.ok()) return PlanFail(kExitUsage, parsed.message());
  const bool live = LiveMode(flags, options);
  if (absl::Status status = CheckModeFlags(flags, live); !status.ok()) {
    return PlanFail(kExitUsage, status.message());
  }
  if (!options.file.empty()) {
    // The file says what to plan; flags of a kind would contradict it.
    for (const char* flag : kReshardPlanFlags) {
      if (flags.IsSet(flag)) {
        return PlanFail(kExitUsage,
                        absl::StrCat("--", flag, ": the job comes from -f ",
                                     options.file, "; give it there"));
      }
    }
    for (const auto& [flag, field] : kCollectiveFlags) {
      if (flags.IsSet(flag)) {
        return PlanFail(kExitUsage,
                        absl::StrCat("--", flag, ": the job comes from -f ",
                                     options.file, "; give it there"));
      }
    }
    return RunKindPlan(flags, options, context, live);
  }
  if (absl::Status status = CheckKindFlags(flags, kind); !status.ok()) {
    return PlanFail(kExitUsage, status.message());
  }
  if (kind != "reshard") return RunKindPlan(flags, options, context, live);
  if (live) return RunLivePlan(flags, options, context);
  absl::StatusOr<PlanInputs> inputs = BuildInputs(flags, options, context);
  if (!inputs.ok()) return PlanFail(kExitUsage, inputs.status().message());

  // Only the strategy asked for; auto skips those that cannot win.
  CompareOptions compare;
  compare.only = inputs->auto_strategy ? Strategy::kAuto : inputs->strategy;
  compare.prune = !options.verify;  // --verify checks every strategy's plan
  absl::StatusOr<StrategyComparison> comparison =
      CompareStrategies({inputs->problem}, inputs->topology, compare);
  if (!comparison.ok()) {
    return PlanFail(kExitFailure, absl::StrCat("planning failed: ",
                                               comparison.status().ToString()));
  }
  if (comparison->rows.empty()) {
    return PlanFail(kExitFailure,
                    "planning failed: no strategy produced a plan");
  }
  const int chosen = comparison->chosen;
  if (options.verify) {
    for (const StrategyEvaluation& row : comparison->rows) {
      if (row.pruned) continue;
      absl::Status status = VerifyPlan(row.plan, inputs->topology);
      if (!status.ok()) {
        return PlanFail(
            kExitFailure,
            absl::StrCat("--verify: the ", StrategyName(row.strategy),
                         " plan is invalid: ", status.message()));
      }
    }
  }
  CommandResult result;
  if (options.output == "json" && context.stream_out &&
      comparison->rows[chosen].plan.transfers.size() >= kStreamJsonTransfers) {
    // Straight to stdout, a piece at a time: no copy of the whole text.
    WriteJson(*inputs, *comparison, chosen, comparison->unit_tasks,
              options.verify, context.stream_out);
    return result;
  }
  result.out = IsStructuredOutput(options.output)
                   ? RenderStructuredText(
                         RenderJson(*inputs, *comparison, chosen,
                                    comparison->unit_tasks, options.verify),
                         options.output)
                   : RenderTable(*inputs, *comparison, chosen, comparison->unit_tasks,
                                 options.verify);
  return result;
}

}  // namespace meshcast::cli
