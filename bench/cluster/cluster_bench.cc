// cluster_bench: measured resharding and control-plane figures on a running
// meshcast cluster (usually a local one: `meshctl up` on 127.0.0.1), in
// tables shaped like nccl-tests' output, each with a one-line summary.
// bench/cluster/run_cluster_bench.sh starts a cluster, runs it and tears
// the cluster down; docs/benchmarks.md explains every column.
//
//   cluster_bench --sections=links --links_env=links.env   # before `up`
//   cluster_bench --controller=127.0.0.1:41234 [--memcpy_gbps=X
//       --tcp_gbps=Y] [--sections=links,reshard,control,collective]
//
// links    this machine's single-thread memcpy bandwidth and its loopback TCP
//          bandwidth (one stream, and several at once): on a local cluster
//          the intra-host and inter-host links are exactly these. With
//          --links_env it writes MEMCPY_GBPS / TCP_GBPS for `meshctl up
//          --intra-gbps / --inter-gbps`, so the controller's predictions are
//          for this machine. --memcpy_gbps / --tcp_gbps give figures measured
//          earlier instead (the script measures before the cluster starts).
// reshard  public cases of docs/conventions.md scaled to --size_mib, every strategy in
//          one run: warm-up jobs, then --repeat jobs per row, the median's
//          data-plane time (as the workers report it), bandwidth, and the
//          controller's prediction for the live topology, with their ratio.
//          Every job verifies every destination element.
// control  submit-to-done latency of a tiny job over --latency_jobs
//          sequential jobs (p50, p99), then closed-loop load from
//          --load_clients concurrent clients for --load_seconds each (jobs
//          per second), each client a gRPC connection of its own.
// collective  every op of the `collective` job kind (--collective_ops) at
//          each of --collective_sizes on one mesh of the cluster
//          (--collective_mesh, default every worker x 1 device, so every
//          byte crosses loopback TCP): warm-up jobs, then --repeat jobs of
//          --collective_iterations back-to-back collectives, the median's
//          time per iteration, algbw and busbw as nccl-tests defines them,
//          next to the topology's bound and the controller's prediction;
//          and the baseline measured in the same run: Gloo's own collective
//          between as many local processes over loopback TCP
//          (gloo_collective_baseline, --gloo_baseline), with the ratio.
//          Not in the default sections (minutes): --sections=collective.
//
// Exit status: 0 when every job succeeded and verified, 1 when a job failed
// or an RPC did, 2 on bad flags or a cluster too small for the cases, 3
// when the controller cannot be reached.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/cluster/baseline_report.h"
#include "bench/cluster/cluster_cases.h"
#include "bench/workloads/public_suite.h"
#include "bench/cluster/collective_cases.h"
#include "bench/cluster/job_client.h"
#include "bench/cluster/link_probe.h"
#include "bench/cluster/sample_stats.h"
#include "planner/strategy.h"
#include "util/status_macros.h"

ABSL_FLAG(std::string, controller, "",
          "host:port of the controller (required for reshard and control)");
ABSL_FLAG(std::string, sections, "links,reshard,control",
          "comma-separated: links, reshard, control, collective (not in the "
          "default: minutes more)");
ABSL_FLAG(std::string, links_env, "",
          "write MEMCPY_GBPS=... and TCP_GBPS=... (shell syntax) to this file");
ABSL_FLAG(double, memcpy_gbps, 0,
          "memcpy bandwidth measured earlier, Gbit/s (0 = measure it here)");
ABSL_FLAG(double, tcp_gbps, 0,
          "one-stream loopback TCP bandwidth measured earlier, Gbit/s (0 = "
          "measure it here)");
ABSL_FLAG(int64_t, memcpy_bytes, int64_t{256} << 20, "bytes per memcpy");
ABSL_FLAG(int64_t, tcp_bytes, int64_t{512} << 20,
          "bytes per TCP stream per run");
ABSL_FLAG(std::string, tcp_streams, "1,4",
          "loopback TCP stream counts to measure (the first must be 1: the "
          "topology's inter-host rate)");
ABSL_FLAG(int, link_repeats, 3, "runs per link figure (median shown)");
ABSL_FLAG(double, size_mib, 64,
          "the suite's 2 GiB tensor scaled to this many MiB (1-to-m: half)");
ABSL_FLAG(std::string, cases, "case1,case2,case3,case4,case7,1-to-m(2,2)",
          "comma-separated case names of the public suite, or all");
ABSL_FLAG(std::string, public_suite, "",
          "the public suite's file (default: $MESHCAST_PUBLIC_SUITE, else "
          "bench/workloads/public_suite.txt of the source tree)");
ABSL_FLAG(std::string, strategies, "all",
          "comma-separated strategies, or all (send_recv, local_allgather, "
          "broadcast, broadcast_lb, meshcast)");
ABSL_FLAG(int, warmup, 1, "untimed jobs per row before the timed ones");
ABSL_FLAG(int, repeat, 5, "timed jobs per row (the table shows the median)");
ABSL_FLAG(double, job_timeout, 300, "seconds one job may take");
ABSL_FLAG(int64_t, tiny_bytes, 4096, "tensor bytes of the control-plane job");
ABSL_FLAG(int, latency_jobs, 100, "sequential tiny jobs for p50/p99");
ABSL_FLAG(std::string, load_clients, "8",
          "comma-separated concurrent client counts for jobs per second");
ABSL_FLAG(double, load_seconds, 10, "seconds of load per client count");
ABSL_FLAG(std::string, collective_ops, "all",
          "comma-separated collectives for the collective section, or all "
          "(all_reduce, all_gather, reduce_scatter, all_to_all, broadcast)");
ABSL_FLAG(std::string, collective_sizes, "1MiB,16MiB,64MiB",
          "comma-separated sizes as nccl-tests counts them (per-rank output "
          "of all_reduce/all_gather, per-rank input of reduce_scatter, send "
          "buffer of all_to_all, buffer of broadcast)");
ABSL_FLAG(std::string, collective_mesh, "",
          "HOSTSxDEVICES mesh the collectives run on (default: every worker "
          "x 1 device, e.g. 4x1); e.g. 2x2");
ABSL_FLAG(int, collective_iterations, 5,
          "collectives back to back per job (the job reports their mean)");
ABSL_FLAG(std::string, gloo_baseline, "",
          "path of gloo_collective_baseline (default: next to this binary); "
          "none = no baseline column");
ABSL_FLAG(int, gloo_iters, 10, "timed Gloo iterations per row (median shown)");
ABSL_FLAG(int, gloo_warmup, 2, "untimed Gloo iterations per row");

namespace meshcast::bench {
namespace {

double ToGbps(double bytes_per_second) { return bytes_per_second * 8 / 1e9; }
double FromGbps(double gbps) { return gbps * 1e9 / 8; }

std::string Fixed(double value, int digits) {
  if (!std::isfinite(value)) return "-";
  return absl::StrFormat("%.*f", digits, value);
}

double Milliseconds(double seconds) { return seconds * 1e3; }

absl::StatusOr<std::vector<int>> ParsePositiveInts(const std::string& text,
                                                   const std::string& flag) {
  std::vector<int> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int value = 0;
    if (!absl::SimpleAtoi(part, &value) || value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part,
                       "' is not a positive integer; expected a "
                       "comma-separated list such as 1,4"));
    }
    values.push_back(value);
  }
  if (values.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": needs at least one positive integer"));
  }
  return values;
}

struct Sections {
  bool links = false;
  bool reshard = false;
  bool control = false;
  bool collective = false;
};

absl::StatusOr<Sections> ParseSections(const std::string& text) {
  Sections sections;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    if (part == "links") {
      sections.links = true;
    } else if (part == "reshard") {
      sections.reshard = true;
    } else if (part == "control") {
      sections.control = true;
    } else if (part == "collective") {
      sections.collective = true;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--sections: unknown '", part,
                       "'; allowed: links, reshard, control, collective"));
    }
  }
  return sections;
}

absl::StatusOr<std::vector<std::string>> ParseStrategies(
    const std::string& text) {
  std::vector<std::string> all;
  for (Strategy s : ConcreteStrategies()) all.push_back(StrategyName(s));
  if (text == "all") return all;
  std::vector<std::string> chosen;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    if (std::find(all.begin(), all.end(), part) == all.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--strategies: unknown '", part, "'; allowed: all or ",
                       absl::StrJoin(all, ", ")));
    }
    chosen.emplace_back(part);
  }
  if (chosen.empty()) {
    return absl::InvalidArgumentError("--strategies: none given");
  }
  return chosen;
}

// ---------------------------------------------------------------- links

struct LinkFigures {
  double memcpy_bytes_per_second = 0;
  double tcp_bytes_per_second = 0;  // one stream
  std::string source;  // "measured in this run" or "given by flags"
};

absl::StatusOr<LinkFigures> RunLinks(bool measure) {
  LinkFigures figures;
  if (!measure) {
    figures.memcpy_bytes_per_second =
        FromGbps(absl::GetFlag(FLAGS_memcpy_gbps));
    figures.tcp_bytes_per_second = FromGbps(absl::GetFlag(FLAGS_tcp_gbps));
    figures.source = "given by --memcpy_gbps/--tcp_gbps";
    std::cout << absl::StrFormat(
        "# links (%s): memcpy %.2f Gbps, loopback TCP %.2f Gbps\n\n",
        figures.source, absl::GetFlag(FLAGS_memcpy_gbps),
        absl::GetFlag(FLAGS_tcp_gbps));
    return figures;
  }
  const int repeats = absl::GetFlag(FLAGS_link_repeats);
  ASSIGN_OR_RETURN(
      std::vector<int> streams,
      ParsePositiveInts(absl::GetFlag(FLAGS_tcp_streams), "tcp_streams"));
  if (streams.front() != 1) {
    return absl::InvalidArgumentError(
        "--tcp_streams: the first count must be 1 (the per-host rate the "
        "topology gets)");
  }
  const char* format = "%-26s %12s %5s %12s %12s %12s\n";
  std::cout << "# links of this machine, measured in this run (median of "
            << repeats << " runs)\n";
  std::cout << absl::StrFormat(format, "#link", "bytes", "runs", "median(Gbps)",
                               "best(Gbps)", "worst(Gbps)");
  auto print = [&](const std::string& name, int64_t bytes,
                   const BandwidthSample& s) {
    std::cout << absl::StrFormat(
        format, absl::StrCat(" ", name), absl::StrCat(bytes),
        absl::StrCat(s.runs.size()),
        Fixed(ToGbps(s.median_bytes_per_second), 2),
        Fixed(ToGbps(s.best_bytes_per_second), 2),
        Fixed(ToGbps(*std::min_element(s.runs.begin(), s.runs.end())), 2));
    std::cout.flush();
  };
  const int64_t memcpy_bytes = absl::GetFlag(FLAGS_memcpy_bytes);
  ASSIGN_OR_RETURN(BandwidthSample copy, MeasureMemcpy(memcpy_bytes, repeats));
  print("memcpy (1 thread)", memcpy_bytes, copy);
  figures.memcpy_bytes_per_second = copy.median_bytes_per_second;
  for (int n : streams) {
    TcpProbeOptions options;
    options.bytes = absl::GetFlag(FLAGS_tcp_bytes);
    options.streams = n;
    options.repeats = repeats;
    ASSIGN_OR_RETURN(BandwidthSample tcp, MeasureLoopbackTcp(options));
    print(absl::StrFormat("loopback TCP, %d stream%s", n, n == 1 ? "" : "s"),
          options.bytes * n, tcp);
    if (n == 1) figures.tcp_bytes_per_second = tcp.median_bytes_per_second;
  }
  figures.source = "measured in this run";
  std::cout << absl::StrFormat(
      "# Summary: memcpy %.2f Gbps (one thread), loopback TCP %.2f Gbps (one "
      "stream)\n\n",
      ToGbps(figures.memcpy_bytes_per_second),
      ToGbps(figures.tcp_bytes_per_second));
  return figures;
}

absl::Status WriteLinksEnv(const std::string& path, const LinkFigures& links) {
  std::ofstream out(path);
  out << absl::StrFormat("MEMCPY_GBPS=%.4f\nTCP_GBPS=%.4f\n",
                         ToGbps(links.memcpy_bytes_per_second),
                         ToGbps(links.tcp_bytes_per_second));
  out.close();
  if (!out) {
    return absl::InternalError(
        absl::StrCat("--links_env: cannot write ", path));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- reshard

struct ReshardRow {
  std::string case_name;
  std::string strategy;
  int64_t bytes = 0;
  double measured = NAN;   // median data-plane seconds
  double predicted = NAN;  // controller's simulator, seconds
  double lower_bound = NAN;
  int64_t bytes_moved = 0;
  double job_seconds = NAN;  // median submit-to-done
  int64_t mismatches = 0;
  std::string status = "ok";
  bool ok() const { return status == "ok"; }
};

// One table row: nccl-tests style, fixed columns, "#" header lines.
constexpr char kReshardFormat[] =
    "%-12s %10s %-15s %9s %9s %9s %9s %9s %9s %8s %8s %8s %6s  %s\n";

void PrintReshardHeader() {
  std::cout << absl::StrFormat(kReshardFormat, "#case", "size", "strategy",
                               "time", "algbw", "movbw", "predicted",
                               "meas/pred", "lower_bd", "alg/tcp", "alg/mcpy",
                               "job", "#wrong", "status");
  std::cout << absl::StrFormat(kReshardFormat, "#", "(B)", "", "(s)", "(Gbps)",
                               "(Gbps)", "(s)", "", "(s)", "", "", "(s)", "",
                               "");
}

void PrintReshardRow(const ReshardRow& row, const LinkFigures& links) {
  const double algbw = row.bytes / row.measured;
  std::cout << absl::StrFormat(
      kReshardFormat, absl::StrCat(" ", row.case_name), absl::StrCat(row.bytes),
      row.strategy, Fixed(row.measured, 4), Fixed(ToGbps(algbw), 3),
      Fixed(ToGbps(row.bytes_moved / row.measured), 3), Fixed(row.predicted, 4),
      Fixed(row.measured / row.predicted, 2), Fixed(row.lower_bound, 4),
      Fixed(algbw / links.tcp_bytes_per_second, 3),
      Fixed(algbw / links.memcpy_bytes_per_second, 3),
      Fixed(row.job_seconds, 3), row.ok() ? absl::StrCat(row.mismatches) : "-",
      row.status);
  std::cout.flush();
}

ReshardRow RunReshardRow(JobClient& client, const ClusterCase& c,
                         const std::string& strategy, int num_hosts,
                         int devices_per_host) {
  ReshardRow row;
  row.case_name = c.name;
  row.strategy = strategy;
  row.bytes = c.num_bytes();
  absl::StatusOr<v1::ReshardSpec> reshard =
      PinnedReshardSpec(c, strategy, num_hosts, devices_per_host);
  if (!reshard.ok()) {
    row.status = std::string(reshard.status().message());
    return row;
  }
  v1::JobSpec spec;
  spec.set_name(absl::StrCat("bench ", c.name, " ", strategy));
  *spec.mutable_reshard() = *reshard;
  const absl::Duration timeout =
      absl::Seconds(absl::GetFlag(FLAGS_job_timeout));
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int repeat = absl::GetFlag(FLAGS_repeat);
  std::vector<double> measured, job_seconds;
  for (int run = 0; run < warmup + repeat; ++run) {
    absl::StatusOr<JobOutcome> outcome =
        client.SubmitAndWait(spec, timeout, /*fetch_result=*/true);
    if (!outcome.ok()) {
      row.status = outcome.status().ToString();
      return row;
    }
    const v1::Job& job = outcome->job;
    if (job.state() != v1::JOB_STATE_SUCCEEDED) {
      row.status = absl::StrCat(v1::JobState_Name(job.state()), " ", job.id(),
                                ": ", job.message());
      return row;
    }
    const v1::JobResult& result = job.result();
    row.mismatches += result.mismatches();
    if (result.mismatches() != 0 || result.elements_verified() <= 0) {
      row.status = absl::StrCat("NOT VERIFIED ", job.id(), ": ",
                                result.mismatches(), " mismatches of ",
                                result.elements_verified(), " elements");
      return row;
    }
    row.predicted = result.predicted_seconds();
    row.lower_bound = result.lower_bound_seconds();
    // Every receiver's copy; a controller without bytes_delivered reports 0.
    row.bytes_moved = result.bytes_delivered() > 0 ? result.bytes_delivered()
                                                   : result.bytes_moved();
    if (run >= warmup) {
      measured.push_back(result.seconds());
      job_seconds.push_back(outcome->submit_to_done_seconds);
    }
  }
  row.measured = Median(measured);
  row.job_seconds = Median(job_seconds);
  return row;
}

// Strategies whose predictions are closer than this are a tie for ranking.
constexpr double kRankTie = 0.10;

// Pairs of successful rows of one case whose predicted times differ by more
// than kRankTie: {pairs the measurement orders the same way, pairs}.
std::pair<int, int> RankAgreement(const std::vector<ReshardRow>& rows) {
  int alike = 0, total = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = i + 1; j < rows.size(); ++j) {
      const ReshardRow& a = rows[i];
      const ReshardRow& b = rows[j];
      if (!a.ok() || !b.ok()) continue;
      const double low = std::min(a.predicted, b.predicted);
      const double high = std::max(a.predicted, b.predicted);
      if (high <= low * (1 + kRankTie)) continue;
      ++total;
      if ((a.predicted < b.predicted) == (a.measured < b.measured)) ++alike;
    }
  }
  return {alike, total};
}

// Among the rows of one case that succeeded: the fastest strategy.
const ReshardRow* Fastest(const std::vector<ReshardRow>& rows,
                          double ReshardRow::*time) {
  const ReshardRow* best = nullptr;
  for (const ReshardRow& row : rows) {
    if (!row.ok()) continue;
    if (best == nullptr || row.*time < best->*time) best = &row;
  }
  return best;
}

absl::Status RunReshard(JobClient& client, const v1::Topology& topology,
                        const LinkFigures& links, bool& all_ok) {
  const std::string suite_path = absl::GetFlag(FLAGS_public_suite);
  ASSIGN_OR_RETURN(std::vector<PublicSuiteCase> suite,
                   LoadPublicSuite(suite_path.empty() ? DefaultPublicSuitePath()
                                                      : suite_path));
  ASSIGN_OR_RETURN(
      std::vector<ClusterCase> cases,
      SelectCases(ScaledPublicCases(suite, absl::GetFlag(FLAGS_size_mib)),
                  absl::GetFlag(FLAGS_cases)));
  ASSIGN_OR_RETURN(std::vector<std::string> strategies,
                   ParseStrategies(absl::GetFlag(FLAGS_strategies)));
  for (const ClusterCase& c : cases) {
    // Refuse up front, before minutes of other cases.
    RETURN_IF_ERROR(PinnedReshardSpec(c, "auto", topology.num_hosts(),
                                      topology.devices_per_host())
                        .status());
  }
  std::cout << absl::StrFormat(
      "# reshard: %d cases x %d strategies, int32, meshes pinned (source "
      "from host 0, destination on the next hosts); %d warm-up + %d timed "
      "jobs per row, median shown\n",
      cases.size(), strategies.size(), absl::GetFlag(FLAGS_warmup),
      absl::GetFlag(FLAGS_repeat));
  for (const ClusterCase& c : cases) {
    std::cout << absl::StrFormat(
        "#   %-12s %-14s %-14s %s (%s MiB)\n", c.name, c.MeshesText(),
        absl::StrCat(c.src_spec, "->", c.dst_spec), absl::StrJoin(c.shape, "x"),
        Fixed(c.num_bytes() / 1048576.0, 1));
  }
  std::cout << "# time: data-plane seconds the workers report (barrier after "
               "set-up to the last step); job: submit-to-done seconds\n";
  PrintReshardHeader();

  const auto start = std::chrono::steady_clock::now();
  std::map<std::string, std::vector<ReshardRow>> by_case;
  std::vector<ReshardRow> rows;
  for (const ClusterCase& c : cases) {
    for (const std::string& strategy : strategies) {
      ReshardRow row = RunReshardRow(client, c, strategy, topology.num_hosts(),
                                     topology.devices_per_host());
      PrintReshardRow(row, links);
      by_case[c.name].push_back(row);
      rows.push_back(row);
    }
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();

  // Summary: jobs, verification, ranking, model agreement, bandwidth.
  int ok = 0;
  int64_t mismatches = 0;
  std::vector<double> ratios;
  const ReshardRow* best_bw = nullptr;
  for (const ReshardRow& row : rows) {
    mismatches += row.mismatches;
    if (!row.ok()) continue;
    ++ok;
    ratios.push_back(row.measured / row.predicted);
    if (best_bw == nullptr ||
        row.bytes / row.measured > best_bw->bytes / best_bw->measured) {
      best_bw = &row;
    }
  }
  int meshcast_fastest = 0, cases_with_rows = 0;
  int pairs_alike = 0, pairs = 0;
  std::vector<std::string> winners;
  for (const ClusterCase& c : cases) {
    const std::vector<ReshardRow>& case_rows = by_case[c.name];
    const ReshardRow* measured = Fastest(case_rows, &ReshardRow::measured);
    if (measured == nullptr) continue;
    ++cases_with_rows;
    winners.push_back(absl::StrCat(c.name, " ", measured->strategy));
    if (measured->strategy == "meshcast") ++meshcast_fastest;
    const auto [alike, total] = RankAgreement(case_rows);
    pairs_alike += alike;
    pairs += total;
  }
  all_ok = all_ok && ok == static_cast<int>(rows.size()) && mismatches == 0;
  std::cout << absl::StrFormat(
      "# Summary: %d/%d rows ok, %d mismatches; %d/%d strategy pairs whose "
      "predictions differ by more than %.0f%% rank alike measured; fastest "
      "measured: meshcast in %d/%d cases (%s); "
      "measured/predicted median %s (%s..%s); best algbw %s Gbps (%s %s) = "
      "%s of loopback TCP, %s of memcpy; %.0f s\n\n",
      ok, rows.size(), mismatches, pairs_alike, pairs, kRankTie * 100,
      meshcast_fastest, cases_with_rows, absl::StrJoin(winners, ", "),
      Fixed(Median(ratios), 2), Fixed(Percentile(ratios, 0), 2),
      Fixed(Percentile(ratios, 100), 2),
      best_bw ? Fixed(ToGbps(best_bw->bytes / best_bw->measured), 3) : "-",
      best_bw ? best_bw->case_name : "-", best_bw ? best_bw->strategy : "-",
      best_bw ? Fixed(best_bw->bytes / best_bw->measured /
                          links.tcp_bytes_per_second,
                      2)
              : "-",
      best_bw ? Fixed(best_bw->bytes / best_bw->measured /
                          links.memcpy_bytes_per_second,
                      2)
              : "-",
      elapsed);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- control

constexpr char kControlFormat[] =
    "%-12s %7s %6s %6s %8s %8s %8s %8s %8s %8s %10s\n";

void PrintControlRow(const std::string& test, int clients, int64_t jobs,
                     int64_t ok, double seconds, const SampleSummary& s,
                     double server_p50) {
  std::cout << absl::StrFormat(
      kControlFormat, absl::StrCat(" ", test), absl::StrCat(clients),
      absl::StrCat(jobs), absl::StrCat(ok), Fixed(seconds, 2),
      Fixed(jobs / seconds, 1), Fixed(Milliseconds(s.p50), 2),
      Fixed(Milliseconds(s.p99), 2), Fixed(Milliseconds(s.min), 2),
      Fixed(Milliseconds(s.max), 2), Fixed(Milliseconds(server_p50), 2));
  std::cout.flush();
}

absl::Status RunControl(JobClient& client, bool& all_ok) {
  const int64_t tiny_bytes = absl::GetFlag(FLAGS_tiny_bytes);
  const int latency_jobs = absl::GetFlag(FLAGS_latency_jobs);
  if (latency_jobs < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--latency_jobs must be >= 1, got ", latency_jobs));
  }
  ASSIGN_OR_RETURN(
      std::vector<int> load_clients,
      ParsePositiveInts(absl::GetFlag(FLAGS_load_clients), "load_clients"));
  v1::JobSpec spec;
  spec.set_name("bench tiny");
  *spec.mutable_reshard() = TinyReshardSpec(tiny_bytes);
  const absl::Duration timeout =
      absl::Seconds(absl::GetFlag(FLAGS_job_timeout));

  std::cout << absl::StrFormat(
      "# control plane: tiny job = %d B int32, one device R -> one device R, "
      "placed by the controller, strategy auto; latency = submit to the final "
      "WatchJob event, client side; server = created to finished, as the "
      "controller records it\n",
      spec.reshard().tensor().shape(0) * 4);
  std::cout << absl::StrFormat(kControlFormat, "#test", "clients", "jobs", "ok",
                               "time", "jobs/s", "p50", "p99", "min", "max",
                               "server_p50");
  std::cout << absl::StrFormat(kControlFormat, "#", "", "", "", "(s)", "",
                               "(ms)", "(ms)", "(ms)", "(ms)", "(ms)");
  // Warm-up: channels, worker connections, the controller's caches.
  for (int i = 0; i < 3; ++i) {
    ASSIGN_OR_RETURN(JobOutcome warm,
                     client.SubmitAndWait(spec, timeout, false));
    (void)warm;
  }

  std::vector<double> latencies, server;
  int64_t ok = 0;
  std::string first_failure;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < latency_jobs; ++i) {
    absl::StatusOr<JobOutcome> outcome =
        client.SubmitAndWait(spec, timeout, /*fetch_result=*/true);
    if (!outcome.ok()) {
      if (first_failure.empty()) first_failure = outcome.status().ToString();
      continue;
    }
    latencies.push_back(outcome->submit_to_done_seconds);
    const v1::Job& job = outcome->job;
    server.push_back(job.finished_unix() - job.created_unix());
    if (job.state() == v1::JOB_STATE_SUCCEEDED &&
        job.result().mismatches() == 0) {
      ++ok;
    } else if (first_failure.empty()) {
      first_failure = absl::StrCat(
          job.id(), " ", v1::JobState_Name(job.state()), ": ", job.message());
    }
  }
  // Time without the fetches would be fairer to jobs/s, but sequential
  // jobs/s is 1 / mean latency anyway; the column shows the run's rate.
  const double sequential_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const SampleSummary sequential = Summarize(latencies);
  PrintControlRow("sequential", 1, latency_jobs, ok, sequential_seconds,
                  sequential, Median(server));
  if (ok != latency_jobs) all_ok = false;

  struct LoadRow {
    int clients;
    LoadResult result;
  };
  std::vector<LoadRow> loads;
  for (int clients : load_clients) {
    LoadOptions options;
    options.clients = clients;
    options.duration = absl::Seconds(absl::GetFlag(FLAGS_load_seconds));
    options.job_timeout = timeout;
    ASSIGN_OR_RETURN(LoadResult result,
                     RunClosedLoopLoad(client.address(), spec, options));
    PrintControlRow("concurrent", clients, result.succeeded + result.failed,
                    result.succeeded, result.elapsed_seconds,
                    Summarize(result.latencies_seconds), NAN);
    if (result.failed > 0) {
      all_ok = false;
      if (first_failure.empty()) first_failure = result.first_failure;
    }
    loads.push_back({clients, std::move(result)});
  }
  std::string load_text;
  for (const LoadRow& load : loads) {
    const SampleSummary s = Summarize(load.result.latencies_seconds);
    absl::StrAppend(
        &load_text, load_text.empty() ? "" : "; ",
        absl::StrFormat("%s jobs/s with %d concurrent clients (p50 %s ms, "
                        "p99 %s ms)",
                        Fixed(load.result.jobs_per_second(), 1), load.clients,
                        Fixed(Milliseconds(s.p50), 1),
                        Fixed(Milliseconds(s.p99), 1)));
  }
  std::cout << absl::StrFormat(
      "# Summary: tiny-job submit-to-done p50 %s ms, p99 %s ms over %d "
      "sequential jobs (%s jobs/s); %s%s\n",
      Fixed(Milliseconds(sequential.p50), 2),
      Fixed(Milliseconds(sequential.p99), 2), latency_jobs,
      Fixed(latency_jobs / sequential_seconds, 1), load_text,
      first_failure.empty() ? ""
                            : absl::StrCat("; first failure: ", first_failure));
  return absl::OkStatus();
}

// ---------------------------------------------------------------- collective

double ToGBps(double bytes_per_second) { return bytes_per_second / 1e9; }
double Microseconds(double seconds) { return seconds * 1e6; }

struct CollectiveRow {
  std::string op;
  int64_t bytes = 0;  // the size that ran (nccl-tests' size)
  int64_t count = 0;  // elements of `bytes`
  double factor = NAN;
  double time = NAN;  // median seconds per iteration
  double bound_busbw = NAN;
  double predicted_busbw = NAN;
  int64_t mismatches = 0;
  std::string status = "ok";
  // Gloo's figures for the same op and size; status "n/a" when there is no
  // baseline (--gloo_baseline=none, or this Gloo lacks the op).
  BaselineResult baseline;
  bool ok() const { return status == "ok"; }
  double algbw() const { return bytes / time; }
  double busbw() const { return algbw() * factor; }
  double baseline_busbw() const {
    return baseline.ok() ? baseline.bytes / baseline.median_seconds * factor
                         : NAN;
  }
};

// Where gloo_collective_baseline is: the flag, else next to this binary.
std::string GlooBaselinePath() {
  std::string path = absl::GetFlag(FLAGS_gloo_baseline);
  if (!path.empty()) return path;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "gloo_collective_baseline";
  std::string dir(self, n);
  dir.resize(dir.rfind('/') + 1);
  return dir + "gloo_collective_baseline";
}

// Runs the baseline binary for one op and size; its stderr goes to ours.
BaselineResult RunGlooBaseline(const std::string& path, int ranks,
                               const std::string& op, int64_t bytes) {
  BaselineResult failed;
  failed.op = op;
  failed.ranks = ranks;
  failed.status = "n/a";
  if (path == "none") return failed;
  const std::string command = absl::StrFormat(
      "'%s' --ranks=%d --ops=%s --sizes=%d --iters=%d --warmup=%d "
      "--timeout_s=%.0f",
      path, ranks, op, bytes, absl::GetFlag(FLAGS_gloo_iters),
      absl::GetFlag(FLAGS_gloo_warmup), absl::GetFlag(FLAGS_job_timeout));
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    failed.status = "popen-failed";
    return failed;
  }
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    output.append(buffer, n);
  }
  const int status = pclose(pipe);
  absl::StatusOr<std::vector<BaselineResult>> results =
      ParseBaselineOutput(output);
  if (!results.ok() || results->size() != 1 || (*results)[0].op != op) {
    failed.status = absl::StrCat("gloo-exit-",
                                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return failed;
  }
  return (*results)[0];
}

CollectiveRow RunCollectiveRow(JobClient& client, const std::string& op,
                               int64_t size, const MeshShape& mesh,
                               const v1::Topology& topology,
                               const std::string& baseline_path) {
  CollectiveRow row;
  row.op = op;
  row.factor = BusFactor(op, mesh.ranks());
  row.count = CollectiveCount(op, size, 4, mesh.ranks());
  row.bytes = row.count * 4;
  absl::StatusOr<v1::JobSpec> spec = PinnedCollectiveSpec(
      op, size, mesh, topology.num_hosts(), topology.devices_per_host(),
      absl::GetFlag(FLAGS_collective_iterations));
  if (!spec.ok()) {
    row.status = std::string(spec.status().message());
    return row;
  }
  const absl::Duration timeout =
      absl::Seconds(absl::GetFlag(FLAGS_job_timeout));
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int repeat = absl::GetFlag(FLAGS_repeat);
  std::vector<double> times;
  for (int run = 0; run < warmup + repeat && row.ok(); ++run) {
    absl::StatusOr<JobOutcome> outcome =
        client.SubmitAndWait(*spec, timeout, /*fetch_result=*/true);
    if (!outcome.ok()) {
      row.status = outcome.status().ToString();
      break;
    }
    const v1::Job& job = outcome->job;
    if (job.state() != v1::JOB_STATE_SUCCEEDED) {
      row.status = absl::StrCat(v1::JobState_Name(job.state()), " ", job.id(),
                                ": ", job.message());
      break;
    }
    const v1::JobResult& result = job.result();
    row.mismatches += result.mismatches();
    if (result.mismatches() != 0 || result.elements_verified() <= 0) {
      row.status = absl::StrCat("NOT VERIFIED ", job.id(), ": ",
                                result.mismatches(), " mismatches of ",
                                result.elements_verified(), " elements");
      break;
    }
    const auto& metrics = result.metrics();
    const auto time = metrics.find("time_per_iteration_seconds");
    if (time == metrics.end() || !(time->second > 0)) {
      row.status = absl::StrCat("job ", job.id(),
                                " has no time_per_iteration_seconds metric");
      break;
    }
    if (const auto it = metrics.find("size_bytes"); it != metrics.end()) {
      row.bytes = static_cast<int64_t>(it->second);
      row.count = row.bytes / 4;
    }
    if (const auto it = metrics.find("busbw_bound_bytes_per_second");
        it != metrics.end()) {
      row.bound_busbw = it->second;
    }
    if (const auto it = metrics.find("busbw_predicted_bytes_per_second");
        it != metrics.end()) {
      row.predicted_busbw = it->second;
    }
    if (run >= warmup) times.push_back(time->second);
  }
  if (row.ok()) row.time = Median(times);
  // Measured right after meshcast's jobs, with the cluster idle.
  row.baseline = RunGlooBaseline(baseline_path, mesh.ranks(), op, size);
  return row;
}

constexpr char kCollectiveFormat[] =
    "%-15s %11s %10s %7s %10s %8s %8s %8s %7s %8s %10s %8s %8s %6s  %s\n";

void PrintCollectiveHeader() {
  std::cout << absl::StrFormat(kCollectiveFormat, "#op", "size", "count",
                               "type", "time", "algbw", "busbw", "bound",
                               "bus/bd", "pred", "gloo_time", "gloo_bus",
                               "mc/gloo", "#wrong", "status");
  std::cout << absl::StrFormat(kCollectiveFormat, "#", "(B)", "(elements)", "",
                               "(us)", "(GB/s)", "(GB/s)", "(GB/s)", "",
                               "(GB/s)", "(us)", "(GB/s)", "", "", "");
}

void PrintCollectiveRow(const CollectiveRow& row) {
  const bool base = row.baseline.ok();
  std::string status = row.status;
  if (row.ok() && !base)
    status = absl::StrCat("ok, baseline ", row.baseline.status);
  std::cout << absl::StrFormat(
      kCollectiveFormat, absl::StrCat(" ", row.op), absl::StrCat(row.bytes),
      absl::StrCat(row.count), "float", Fixed(Microseconds(row.time), 1),
      Fixed(ToGBps(row.algbw()), 3), Fixed(ToGBps(row.busbw()), 3),
      Fixed(ToGBps(row.bound_busbw), 3),
      Fixed(row.busbw() / row.bound_busbw, 2),
      Fixed(ToGBps(row.predicted_busbw), 3),
      base ? Fixed(Microseconds(row.baseline.median_seconds), 1) : "n/a",
      base ? Fixed(ToGBps(row.baseline_busbw()), 3) : "n/a",
      base ? Fixed(row.busbw() / row.baseline_busbw(), 2) : "n/a",
      row.ok() ? absl::StrCat(row.mismatches) : "-", status);
  std::cout.flush();
}

absl::Status RunCollective(JobClient& client, const v1::Topology& topology,
                           bool& all_ok) {
  ASSIGN_OR_RETURN(std::vector<std::string> ops,
                   ParseCollectiveOps(absl::GetFlag(FLAGS_collective_ops)));
  ASSIGN_OR_RETURN(
      std::vector<int64_t> sizes,
      ParseSizeList(absl::GetFlag(FLAGS_collective_sizes), "collective_sizes"));
  MeshShape mesh{topology.num_hosts(), 1};
  if (!absl::GetFlag(FLAGS_collective_mesh).empty()) {
    ASSIGN_OR_RETURN(mesh,
                     ParseMeshShape(absl::GetFlag(FLAGS_collective_mesh)));
  }
  const int iterations = absl::GetFlag(FLAGS_collective_iterations);
  if (absl::GetFlag(FLAGS_gloo_iters) < 1 ||
      absl::GetFlag(FLAGS_gloo_warmup) < 0) {
    return absl::InvalidArgumentError(
        "--gloo_iters must be >= 1 and --gloo_warmup >= 0");
  }
  // Refuse up front (a mesh the cluster cannot hold, bad iterations, a
  // size too small for the ranks) rather than after minutes of rows.
  for (const std::string& op : ops) {
    for (int64_t size : sizes) {
      RETURN_IF_ERROR(PinnedCollectiveSpec(op, size, mesh, topology.num_hosts(),
                                           topology.devices_per_host(),
                                           iterations)
                          .status());
      if (CollectiveCount(op, size, 4, mesh.ranks()) < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--collective_sizes: ", size, " B of float32 is no element of ", op,
            " on ", mesh.ranks(), " ranks"));
      }
    }
  }
  const std::string baseline_path = GlooBaselinePath();
  if (baseline_path != "none" && access(baseline_path.c_str(), X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gloo_baseline: ", baseline_path,
        " is not an executable; build the gloo_collective_baseline target, "
        "or pass --gloo_baseline=none to run without the baseline"));
  }
  std::cout << absl::StrFormat(
      "# collective: mesh %s (%d ranks, row r on host r, device ids "
      "host*%d+col), float32, sum; %d warm-up + %d timed jobs per row of %d "
      "collectives each, every output verified; time = median over jobs of "
      "the job's time per collective (slowest worker, mean of its "
      "iterations)\n",
      mesh.ToString(), mesh.ranks(), topology.devices_per_host(),
      absl::GetFlag(FLAGS_warmup), absl::GetFlag(FLAGS_repeat), iterations);
  std::cout << absl::StrFormat(
      "# busbw = algbw x (all_reduce 2(n-1)/n; all_gather, reduce_scatter, "
      "all_to_all (n-1)/n; broadcast 1); bound = the busbw the topology's "
      "lower bound allows; pred = the controller's prediction; baseline: "
      "Gloo's own collective between %d local processes over loopback TCP "
      "(%s; median of %d iterations after %d), measured after each row\n",
      mesh.ranks(), baseline_path == "none" ? "off" : baseline_path,
      absl::GetFlag(FLAGS_gloo_iters), absl::GetFlag(FLAGS_gloo_warmup));
  PrintCollectiveHeader();

  const auto start = std::chrono::steady_clock::now();
  std::vector<CollectiveRow> rows;
  for (const std::string& op : ops) {
    for (int64_t size : sizes) {
      CollectiveRow row =
          RunCollectiveRow(client, op, size, mesh, topology, baseline_path);
      PrintCollectiveRow(row);
      rows.push_back(std::move(row));
    }
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();

  int ok = 0, with_baseline = 0;
  int64_t mismatches = 0;
  double busbw_sum = 0, baseline_sum = 0;
  std::vector<double> vs_gloo, vs_bound;
  const CollectiveRow* best = nullptr;
  bool baseline_failed = false;
  for (const CollectiveRow& row : rows) {
    mismatches += row.mismatches;
    // A wrong or failed baseline is a failed run; an absent one is not.
    if (!row.baseline.ok() && row.baseline.status != "n/a" &&
        row.baseline.status != "unsupported") {
      baseline_failed = true;
    }
    if (!row.ok()) continue;
    ++ok;
    busbw_sum += row.busbw();
    if (std::isfinite(row.bound_busbw)) {
      vs_bound.push_back(row.busbw() / row.bound_busbw);
    }
    if (row.baseline.ok()) {
      ++with_baseline;
      baseline_sum += row.baseline_busbw();
      vs_gloo.push_back(row.busbw() / row.baseline_busbw());
    }
    if (best == nullptr || row.busbw() > best->busbw()) best = &row;
  }
  all_ok = all_ok && ok == static_cast<int>(rows.size()) && mismatches == 0 &&
           !baseline_failed;
  std::cout << absl::StrFormat(
      "# Summary: %d/%d rows ok, %d mismatches; avg busbw %s GB/s (gloo %s "
      "GB/s over the rows it ran); meshcast/gloo busbw median %s (%s..%s) "
      "over %d rows; busbw/bound median %s (%s..%s); best busbw %s GB/s (%s "
      "%s B); %.0f s\n\n",
      ok, rows.size(), mismatches,
      ok > 0 ? Fixed(ToGBps(busbw_sum / ok), 3) : "-",
      with_baseline > 0 ? Fixed(ToGBps(baseline_sum / with_baseline), 3) : "-",
      Fixed(Median(vs_gloo), 2), Fixed(Percentile(vs_gloo, 0), 2),
      Fixed(Percentile(vs_gloo, 100), 2), with_baseline,
      Fixed(Median(vs_bound), 2), Fixed(Percentile(vs_bound, 0), 2),
      Fixed(Percentile(vs_bound, 100), 2),
      best ? Fixed(ToGBps(best->busbw()), 3) : "-", best ? best->op : "-",
      best ? absl::StrCat(best->bytes) : "-", elapsed);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- main

absl::Status Run(bool& all_ok) {
  ASSIGN_OR_RETURN(Sections sections,
                   ParseSections(absl::GetFlag(FLAGS_sections)));
  if (absl::GetFlag(FLAGS_warmup) < 0 || absl::GetFlag(FLAGS_repeat) < 1) {
    return absl::InvalidArgumentError(
        "--warmup must be >= 0 and --repeat >= 1");
  }
  if (absl::GetFlag(FLAGS_load_seconds) <= 0 ||
      absl::GetFlag(FLAGS_job_timeout) <= 0) {
    return absl::InvalidArgumentError(
        "--load_seconds and --job_timeout must be > 0");
  }
  if (absl::GetFlag(FLAGS_size_mib) <= 0) {
    return absl::InvalidArgumentError("--size_mib must be > 0");
  }
  const bool given =
      absl::GetFlag(FLAGS_memcpy_gbps) > 0 && absl::GetFlag(FLAGS_tcp_gbps) > 0;
  if ((absl::GetFlag(FLAGS_memcpy_gbps) > 0) !=
      (absl::GetFlag(FLAGS_tcp_gbps) > 0)) {
    return absl::InvalidArgumentError(
        "--memcpy_gbps and --tcp_gbps go together (both > 0, or neither)");
  }
  // Reshard ratios need link figures: measure them unless given.
  LinkFigures links;
  if (sections.links || sections.reshard) {
    ASSIGN_OR_RETURN(links, RunLinks(/*measure=*/!given));
  }
  if (!absl::GetFlag(FLAGS_links_env).empty()) {
    if (!sections.links && !sections.reshard) {
      return absl::InvalidArgumentError(
          "--links_env needs the links section (--sections=links)");
    }
    RETURN_IF_ERROR(WriteLinksEnv(absl::GetFlag(FLAGS_links_env), links));
  }
  if (!sections.reshard && !sections.control && !sections.collective) {
    return absl::OkStatus();
  }

  const std::string address = absl::GetFlag(FLAGS_controller);
  if (address.empty()) {
    return absl::InvalidArgumentError(
        "--controller: required for the reshard, control and collective "
        "sections "
        "(host:port, as `meshctl up` prints it)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<JobClient> client,
                   JobClient::Connect(address));
  ASSIGN_OR_RETURN(v1::GetClusterResponse cluster, client->GetCluster());
  const v1::Topology& topology = cluster.topology();
  std::cout << absl::StrFormat(
      "# cluster %s: %d hosts x %d devices (%d workers registered); the "
      "controller plans with inter-host %.2f Gbps per host NIC, intra-host "
      "%.2f Gbps per device\n",
      address, topology.num_hosts(), topology.devices_per_host(),
      cluster.workers_size(), ToGbps(topology.inter_host_bandwidth()),
      ToGbps(topology.intra_host_bandwidth()));
  if (sections.reshard) {
    const double off_inter =
        topology.inter_host_bandwidth() / links.tcp_bytes_per_second;
    const double off_intra =
        topology.intra_host_bandwidth() / links.memcpy_bytes_per_second;
    if (std::abs(off_inter - 1) > 0.05 || std::abs(off_intra - 1) > 0.05) {
      std::cout << absl::StrFormat(
          "# note: the topology differs from the link figures (inter x%.2f, "
          "intra x%.2f): predictions are for the topology, not this "
          "machine; start the cluster with meshctl up --inter-gbps %.2f "
          "--intra-gbps %.2f\n",
          off_inter, off_intra, ToGbps(links.tcp_bytes_per_second),
          ToGbps(links.memcpy_bytes_per_second));
    }
    RETURN_IF_ERROR(RunReshard(*client, topology, links, all_ok));
  }
  if (sections.control) RETURN_IF_ERROR(RunControl(*client, all_ok));
  if (sections.collective) {
    RETURN_IF_ERROR(RunCollective(*client, topology, all_ok));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace meshcast::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "measured resharding and control-plane figures on a meshcast cluster\n"
      "  cluster_bench --sections=links --links_env=FILE\n"
      "  cluster_bench --controller=HOST:PORT [--memcpy_gbps=X "
      "--tcp_gbps=Y] [--sections=links,reshard,control,collective]");
  absl::ParseCommandLine(argc, argv);
  bool all_ok = true;
  const absl::Status status = meshcast::bench::Run(all_ok);
  if (!status.ok()) {
    std::cerr << "cluster_bench: " << status.message() << "\n";
    // The exit codes of meshctl: 2 bad input, 3 controller unreachable.
    if (status.code() == absl::StatusCode::kInvalidArgument) return 2;
    if (status.code() == absl::StatusCode::kUnavailable) return 3;
    return 1;
  }
  return all_ok ? 0 : 1;
}
