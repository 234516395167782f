// reshard_plan_bench: the cross-mesh resharding paper's public microbenchmark
// suite under the planner's cost model, and the planner's own speed.
//
// Suite: every case of bench/workloads/public_suite.txt (cases 1-7 and 9 of
// docs/conventions.md plus the 1-to-m broadcasts; --public-suite or
// $MESHCAST_PUBLIC_SUITE name another copy of the file), under two
// host models (the paper's testbed: 4 GPUs and a 10 Gbps NIC per host; and
// 8 GPUs with a 100 Gbps NIC). The source mesh starts at host 0 and the
// destination mesh on the next free host. For every case it prints each
// strategy's predicted time and effective bandwidth (tensor bits / time, as
// the paper plots), the lower bound, and meshcast's time relative to the
// lower bound, broadcast_lb and send_recv.
//
// Speed: plans a 128x8 -> 128x8 transpose of a 65536x65536 bf16 tensor
// (S0,S1 -> S1,S0, about 16K unit tasks) and reports the wall time of each
// step and the peak resident memory.
//
// Broadcast: one device to every device of 4 ... 256 hosts, 1 to 256 MiB:
// meshcast against the lower bound and against one relay chain through
// every device (NCCL's ring broadcast), on both host models.
//
// Scaling: the same transpose at N x 8 -> N x 8 for N = 8, 16, ... up to
// --max-n, each size in a child process of its own (so that its peak
// resident memory is its own): unit tasks, lower bound, the meshcast plan
// and its simulation, timed, with the growth exponent fitted to the total
// (time ~ T^k over the unit tasks T).
//
// Exit status is non-zero only on errors (planning failures, bad flags);
// the ratios are reported, and checked by tests elsewhere.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/workloads/public_suite.h"
#include "cli/command_errors.h"
#include "cli/flags.h"
#include "cli/text_table.h"
#include "planner/cost_model.h"
#include "planner/mesh.h"
#include "planner/plan.h"
#include "planner/sharding.h"
#include "planner/strategy.h"
#include "planner/tensor.h"
#include "planner/topology.h"
#include "planner/unit_task.h"
#include "util/status_macros.h"

namespace meshcast::bench {
namespace {

using cli::FormatBytes;
using cli::FormatSeconds;
using cli::TextTable;

struct HostModel {
  std::string name;
  Topology topology;
};

absl::StatusOr<ReshardProblem> BuildProblem(const PublicSuiteCase& c,
                                            const Topology& topology) {
  ReshardProblem problem;
  problem.tensor = TensorSpec{c.shape, DType::kInt32};
  ASSIGN_OR_RETURN(problem.src_mesh,
                   ParseMesh(c.src_mesh.At(0), topology, "src mesh"));
  ASSIGN_OR_RETURN(
      problem.dst_mesh,
      ParseMesh(c.dst_mesh.At(c.dst_first_host()), topology, "dst mesh"));
  ASSIGN_OR_RETURN(problem.src_spec, ShardingSpec::Parse(c.src_spec));
  ASSIGN_OR_RETURN(problem.dst_spec, ShardingSpec::Parse(c.dst_spec));
  RETURN_IF_ERROR(problem.Validate(topology));
  return problem;
}

double Gbps(int64_t bytes, double seconds) {
  return seconds > 0 ? bytes * 8.0 / seconds / 1e9 : 0;
}

struct SuiteSummary {
  int cases = 0;
  double worst_lb_ratio = 0;  // max meshcast / lower bound
  std::string worst_lb_case;
  double min_speedup_vs_blb = 1e300;  // min broadcast_lb / meshcast
  double max_speedup_vs_blb = 0;
  double min_speedup_vs_sr = 1e300;  // min send_recv / meshcast
  double max_speedup_vs_sr = 0;
  int slower_than_blb = 0;
};

absl::Status RunSuite(const std::vector<PublicSuiteCase>& suite,
                      const HostModel& model, SuiteSummary& summary) {
  const std::vector<Strategy> strategies = ConcreteStrategies();
  std::vector<std::string> time_header = {"case", "meshes", "specs", "tensor",
                                          "lower bound"};
  std::vector<std::string> gbps_header = {"case", "lower bound"};
  for (Strategy s : strategies) {
    time_header.push_back(StrategyName(s));
    gbps_header.push_back(StrategyName(s));
  }
  for (const char* h : {"mc/LB", "mc/bLB", "mc/s_r"}) gbps_header.push_back(h);
  TextTable times(time_header, {TextTable::kLeft, TextTable::kLeft,
                                TextTable::kLeft, TextTable::kRight});
  TextTable gbps(gbps_header, {TextTable::kLeft});

  for (const PublicSuiteCase& c : suite) {
    ASSIGN_OR_RETURN(ReshardProblem problem, BuildProblem(c, model.topology));
    absl::StatusOr<StrategyComparison> comparison =
        CompareStrategies({problem}, model.topology);
    if (!comparison.ok()) {
      return absl::Status(comparison.status().code(),
                          absl::StrCat(model.name, " ", c.name, ": ",
                                       comparison.status().message()));
    }
    for (const StrategyEvaluation& row : comparison->rows) {
      absl::Status valid = VerifyPlan(row.plan, model.topology);
      if (!valid.ok()) {
        return absl::InternalError(absl::StrCat(
            model.name, " ", c.name, ": the ", StrategyName(row.strategy),
            " plan is invalid: ", valid.message()));
      }
    }
    const int64_t bytes = problem.tensor.num_bytes();
    double lower_bound = 0;
    double t_meshcast = 0, t_blb = 0, t_sr = 0;
    std::vector<std::string> time_row = {
        c.name,
        absl::StrFormat("(%d,%d)->(%d,%d)", c.src_mesh.hosts,
                        c.src_mesh.devices_per_host, c.dst_mesh.hosts,
                        c.dst_mesh.devices_per_host),
        absl::StrCat(c.src_spec, "->", c.dst_spec), FormatBytes(bytes)};
    std::vector<std::string> gbps_row = {c.name};
    std::vector<std::string> time_cells, gbps_cells;
    for (Strategy s : strategies) {
      const StrategyEvaluation* row = nullptr;
      for (const StrategyEvaluation& r : comparison->rows) {
        if (r.strategy == s) row = &r;
      }
      if (row == nullptr) {
        time_cells.push_back("-");
        gbps_cells.push_back("-");
        continue;
      }
      lower_bound = std::max(lower_bound, row->lower_bound_seconds);
      time_cells.push_back(absl::StrFormat("%.4f", row->predicted_seconds));
      gbps_cells.push_back(
          absl::StrFormat("%.2f", Gbps(bytes, row->predicted_seconds)));
      if (s == Strategy::kMeshcast) t_meshcast = row->predicted_seconds;
      if (s == Strategy::kBroadcastLb) t_blb = row->predicted_seconds;
      if (s == Strategy::kSendRecv) t_sr = row->predicted_seconds;
    }
    time_row.push_back(absl::StrFormat("%.4f", lower_bound));
    time_row.insert(time_row.end(), time_cells.begin(), time_cells.end());
    gbps_row.push_back(absl::StrFormat("%.2f", Gbps(bytes, lower_bound)));
    gbps_row.insert(gbps_row.end(), gbps_cells.begin(), gbps_cells.end());
    const double lb_ratio = lower_bound > 0 ? t_meshcast / lower_bound : 1;
    gbps_row.push_back(absl::StrFormat("%.4f", lb_ratio));
    gbps_row.push_back(absl::StrFormat("%.4f", t_meshcast / t_blb));
    gbps_row.push_back(absl::StrFormat("%.4f", t_meshcast / t_sr));
    times.AddRow(time_row);
    gbps.AddRow(gbps_row);

    ++summary.cases;
    if (lb_ratio > summary.worst_lb_ratio) {
      summary.worst_lb_ratio = lb_ratio;
      summary.worst_lb_case = absl::StrCat(model.name, " ", c.name);
    }
    const double vs_blb = t_blb / t_meshcast;
    const double vs_sr = t_sr / t_meshcast;
    summary.min_speedup_vs_blb = std::min(summary.min_speedup_vs_blb, vs_blb);
    summary.max_speedup_vs_blb = std::max(summary.max_speedup_vs_blb, vs_blb);
    summary.min_speedup_vs_sr = std::min(summary.min_speedup_vs_sr, vs_sr);
    summary.max_speedup_vs_sr = std::max(summary.max_speedup_vs_sr, vs_sr);
    // A relative tolerance absorbs floating-point noise between equal plans.
    if (t_meshcast > t_blb * (1 + 1e-9)) ++summary.slower_than_blb;
  }
  std::cout << "# " << model.name << ": " << model.topology.ToString() << "\n";
  std::cout << "# predicted time (s)\n" << times.Render("  ") << "\n";
  std::cout << "# effective bandwidth (Gbps = tensor bits / predicted time); "
               "mc/X = meshcast time / X time (mc/LB >= 1; < 1 is faster)\n"
            << gbps.Render("  ") << "\n";
  return absl::OkStatus();
}

// One long broadcast: a tensor on one device for every device of `hosts`
// other hosts.
absl::StatusOr<ReshardProblem> BroadcastProblem(int64_t bytes, int hosts,
                                                const Topology& topology) {
  ReshardProblem problem;
  problem.tensor = TensorSpec{{bytes / 4}, DType::kInt32};
  ASSIGN_OR_RETURN(problem.src_mesh, ParseMesh("1x1@0", topology, "src mesh"));
  ASSIGN_OR_RETURN(
      problem.dst_mesh,
      ParseMesh(absl::StrCat(hosts, "x", topology.devices_per_host, "@1"),
                topology, "dst mesh"));
  ASSIGN_OR_RETURN(problem.src_spec, ShardingSpec::Parse("R"));
  ASSIGN_OR_RETURN(problem.dst_spec, ShardingSpec::Parse("R"));
  RETURN_IF_ERROR(problem.Validate(topology));
  return problem;
}

// Planned and simulated with one strategy only.
absl::StatusOr<StrategyEvaluation> PlanOnly(const ReshardProblem& problem,
                                            const Topology& topology,
                                            Strategy strategy) {
  ASSIGN_OR_RETURN(
      StrategyComparison comparison,
      CompareStrategies({problem}, topology, CompareOptions{.only = strategy}));
  RETURN_IF_ERROR(VerifyPlan(comparison.rows[0].plan, topology));
  return std::move(comparison.rows[0]);
}

// Broadcasts from one device to every device of many hosts: meshcast (a
// chain, or split into pieces that each host sends on, in rounds) against
// the lower bound and against one relay chain through every device in
// order, as NCCL's ring broadcast runs it (the `broadcast` strategy).
absl::Status RunBroadcasts(int max_hosts) {
  struct Model {
    std::string name;
    int gpus;
    double nic_gbps, nvlink_gbps;
  };
  std::vector<double> speedups;
  double worst = 0;
  std::string worst_row;
  int within = 0, rows = 0;
  for (const Model& model :
       {Model{"4 GPUs + 10 Gbps per host", 4, 10, 1200},
        Model{"8 GPUs + 100 Gbps per host", 8, 100, 2400}}) {
    TextTable table({"tensor", "hosts", "lower bound", "meshcast", "x bound",
                     "transfers", "ring", "x bound", "ring/meshcast"},
                    {TextTable::kRight});
    for (int64_t mib : {1, 16, 256}) {
      for (int hosts : {4, 8, 16, 64, 256}) {
        if (hosts > max_hosts) continue;
        const Topology topology = Topology::FromGbps(
            hosts + 1, model.gpus, model.nic_gbps, model.nvlink_gbps);
        ASSIGN_OR_RETURN(const ReshardProblem problem,
                         BroadcastProblem(mib << 20, hosts, topology));
        ASSIGN_OR_RETURN(const StrategyEvaluation ours,
                         PlanOnly(problem, topology, Strategy::kMeshcast));
        ASSIGN_OR_RETURN(const StrategyEvaluation ring,
                         PlanOnly(problem, topology, Strategy::kBroadcast));
        const double bound = ours.lower_bound_seconds;
        const double ratio = ours.predicted_seconds / bound;
        table.AddRow({absl::StrCat(mib, " MiB"), absl::StrCat(hosts),
                      FormatSeconds(bound),
                      FormatSeconds(ours.predicted_seconds),
                      absl::StrFormat("%.3f", ratio),
                      absl::StrCat(ours.plan.transfers.size()),
                      FormatSeconds(ring.predicted_seconds),
                      absl::StrFormat("%.2f", ring.predicted_seconds / bound),
                      absl::StrFormat("%.2fx", ring.predicted_seconds /
                                                   ours.predicted_seconds)});
        speedups.push_back(ring.predicted_seconds / ours.predicted_seconds);
        ++rows;
        if (ratio <= 1.02) ++within;
        if (ratio > worst) {
          worst = ratio;
          worst_row =
              absl::StrCat(mib, " MiB to ", hosts, " hosts, ", model.name);
        }
      }
    }
    std::cout << "# broadcast from one device to every device of H hosts, "
              << model.name << " (latency 10 us between hosts, relay "
              << "chunk 1 MiB)\n"
              << table.Render("  ") << "\n";
  }
  double log_sum = 0;
  for (double speedup : speedups) log_sum += std::log(speedup);
  std::cout << absl::StrFormat(
      "summary: meshcast within 2%% of the lower bound on %d of %d "
      "broadcasts (worst %.3fx: %s); %.2fx faster than one ring (geomean)"
      "\n\n",
      within, rows, worst, worst_row,
      speedups.empty() ? 0.0 : std::exp(log_sum / speedups.size()));
  return absl::OkStatus();
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

int64_t PeakRssBytes() {
  struct rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // KiB on Linux
}

absl::Status RunSpeed(bool verify) {
  Topology topology = Topology::FromGbps(256, 8, 100, 2400);
  ReshardProblem problem;
  problem.tensor = TensorSpec{{65536, 65536}, DType::kBFloat16};
  ASSIGN_OR_RETURN(problem.src_mesh, ParseMesh("128x8@0", topology));
  ASSIGN_OR_RETURN(problem.dst_mesh, ParseMesh("128x8@128", topology));
  ASSIGN_OR_RETURN(problem.src_spec, ShardingSpec::Parse("S0,S1"));
  ASSIGN_OR_RETURN(problem.dst_spec, ShardingSpec::Parse("S1,S0"));
  RETURN_IF_ERROR(problem.Validate(topology));

  TextTable table({"step", "wall time", "result"},
                  {TextTable::kLeft, TextTable::kRight, TextTable::kLeft});
  auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<UnitTask> tasks, ComputeUnitTasks(problem));
  const double t_tasks = Seconds(start);
  table.AddRow({"unit tasks", FormatSeconds(t_tasks),
                absl::StrCat(tasks.size(), " tasks")});

  start = std::chrono::steady_clock::now();
  const double lower_bound = LowerBoundSeconds(tasks, topology);
  table.AddRow({"lower bound", FormatSeconds(Seconds(start)),
                FormatSeconds(lower_bound)});

  start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(ReshardPlan plan,
                   PlanReshard({problem}, topology, Strategy::kMeshcast));
  const double t_plan = Seconds(start);
  table.AddRow({"plan (meshcast)", FormatSeconds(t_plan),
                absl::StrCat(plan.transfers.size(), " transfers")});

  start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(SimulationResult simulated, Simulate(plan, topology));
  const double t_simulate = Seconds(start);
  table.AddRow({"simulate (meshcast)", FormatSeconds(t_simulate),
                absl::StrFormat("%s predicted, %.4f x lower bound",
                                FormatSeconds(simulated.seconds),
                                simulated.seconds / lower_bound)});

  if (verify) {
    start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(VerifyPlan(plan, topology));
    table.AddRow({"verify (meshcast)", FormatSeconds(Seconds(start)), "ok"});
  }

  start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(ReshardPlan best,
                   PlanReshard({problem}, topology, Strategy::kAuto));
  table.AddRow({"plan (auto: every strategy + simulate)",
                FormatSeconds(Seconds(start)),
                absl::StrCat("chose ", best.strategy)});

  const double t_total = t_tasks + t_plan + t_simulate;
  std::cout << "# planning speed: 128x8 -> 128x8 meshes on "
            << topology.ToString() << "\n"
            << "# tensor 65536x65536 bfloat16 ("
            << FormatBytes(problem.tensor.num_bytes()) << "), S0,S1 -> S1,S0\n"
            << table.Render("  ")
            << absl::StrFormat(
                   "  unit tasks + plan + simulate (meshcast): %s (target < 1 "
                   "s); peak memory (ru_maxrss): %s\n\n",
                   FormatSeconds(t_total),
                   FormatBytes(static_cast<double>(PeakRssBytes())));
  return absl::OkStatus();
}

// One size of the scaling section, measured in this process.
struct ScalingRow {
  int n = 0;
  int64_t tasks = 0;
  double tasks_s = 0, bound_s = 0, plan_s = 0, simulate_s = 0;
  double predicted_over_bound = 0;
  int64_t peak_rss = 0;
  bool ok = false;
};

ScalingRow MeasureScaling(int n) {
  ScalingRow row;
  row.n = n;
  const Topology topology = Topology::FromGbps(2 * n, 8, 100, 2400);
  ReshardProblem problem;
  problem.tensor = TensorSpec{{65536, 65536}, DType::kBFloat16};
  absl::StatusOr<DeviceMesh> src =
      ParseMesh(absl::StrCat(n, "x8@0"), topology);
  absl::StatusOr<DeviceMesh> dst =
      ParseMesh(absl::StrCat(n, "x8@", n), topology);
  if (!src.ok() || !dst.ok()) return row;
  problem.src_mesh = *src;
  problem.dst_mesh = *dst;
  problem.src_spec = *ShardingSpec::Parse("S0,S1");
  problem.dst_spec = *ShardingSpec::Parse("S1,S0");
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<UnitTask>> tasks = ComputeUnitTasks(problem);
  if (!tasks.ok()) return row;
  row.tasks_s = Seconds(start);
  row.tasks = static_cast<int64_t>(tasks->size());
  start = std::chrono::steady_clock::now();
  const double bound = LowerBoundSeconds(*tasks, topology);
  row.bound_s = Seconds(start);
  tasks->clear();
  tasks->shrink_to_fit();
  start = std::chrono::steady_clock::now();
  absl::StatusOr<ReshardPlan> plan =
      PlanReshard({problem}, topology, Strategy::kMeshcast);
  if (!plan.ok()) return row;
  row.plan_s = Seconds(start);
  start = std::chrono::steady_clock::now();
  absl::StatusOr<SimulationResult> simulated = Simulate(*plan, topology);
  if (!simulated.ok()) return row;
  row.simulate_s = Seconds(start);
  row.predicted_over_bound = simulated->seconds / bound;
  row.peak_rss = PeakRssBytes();
  row.ok = true;
  return row;
}

// MeasureScaling(n) in a child process; the row comes back over a pipe.
ScalingRow MeasureScalingApart(int n) {
  ScalingRow row;
  row.n = n;
  int fds[2];
  if (pipe(fds) != 0) return row;
  const pid_t pid = fork();
  if (pid < 0) return row;
  if (pid == 0) {
    close(fds[0]);
    const ScalingRow measured = MeasureScaling(n);
    const ssize_t wrote = write(fds[1], &measured, sizeof(measured));
    _exit(wrote == sizeof(measured) ? 0 : 1);
  }
  close(fds[1]);
  ScalingRow got;
  const ssize_t read_bytes = read(fds[0], &got, sizeof(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return read_bytes == sizeof(got) ? got : row;
}

absl::Status RunScaling(int max_n) {
  const Topology shown = Topology::FromGbps(2, 8, 100, 2400);
  std::cout << "# planning scaling: N x 8 -> N x 8 transpose (S0,S1 -> "
               "S1,S0) of a 65536x65536 bfloat16 tensor, meshcast, "
            << shown.ToString().substr(shown.ToString().find(',') + 2)
            << "\n";
  TextTable table({"N", "unit tasks", "tasks", "bound", "plan", "simulate",
                   "total", "x lower bound", "peak memory"},
                  {TextTable::kRight});
  std::vector<std::pair<double, double>> fit;  // (log T, log total)
  for (int n = 8; n <= max_n; n *= 2) {
    const ScalingRow row = MeasureScalingApart(n);
    if (!row.ok) {
      return absl::InternalError(absl::StrCat("scaling N=", n, " failed"));
    }
    const double total = row.tasks_s + row.bound_s + row.plan_s + row.simulate_s;
    table.AddRow({absl::StrCat(n), absl::StrCat(row.tasks),
                  FormatSeconds(row.tasks_s), FormatSeconds(row.bound_s),
                  FormatSeconds(row.plan_s), FormatSeconds(row.simulate_s),
                  FormatSeconds(total),
                  absl::StrFormat("%.4f", row.predicted_over_bound),
                  FormatBytes(static_cast<double>(row.peak_rss))});
    // Small sizes are dominated by fixed costs; fit where time has grown.
    if (total > 0.01) fit.push_back({std::log(row.tasks), std::log(total)});
  }
  std::cout << table.Render("  ");
  double k = 0;
  if (fit.size() >= 2) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const auto& [x, y] : fit) {
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
    }
    const double m = static_cast<double>(fit.size());
    k = (m * sxy - sx * sy) / (m * sxx - sx * sx);
  }
  std::cout << absl::StrFormat(
      "  growth: total time ~ T^%.2f over the unit tasks T (fitted on %d "
      "sizes above 10 ms)\n\n",
      k, static_cast<int>(fit.size()));
  return absl::OkStatus();
}

int Main(const std::vector<std::string>& args) {
  std::string only = "all";
  bool verify = false;
  cli::FlagSet flags(
      "reshard_plan_bench",
      "The cross-mesh resharding public suite under the cost model, and the\n"
      "planner's speed on a 128x8 -> 128x8 transpose and how it scales to\n"
      "N x 8 -> N x 8.");
  int max_n = 1024;
  std::string suite_path = DefaultPublicSuitePath();
  flags.Choice("only", &only, {"all", "suite", "broadcast", "speed", "scaling"},
               "which part to run");
  int max_hosts = 256;
  flags.Int("max-hosts", &max_hosts, "H",
            "the most receiving hosts of the broadcast section");
  flags.Int("max-n", &max_n, "N",
            "the largest N of the scaling section (N x 8 -> N x 8)");
  flags.String("public-suite", &suite_path, "FILE",
               "the public suite's cases ($MESHCAST_PUBLIC_SUITE sets the "
               "default)");
  flags.Bool("verify", &verify,
             "also time VerifyPlan on the planning-speed case (the suite "
             "verifies every plan always)");
  if (auto done = cli::ParseCommandFlags(flags, args, "reshard_plan_bench", 0,
                                         "see --help")) {
    std::cout << done->out;
    std::cerr << done->err;
    return done->exit_code;
  }
  if (only == "all" || only == "suite") {
    absl::StatusOr<std::vector<PublicSuiteCase>> suite =
        LoadPublicSuite(suite_path);
    if (!suite.ok()) {
      std::cerr << "reshard_plan_bench: " << suite.status().message() << "\n";
      return 1;
    }
    Topology testbed = Topology::FromGbps(5, 4, 10, 1200);
    Topology eight = Topology::FromGbps(5, 8, 100, 2400);
    SuiteSummary summary;
    for (const HostModel& model :
         {HostModel{"testbed: 4 GPUs + 10 Gbps per host", testbed},
          HostModel{"8 GPUs + 100 Gbps per host", eight}}) {
      absl::Status status = RunSuite(*suite, model, summary);
      if (!status.ok()) {
        std::cerr << "reshard_plan_bench: " << status << "\n";
        return 1;
      }
    }
    std::cout << absl::StrFormat(
        "summary: meshcast within %.2f%% of the lower bound on all %d cases "
        "(worst: %s); vs broadcast_lb speedup %.3fx..%.3fx (slower on %d); "
        "vs send_recv speedup %.2fx..%.2fx\n\n",
        (summary.worst_lb_ratio - 1) * 100, summary.cases,
        summary.worst_lb_case, summary.min_speedup_vs_blb,
        summary.max_speedup_vs_blb, summary.slower_than_blb,
        summary.min_speedup_vs_sr, summary.max_speedup_vs_sr);
  }
  if (only == "all" || only == "broadcast") {
    absl::Status status = RunBroadcasts(max_hosts);
    if (!status.ok()) {
      std::cerr << "reshard_plan_bench: broadcasts: " << status << "\n";
      return 1;
    }
  }
  if (only == "all" || only == "speed") {
    absl::Status status = RunSpeed(verify);
    if (!status.ok()) {
      std::cerr << "reshard_plan_bench: planning speed: " << status << "\n";
      return 1;
    }
  }
  if (only == "all" || only == "scaling") {
    absl::Status status = RunScaling(max_n);
    if (!status.ok()) {
      std::cerr << "reshard_plan_bench: planning scaling: " << status << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace meshcast::bench

int main(int argc, char** argv) {
  return meshcast::bench::Main(std::vector<std::string>(argv + 1, argv + argc));
}
