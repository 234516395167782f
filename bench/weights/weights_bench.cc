// weights_bench: a whole model's weights moved from the training fleet to
// inference replicas (the reshard_model kind's problem) at frontier scale,
// simulated: a 1T-parameter MLA + MoE model with Kimi K2's published shapes
// (weights_model.h), bfloat16, from a [dp, ep, tp] training mesh to several
// [hosts, gpus] inference replicas on hosts of 8 GPUs.
//
//   weights_bench                # the frontier fleet: 256 training hosts,
//                                # 8 replicas of 16 hosts (3072 GPUs)
//   weights_bench --quick        # a fleet of 12 hosts, well under a second
//   weights_bench --scales       # the ratios as the fleet grows
//   weights_bench --quick --check  # also fail on a structural check
//
// Rows of the table:
//  - lower bound: no plan moving the weights can be faster (cost_model.h).
//  - meshcast: the resharding planner's plan of every tensor of the model
//    in one request (the reshard_model kind's planning), lowered to the
//    plan IR and timed by the plan simulator. The whole model is planned:
//    no per-layer extrapolation.
//  - whole broadcast, bound: every inference GPU receives every parameter
//    and keeps its slice, as checkpoint engines broadcast; the lower bound
//    of that problem (any plan that delivers whole parameters).
//  - whole broadcast, ring: the same as its engines run it, timed by the
//    flow engine on the same topology: the weights in buckets, each bucket
//    one pipelined relay chain (NCCL's ring) from a training GPU through
//    every inference GPU in device order, one bucket after another.
//  - checkpoint-engine, published: its figure for Kimi K2 on thousands of
//    GPUs, end to end on its own hardware; listed for scale only.
//
// Exit status: non-zero on errors (planning failures, bad flags) and, with
// --check, when a structural check fails (the parameter count of the Kimi
// K2 shape, a ratio to the lower bound below 1, the plan simulator and the
// planner's simulator disagreeing, a plan that VerifyPlan rejects on the
// --quick fleet). Timings are reported, never asserted.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "bench/weights/weights_model.h"
#include "cli/flags.h"
#include "cli/text_table.h"
#include "planner/cost_model.h"
#include "planner/kinds/reshard/reshard_lowering.h"
#include "planner/kinds/reshard_model/reshard_model_kind.h"
#include "planner/mesh.h"
#include "planner/plan.h"
#include "planner/sim/plan_simulator.h"
#include "planner/strategy.h"
#include "planner/topology.h"
#include "planner/transfer_window.h"
#include "planner/unit_task.h"
#include "util/status_macros.h"

namespace meshcast::bench {
namespace {

using cli::FormatBytes;
using cli::FormatSeconds;
using cli::TextTable;

// checkpoint-engine's published time to update Kimi K2's weights (1T
// parameters) across thousands of GPUs ("about 20 s").
constexpr double kCheckpointEngineSeconds = 20.0;

// The fleet: a [dp, ep, tp] training mesh on dp x ep hosts of `gpus` GPUs
// (tp = gpus), then `replicas` inference replicas of [replica_hosts, gpus].
struct Fleet {
  int dp = 16;
  int ep = 16;
  int gpus = 8;
  int replica_hosts = 16;
  int replicas = 8;
  double nic_gbps = 3200;     // per host each way: 8 NICs x 400 Gbit/s
  double nvlink_gbps = 3200;  // per GPU each way: 400 GB/s
  double bucket_gib = 2;      // the whole broadcast's bucket

  int train_hosts() const { return dp * ep; }
  int num_hosts() const { return train_hosts() + replicas * replica_hosts; }
  int train_gpus() const { return train_hosts() * gpus; }
  int inference_gpus() const { return replicas * replica_hosts * gpus; }
  std::string Describe() const;
  absl::Status Validate() const;
};

std::string Fleet::Describe() const {
  return absl::StrFormat(
      "training mesh %dx%dx%d (dp x ep x tp: %d hosts, %d GPUs); %d "
      "inference replicas of %dx%d (hosts x GPUs: %d GPUs in all); %d hosts "
      "of %d GPUs",
      dp, ep, gpus, train_hosts(), train_gpus(), replicas, replica_hosts,
      gpus, inference_gpus(), num_hosts(), gpus);
}

absl::Status Fleet::Validate() const {
  if (dp < 1 || ep < 1 || gpus < 1 || replica_hosts < 1 || replicas < 1) {
    return absl::InvalidArgumentError(
        "--dp, --ep, --gpus, --replica-hosts and --replicas must be >= 1");
  }
  if (!(nic_gbps > 0) || !(nvlink_gbps > 0) || !(bucket_gib > 0)) {
    return absl::InvalidArgumentError(
        "--nic-gbps, --nvlink-gbps and --bucket-gib must be > 0");
  }
  return absl::OkStatus();
}

Topology FleetTopology(const Fleet& fleet) {
  return Topology::FromGbps(fleet.num_hosts(), fleet.gpus, fleet.nic_gbps,
                            fleet.nvlink_gbps);
}

DeviceMesh TrainMesh(const Fleet& fleet) {
  DeviceMesh mesh;
  mesh.shape = {fleet.dp, fleet.ep, fleet.gpus};
  for (int d = 0; d < fleet.train_gpus(); ++d) mesh.devices.push_back(d);
  return mesh;
}

// The replicas as one [replicas, hosts, gpus] mesh, as the reshard_model
// kind joins them (ReplicaMesh).
DeviceMesh InferenceMesh(const Fleet& fleet) {
  std::vector<DeviceMesh> replicas;
  int device = fleet.train_gpus();
  for (int r = 0; r < fleet.replicas; ++r) {
    DeviceMesh replica;
    replica.shape = {fleet.replica_hosts, fleet.gpus};
    for (int i = 0; i < fleet.replica_hosts * fleet.gpus; ++i) {
      replica.devices.push_back(device++);
    }
    replicas.push_back(std::move(replica));
  }
  return ReplicaMesh(replicas);
}

// One resharding problem per weight, as the reshard_model kind builds
// them; `whole`: every inference GPU receives the whole tensor.
absl::StatusOr<std::vector<ReshardProblem>> Problems(
    const std::vector<WeightTensor>& weights, const Fleet& fleet,
    const Topology& topology, bool whole) {
  const DeviceMesh train = TrainMesh(fleet);
  const DeviceMesh inference = InferenceMesh(fleet);
  std::vector<ReshardProblem> problems;
  problems.reserve(weights.size());
  for (const WeightTensor& w : weights) {
    ShardingSpec dst = OverReplicas(w.infer_spec);
    if (whole) {
      for (DimSharding& dim : dst.dims) dim.mesh_axes.clear();
    }
    problems.push_back({w.tensor, train, w.train_spec, inference, dst});
    const absl::Status valid = problems.back().Validate(topology);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(w.name, ": ", valid.message()));
    }
  }
  return problems;
}

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

int64_t PeakRssBytes() {
  struct rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // KiB on Linux
}

// The unit tasks of every problem and the bytes they deliver (bytes x
// receivers).
struct TaskSet {
  std::vector<UnitTask> tasks;
  int64_t delivered_bytes = 0;
};

absl::StatusOr<TaskSet> AllUnitTasks(
    const std::vector<ReshardProblem>& problems) {
  TaskSet out;
  for (size_t i = 0; i < problems.size(); ++i) {
    ASSIGN_OR_RETURN(std::vector<UnitTask> tasks,
                     ComputeUnitTasks(problems[i], static_cast<int>(i)));
    for (UnitTask& t : tasks) {
      out.delivered_bytes +=
          t.bytes * static_cast<int64_t>(t.receivers.size());
      out.tasks.push_back(std::move(t));
    }
  }
  return out;
}

// Bytes that cross a host NIC (counted once, at the receiving host) in a
// plan's relay chains.
int64_t NicBytes(const ReshardPlan& plan, const Topology& topology) {
  int64_t bytes = 0;
  for (const Transfer& t : plan.transfers) {
    int from = t.src_device;
    for (int to : t.dst_devices) {
      if (!topology.SameHost(from, to)) bytes += t.bytes;
      from = to;
    }
  }
  return bytes;
}

// meshcast's plan of the move, and what it took to make it.
struct MeshcastRun {
  int64_t tensors = 0;
  int64_t unit_tasks = 0;
  int64_t delivered_bytes = 0;
  int64_t nic_bytes = 0;
  int64_t transfers = 0;
  double lower_bound = 0;
  double predicted = 0;  // the plan simulator's, on the lowered plan IR
  double planner_predicted = 0;  // the planner's own simulation
  double tasks_s = 0, bound_s = 0, plan_s = 0, lower_s = 0, simulate_s = 0;
  bool verified = false;
  // The most transfers touching one host at once in the planner's
  // simulation, and the plan's prediction with each bound on that
  // (LimitTransfersPerHost: what reshard_model.max_transfers_per_host does).
  int most_per_host = 0;
  std::vector<std::pair<int, double>> per_host_bounded;
};

absl::StatusOr<MeshcastRun> RunMeshcast(
    const std::vector<ReshardProblem>& problems, const Topology& topology,
    bool verify, const std::vector<int>& per_host_limits = {}) {
  MeshcastRun run;
  run.tensors = static_cast<int64_t>(problems.size());
  auto start = std::chrono::steady_clock::now();
  {
    ASSIGN_OR_RETURN(TaskSet tasks, AllUnitTasks(problems));
    run.tasks_s = Since(start);
    run.unit_tasks = static_cast<int64_t>(tasks.tasks.size());
    run.delivered_bytes = tasks.delivered_bytes;
    start = std::chrono::steady_clock::now();
    run.lower_bound = LowerBoundSeconds(tasks.tasks, topology);
    run.bound_s = Since(start);
  }
  start = std::chrono::steady_clock::now();
  CompareOptions only;
  only.only = Strategy::kMeshcast;
  ASSIGN_OR_RETURN(StrategyComparison comparison,
                   CompareStrategies(problems, topology, only));
  run.plan_s = Since(start);
  const StrategyEvaluation& row = comparison.rows[comparison.chosen];
  run.planner_predicted = row.predicted_seconds;
  run.transfers = static_cast<int64_t>(row.plan.transfers.size());
  run.nic_bytes = NicBytes(row.plan, topology);
  if (verify) {
    RETURN_IF_ERROR(VerifyPlan(row.plan, topology));
    run.verified = true;
  }
  start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(const v1::Plan ir, LowerReshardPlan(row.plan));
  run.lower_s = Since(start);
  start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(const PlanSimulation simulated, SimulatePlan(ir, topology));
  run.simulate_s = Since(start);
  run.predicted = simulated.seconds;
  if (!per_host_limits.empty()) {
    ASSIGN_OR_RETURN(const SimulationResult free, Simulate(row.plan, topology));
    run.most_per_host = MostTransfersAtOnceOnAHost(row.plan, topology, free);
    for (int limit : per_host_limits) {
      ReshardPlan bounded = row.plan;
      RETURN_IF_ERROR(LimitTransfersPerHost(bounded, topology, limit));
      ASSIGN_OR_RETURN(const SimulationResult sim, Simulate(bounded, topology));
      run.per_host_bounded.push_back({limit, sim.seconds});
    }
  }
  return run;
}

// The whole-parameter broadcast.
struct WholeBroadcast {
  int64_t delivered_bytes = 0;
  int64_t nic_bytes = 0;  // every inference host receives the whole model
  double bound = 0;       // lower bound of delivering whole parameters
  int buckets = 0;
  double ring = 0;        // bucketed relay chains, one after another
};

// Buckets of `bucket_bytes` (the last one smaller), each a relay chain from
// a training GPU (round robin over the training hosts) through every
// inference GPU in device order, each after the previous one: the flow
// engine's time for it.
absl::StatusOr<double> RingBroadcastSeconds(int64_t model_bytes,
                                            int64_t bucket_bytes,
                                            const Fleet& fleet,
                                            const Topology& topology,
                                            int& buckets) {
  const NetworkResources resources(topology);
  FlowProblem problem(resources.Capacities(topology));
  std::vector<int> ring;
  for (int d = fleet.train_gpus(); d < topology.num_devices(); ++d) {
    ring.push_back(d);
  }
  buckets = 0;
  std::vector<int> uses;
  for (int64_t offset = 0; offset < model_bytes; offset += bucket_bytes) {
    const int64_t bytes = std::min(bucket_bytes, model_bytes - offset);
    const int src = (buckets % fleet.train_hosts()) * fleet.gpus;
    std::vector<int> deps;
    if (buckets > 0) deps.push_back(buckets - 1);
    problem.AddTask(topology.transfer_setup_seconds, deps);
    uses.clear();
    const RelayTail tail =
        AppendRelayChain(topology, resources, src, ring, bytes, uses);
    problem.AddFlow(static_cast<double>(bytes), uses);
    problem.SetTail(tail);
    ++buckets;
  }
  ASSIGN_OR_RETURN(const FlowSchedule schedule, RunFlows(problem));
  return schedule.seconds;
}

absl::StatusOr<WholeBroadcast> RunWholeBroadcast(
    const std::vector<WeightTensor>& weights, int64_t model_bytes,
    const Fleet& fleet, const Topology& topology) {
  WholeBroadcast out;
  {
    ASSIGN_OR_RETURN(const std::vector<ReshardProblem> problems,
                     Problems(weights, fleet, topology, /*whole=*/true));
    ASSIGN_OR_RETURN(const TaskSet tasks, AllUnitTasks(problems));
    out.delivered_bytes = tasks.delivered_bytes;
    out.bound = LowerBoundSeconds(tasks.tasks, topology);
  }
  out.nic_bytes = model_bytes * fleet.replicas * fleet.replica_hosts;
  const int64_t bucket =
      static_cast<int64_t>(fleet.bucket_gib * (int64_t{1} << 30));
  ASSIGN_OR_RETURN(out.ring, RingBroadcastSeconds(model_bytes, bucket, fleet,
                                                  topology, out.buckets));
  return out;
}

std::string Ratio(double a, double b) {
  return a > 0 && b > 0 ? absl::StrFormat("%.4f", a / b) : "-";
}

std::string Decimal(int64_t bytes) {  // "2.053 TB"
  return absl::StrFormat("%.3f TB", static_cast<double>(bytes) / 1e12);
}

void PrintHeader(const MoeModelShape& shape, int64_t tensors,
                 const Fleet& fleet, const Topology& topology) {
  const int64_t params = shape.NumParams();
  std::cout << "# model " << shape.Describe() << "\n"
            << absl::StrFormat(
                   "# parameters: %d (%.4f T), %s in %s, %d tensors\n", params,
                   params / 1e12, Decimal(shape.NumBytes()),
                   DTypeName(shape.dtype), tensors)
            << "# fleet: " << fleet.Describe() << "\n"
            << absl::StrFormat(
                   "# links: NIC %g Gbit/s per host each way (%g GB/s), "
                   "NVLink %g GB/s per GPU each way; latency %g us between "
                   "hosts, %g us inside; relay chunk %s\n",
                   fleet.nic_gbps, fleet.nic_gbps / 8, fleet.nvlink_gbps / 8,
                   topology.inter_host_latency * 1e6,
                   topology.intra_host_latency * 1e6,
                   FormatBytes(topology.pipeline_chunk_bytes))
            << "# layouts: training: routed experts by expert over ep and "
               "ffn over tp, the rest tensor-parallel over tp (MLA "
               "down-projections, router, norms replicated), replicated "
               "over dp; inference: routed experts by expert over the "
               "replica's GPUs, the rest tensor-parallel over a host's "
               "GPUs, replicated over its hosts\n";
}

void PrintTable(const MeshcastRun& mc, const WholeBroadcast& whole,
                const Fleet& fleet, int64_t model_bytes) {
  TextTable table({"strategy", "delivered", "NIC bytes", "predicted (s)",
                   "x lower bound", "x meshcast"},
                  {TextTable::kLeft});
  auto add = [&](const std::string& name, const std::string& delivered,
                 const std::string& nic, double seconds) {
    table.AddRow({name, delivered, nic, absl::StrFormat("%.4f", seconds),
                  Ratio(seconds, mc.lower_bound),
                  Ratio(seconds, mc.predicted)});
  };
  add("lower bound", Decimal(mc.delivered_bytes), "-", mc.lower_bound);
  add("meshcast", Decimal(mc.delivered_bytes), Decimal(mc.nic_bytes),
      mc.predicted);
  for (const auto& [limit, seconds] : mc.per_host_bounded) {
    add(absl::StrFormat("meshcast, <= %d transfers per host", limit),
        Decimal(mc.delivered_bytes), Decimal(mc.nic_bytes), seconds);
  }
  add("whole broadcast, bound", Decimal(whole.delivered_bytes),
      Decimal(whole.nic_bytes), whole.bound);
  add(absl::StrFormat("whole broadcast, ring (%d x %g GiB)", whole.buckets,
                      fleet.bucket_gib),
      Decimal(whole.delivered_bytes), Decimal(whole.nic_bytes), whole.ring);
  add("checkpoint-engine (published)", "-", "-", kCheckpointEngineSeconds);
  std::cout << "#\n# delivered = bytes written into inference GPUs; NIC "
               "bytes = bytes entering hosts through their NICs (model "
            << Decimal(model_bytes) << ")\n";
  if (!mc.per_host_bounded.empty()) {
    std::cout << "# <= N transfers per host: the same plan with each host's "
                 "transfers in N dependency chains (reshard_model."
                 "max_transfers_per_host), which bounds a worker's relay "
                 "staging and threads; unbounded, a host runs up to "
              << mc.most_per_host << " at once\n";
  }
  std::cout << table.Render();
}

void PrintPlanning(const MeshcastRun& mc) {
  std::cout << absl::StrFormat(
      "# planning (the whole model in one request, no per-layer "
      "extrapolation): %d tensors, %d unit tasks %s, lower bound %s, "
      "meshcast plan + its simulation %s (%d transfers), lowering to the "
      "plan IR %s, plan simulator %s; total %s, peak memory %s\n",
      mc.tensors, mc.unit_tasks, FormatSeconds(mc.tasks_s),
      FormatSeconds(mc.bound_s), FormatSeconds(mc.plan_s), mc.transfers,
      FormatSeconds(mc.lower_s), FormatSeconds(mc.simulate_s),
      FormatSeconds(mc.tasks_s + mc.bound_s + mc.plan_s + mc.lower_s +
                    mc.simulate_s),
      FormatBytes(static_cast<double>(PeakRssBytes())));
}

void PrintSummary(const MeshcastRun& mc, const WholeBroadcast& whole) {
  std::cout << absl::StrFormat(
      "# Summary: meshcast %.3f s predicted, %.2f%% over the lower bound "
      "(%.3f s); %.1fx faster than the whole broadcast's bound (%.3f s), "
      "%.1fx than its ring (%.3f s); checkpoint-engine publishes ~%.0f s "
      "(%.0fx meshcast's prediction, other hardware, end to end)\n",
      mc.predicted, (mc.predicted / mc.lower_bound - 1) * 100,
      mc.lower_bound, whole.bound / mc.predicted, whole.bound,
      whole.ring / mc.predicted, whole.ring, kCheckpointEngineSeconds,
      kCheckpointEngineSeconds / mc.predicted);
}

// Structural checks of --check; the failures, one per line.
std::vector<std::string> Check(const MoeModelShape& shape,
                               const MeshcastRun& mc,
                               const WholeBroadcast& whole, bool verified) {
  std::vector<std::string> failures;
  const int64_t params = shape.NumParams();
  if (shape.name == "kimi-k2" && (params < 1.00e12 || params > 1.05e12)) {
    failures.push_back(absl::StrCat("parameter count ", params,
                                    " is not within 1.00T..1.05T"));
  }
  constexpr double kSlack = 1 - 1e-9;
  for (const auto& [name, seconds] :
       std::vector<std::pair<std::string, double>>{
           {"meshcast", mc.predicted},
           {"whole broadcast, bound", whole.bound},
           {"whole broadcast, ring", whole.ring}}) {
    if (!(seconds >= mc.lower_bound * kSlack)) {
      failures.push_back(absl::StrCat(name, " is below the lower bound"));
    }
  }
  for (const auto& [limit, seconds] : mc.per_host_bounded) {
    if (!(seconds >= mc.lower_bound * kSlack)) {
      failures.push_back(absl::StrCat("meshcast with <= ", limit,
                                      " transfers per host is below the "
                                      "lower bound"));
    }
  }
  if (!(whole.ring >= whole.bound * kSlack)) {
    failures.push_back("the whole broadcast's ring beats its own bound");
  }
  if (std::abs(mc.predicted - mc.planner_predicted) >
      1e-6 * mc.planner_predicted) {
    failures.push_back(absl::StrFormat(
        "the plan simulator (%.9f s) and the planner (%.9f s) disagree",
        mc.predicted, mc.planner_predicted));
  }
  if (verified && !mc.verified) failures.push_back("the plan was not verified");
  return failures;
}

struct Options {
  Fleet fleet;
  bool quick = false;
  bool scales = false;
  bool check = false;
  std::string per_host;  // --per-host
  std::vector<int> per_host_limits;
};

// One fleet: the header, the table, the planning line and the summary.
absl::Status RunFleet(const Options& options) {
  const Fleet& fleet = options.fleet;
  RETURN_IF_ERROR(fleet.Validate());
  const MoeModelShape shape = MoeModelShape::KimiK2();
  RETURN_IF_ERROR(shape.Validate());
  const Topology topology = FleetTopology(fleet);
  const std::vector<WeightTensor> weights = ModelWeights(shape);
  PrintHeader(shape, static_cast<int64_t>(weights.size()), fleet, topology);
  MeshcastRun mc;
  {
    ASSIGN_OR_RETURN(const std::vector<ReshardProblem> problems,
                     Problems(weights, fleet, topology, /*whole=*/false));
    ASSIGN_OR_RETURN(
        mc, RunMeshcast(problems, topology,
                        /*verify=*/options.quick, options.per_host_limits));
  }
  ASSIGN_OR_RETURN(const WholeBroadcast whole,
                   RunWholeBroadcast(weights, shape.NumBytes(), fleet,
                                     topology));
  PrintTable(mc, whole, fleet, shape.NumBytes());
  PrintPlanning(mc);
  PrintSummary(mc, whole);
  if (!options.check) return absl::OkStatus();
  const std::vector<std::string> failures =
      Check(shape, mc, whole, options.quick);
  for (const std::string& f : failures) std::cout << "# CHECK FAILED: " << f << "\n";
  if (!failures.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(failures.size(), " structural checks failed"));
  }
  std::cout << "# checks: ok (parameter count, every ratio >= 1, plan "
               "simulator == planner"
            << (options.quick ? ", plan verified" : "") << ")\n";
  return absl::OkStatus();
}

// The fleet grown step by step to the frontier one (every count scaled
// together): the ratios at each size.
absl::Status RunScales(const Fleet& frontier) {
  const MoeModelShape shape = MoeModelShape::KimiK2();
  const std::vector<WeightTensor> weights = ModelWeights(shape);
  std::cout << "# scales: " << shape.name << " ("
            << Decimal(shape.NumBytes())
            << "), the fleet grown to the frontier one; links as above\n";
  TextTable table({"training", "replicas", "GPUs", "lower bound (s)",
                   "meshcast (s)", "x lower bound", "whole bound (s)",
                   "whole ring (s)", "ring x meshcast", "planning (s)"},
                  {TextTable::kLeft, TextTable::kLeft});
  for (int div : {8, 4, 2, 1}) {
    Fleet fleet = frontier;
    fleet.dp = std::max(1, frontier.dp / div);
    fleet.ep = std::max(1, frontier.ep / div);
    fleet.replica_hosts = std::max(1, frontier.replica_hosts / div);
    fleet.replicas = std::max(1, frontier.replicas / std::min(div, 4));
    const Topology topology = FleetTopology(fleet);
    ASSIGN_OR_RETURN(const std::vector<ReshardProblem> problems,
                     Problems(weights, fleet, topology, false));
    ASSIGN_OR_RETURN(const MeshcastRun mc,
                     RunMeshcast(problems, topology, false));
    ASSIGN_OR_RETURN(const WholeBroadcast whole,
                     RunWholeBroadcast(weights, shape.NumBytes(), fleet,
                                       topology));
    table.AddRow(
        {absl::StrFormat("%dx%dx%d", fleet.dp, fleet.ep, fleet.gpus),
         absl::StrFormat("%d x %dx%d", fleet.replicas, fleet.replica_hosts,
                         fleet.gpus),
         absl::StrCat(fleet.train_gpus() + fleet.inference_gpus()),
         absl::StrFormat("%.4f", mc.lower_bound),
         absl::StrFormat("%.4f", mc.predicted),
         Ratio(mc.predicted, mc.lower_bound),
         absl::StrFormat("%.4f", whole.bound),
         absl::StrFormat("%.4f", whole.ring), Ratio(whole.ring, mc.predicted),
         absl::StrFormat("%.2f", mc.tasks_s + mc.bound_s + mc.plan_s +
                                     mc.lower_s + mc.simulate_s)});
  }
  std::cout << table.Render();
  return absl::OkStatus();
}

int Main(const std::vector<std::string>& args) {
  Options options;
  Fleet& fleet = options.fleet;
  cli::FlagSet flags(
      "weights_bench",
      "A 1T-parameter MoE model (Kimi K2's shapes, bfloat16) moved from a\n"
      "training fleet to inference replicas, simulated: the lower bound,\n"
      "meshcast's plan, and a whole-parameter broadcast.");
  flags.Bool("quick", &options.quick,
             "a small fleet (2x4x8 training, 2 replicas of 2x8), with every "
             "plan verified");
  flags.Bool("scales", &options.scales,
             "also the ratios on fleets 1/8, 1/4, 1/2 of the frontier one");
  flags.Bool("check", &options.check,
             "exit non-zero when a structural check fails");
  flags.Int("dp", &fleet.dp, "N", "data-parallel groups of training hosts");
  flags.Int("ep", &fleet.ep, "N", "expert-parallel hosts per group");
  flags.Int("gpus", &fleet.gpus, "N", "GPUs per host (the tp axis)");
  flags.Int("replica-hosts", &fleet.replica_hosts, "N",
            "hosts per inference replica");
  flags.Int("replicas", &fleet.replicas, "N", "inference replicas");
  flags.Double("nic-gbps", &fleet.nic_gbps, "GBPS",
               "a host's NIC bandwidth each way, Gbit/s (all its NICs)");
  flags.Double("nvlink-gbps", &fleet.nvlink_gbps, "GBPS",
               "a GPU's NVLink bandwidth each way, Gbit/s");
  flags.Double("bucket-gib", &fleet.bucket_gib, "GIB",
               "the whole broadcast's bucket, GiB");
  flags.String("per-host", &options.per_host, "N,...",
               "also meshcast's plan with at most N transfers touching a "
               "host at once, for each N (about a minute each at the "
               "frontier fleet; default: none)");
  absl::Status parsed = flags.Parse(args);
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  if (!parsed.ok() || !flags.positional().empty()) {
    std::cerr << "weights_bench: "
              << (parsed.ok() ? "unexpected argument " + flags.positional()[0]
                              : std::string(parsed.message()))
              << "\n";
    return 2;
  }
  for (absl::string_view item :
       absl::StrSplit(options.per_host, ',', absl::SkipWhitespace())) {
    int limit = 0;
    if (!absl::SimpleAtoi(item, &limit) || limit < 1) {
      std::cerr << "weights_bench: --per-host '" << options.per_host
                << "': allowed: a comma-separated list of counts >= 1\n";
      return 2;
    }
    options.per_host_limits.push_back(limit);
  }
  if (options.quick) {
    for (auto [name, target, value] :
         {std::tuple{"dp", &fleet.dp, 2}, std::tuple{"ep", &fleet.ep, 4},
          std::tuple{"replica-hosts", &fleet.replica_hosts, 2},
          std::tuple{"replicas", &fleet.replicas, 2}}) {
      if (!flags.IsSet(name)) *target = value;
    }
  }
  absl::Status status = RunFleet(options);
  if (status.ok() && options.scales) status = RunScales(fleet);
  if (!status.ok()) {
    std::cerr << "weights_bench: " << status << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace meshcast::bench

int main(int argc, char** argv) {
  return meshcast::bench::Main(std::vector<std::string>(argv + 1, argv + argc));
}
