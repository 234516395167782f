#!/usr/bin/env python3
"""tp_overlap_bench: a GEMM fused with the collective that consumes its output.

Three sections (--sections, default local,net,paper):

  local  a grid of m, n, k and TP sizes, every mode (sequential, chunked,
         fused, auto) x the collective (--collectives), run as `tp_overlap`
         jobs on a local cluster of TP workers x 1 CPU device (`meshctl up`),
         full verification. Per row: the measured mode-phase time
         (total_seconds) next to the planner's prediction for the same spec,
         overlap efficiency, the GEMM's slowdown under overlap, the speedup
         over `sequential` measured in the same run, and the ideal bound
         max(t_gemm, t_comm) (both measured alone in the same job) with
         bound/measured.
  net    the same grid on the emulated multi-host cluster of
         scripts/netcluster.sh (network namespaces with rate-limited links):
         needs root; skipped with a message otherwise.
  paper  the T3 paper's setting, simulated: `meshctl plan` (offline, the
         same planner library) of the tensor-parallel sublayers of T-NLG,
         GPT-3, PaLM and MT-NLG at H100-class rates, sequential against
         fused (predicted), with the speedup per sublayer and its geomean
         and max beside the figures T3 reports on its simulated hardware.

    bench/tp_overlap/tp_overlap_bench.py --bin-dir build
    bench/tp_overlap/tp_overlap_bench.py --quick   # CI smoke: local, paper
    sudo bench/tp_overlap/tp_overlap_bench.py --sections net --rate 1gbit

A mode the planner refuses as "not available" is printed as such, not
failed. Python 3 standard library only. Exit status: 0 when every job that
ran succeeded with 0 mismatches, 1 otherwise, 2 on bad flags.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bench", "common"))
import bench_common as bc  # noqa: E402
from bench_common import (fmt, fmt_s, geomean,  # noqa: E402
                          load_average, log, ratio, write_spec)
MODES = ["sequential", "chunked", "fused", "auto"]
# nccl-tests style: fixed-width columns, "#" header lines.
ROW = ("%-16s %3s %-6s %-10s %-12s %9s %9s %6s %9s %9s %9s %6s %6s %6s %7s "
       "%s")
HEADER = ("shape m,n,k", "tp", "coll", "mode", "strategy", "measured",
          "predicted", "m/p", "gemm", "comm", "bound", "b/m", "eff", "slow",
          "speedup", "status")
UNITS = ("", "", "", "", "", "(s)", "(s)", "", "(s)", "(s)", "(s)", "", "",
         "", "vs seq", "")

# The grid of the local and net sections: (m, n, k, tp). k is the full
# reduction dimension (each rank holds k / tp of it).
GRID = [(256, 256, 1024, 2), (512, 512, 2048, 4), (1024, 512, 4096, 4),
        (512, 1024, 1024, 4)]
QUICK_GRID = [(256, 256, 1024, 4)]

# The T3 paper's sublayers (its section 5): the row-parallel GEMMs whose
# output feeds a reduce-scatter in tensor parallelism, forward (attention
# output projection "OP": k = H; "FC-2": k = 4H) and backward (FC-1's input
# gradient: k = 4H; the QKV input projection's "IP": k = 3H), n = H, for
# models of hidden size H at the paper's TP degrees. m (tokens per rank
# group) is our choice: 8192 (e.g. 4 sequences of 2048).
MODELS = [("T-NLG", 4256, [8, 16]), ("GPT-3", 12288, [32]),
          ("PaLM", 18432, [32]), ("MT-NLG", 20480, [32])]
SUBLAYERS = [("OP", 1), ("FC-2", 4), ("FC-1(bw)", 4), ("IP(bw)", 3)]
PAPER_TOKENS = 8192
# What T3 reports for its sublayers (simulated GPUs, T3 with memory-
# controller arbitration): speedup over sequential, geomean and max.
PAPER_GEOMEAN, PAPER_MAX = 0.30, 0.47
# H100-class links: NVLink 4 is 450 GB/s each way per GPU (3600 Gbit/s),
# 2 us per message. The TP group is a ring of GPUs, each with its own NVLink
# port at that rate (T3 simulates a ring interconnect for every TP size; at
# TP 16 and 32 that is an NVLink switch spanning nodes): TP "hosts" of one
# device each, so every collective is a flat ring over all ranks.
NVLINK_GBPS, NVLINK_LATENCY_US = 3600, 2


def job_spec(m, n, k, tp, collective, mode, chunks=0, dtype="DTYPE_FLOAT32",
             mesh=None, verify="VERIFY_MODE_FULL"):
    return {"name": "tp-%dx%dx%d-tp%d-%s-%s" % (m, n, k, tp, collective,
                                                 mode),
            "verify": verify,
            "tp_overlap": {"m": m, "n": n, "k": k, "dtype": dtype,
                           "mesh": {"shape": mesh or [tp, 1]},
                           "collective": collective, "mode": mode,
                           "chunks": chunks}}


def not_available(text):
    return "not available" in text


# ---- clusters -------------------------------------------------------------

def local_cluster(args, workers):
    return bc.LocalCluster(args.meshctl, args.controller_bin,
                           args.worker_bin, workers, devices=1,
                           up_args=args.up_args, prefix="tp-overlap-bench-")


def net_cluster(args, hosts):
    return bc.NetCluster(args.bin_dir, args.rate, hosts, devices=1,
                         cluster_id="tpov", prefix="tp-overlap-netbench-",
                         worker_args=args.worker_args)


# ---- the grid on a cluster ------------------------------------------------

def plan_live(cluster, spec):
    """The planner's figures for `spec` on the cluster's topology (a live
    dry run): (strategy, predicted mode-phase seconds), or None when the
    mode is not available."""
    path = write_spec(spec)
    try:
        result = cluster.ctl(["plan", "-f", path, "--live", "--output",
                              "json"], timeout=60)
    finally:
        os.unlink(path)
    if result.returncode != 0:
        if not_available(result.stdout + result.stderr):
            return None
        raise RuntimeError("meshctl plan failed: %s" % result.stderr.strip())
    doc = json.loads(result.stdout)
    metrics = doc.get("predicted_metrics", {})
    predicted = metrics.get("predicted_total_seconds",
                            metrics.get("total_seconds",
                                        doc.get("predicted_seconds")))
    return doc.get("strategy"), predicted


def run_job(cluster, spec, timeout):
    """The finished job (dict), or None when the mode is not available."""
    job, result = bc.submit_wait(cluster, spec, timeout)
    if result.returncode != 0 and not_available(result.stdout +
                                                result.stderr):
        return None
    return job


def run_grid(cluster, grid, args, where):
    rows = []
    log("#" + ROW % HEADER)
    log("#" + ROW % UNITS)
    for m, n, k, tp in grid:
        for collective in args.collective_list:
            sequential_total = None
            for mode in args.mode_list:
                spec = job_spec(m, n, k, tp, collective, mode,
                                verify=args.verify)
                row = {"where": where, "m": m, "n": n, "k": k, "tp": tp,
                       "collective": collective, "mode": mode,
                       "status": "ok"}
                planned = plan_live(cluster, spec)
                if planned is None:
                    row["status"] = "not available"
                else:
                    row["strategy"], row["predicted"] = planned
                    runs = []
                    for _ in range(args.repeat):
                        job = run_job(cluster, spec, args.job_timeout)
                        if job is None:
                            row["status"] = "not available"
                            break
                        result = job.get("result", {})
                        if job.get("state") != "SUCCEEDED":
                            row["status"] = "%s: %s" % (
                                job.get("state"),
                                (job.get("message") or "")[:120])
                            break
                        if result.get("mismatches", 0) != 0:
                            row["status"] = "MISMATCH (%s)" % result.get(
                                "mismatches")
                            break
                        runs.append(result.get("metrics", {}))
                        row["strategy"] = job.get("plan", {}).get(
                            "strategy", row["strategy"])
                    if row["status"] == "ok":
                        # The run with the median total stands for the row.
                        runs.sort(key=lambda r: r.get("total_seconds", 0))
                        metrics = runs[len(runs) // 2]
                        row.update(
                            measured=metrics.get("total_seconds"),
                            gemm=metrics.get("gemm_seconds"),
                            comm=metrics.get("comm_seconds"),
                            efficiency=metrics.get("overlap_efficiency"),
                            slowdown=metrics.get("gemm_slowdown"),
                            runs=[r.get("total_seconds") for r in runs])
                        if row["gemm"] and row["comm"]:
                            row["bound"] = max(row["gemm"], row["comm"])
                        if mode == "sequential":
                            sequential_total = row["measured"]
                        row["speedup"] = ratio(sequential_total,
                                               row["measured"])
                rows.append(row)
                log(" " + ROW % (
                    "%d,%d,%d" % (m, n, k), tp, collective[:6], mode,
                    row.get("strategy", "-") or "-", fmt_s(row.get("measured")),
                    fmt_s(row.get("predicted")),
                    fmt(ratio(row.get("measured"), row.get("predicted")),
                        "%.2f"),
                    fmt_s(row.get("gemm")), fmt_s(row.get("comm")),
                    fmt_s(row.get("bound")),
                    fmt(ratio(row.get("bound"), row.get("measured")), "%.2f"),
                    fmt(row.get("efficiency"), "%.2f"),
                    fmt(row.get("slowdown"), "%.2f"),
                    fmt(row.get("speedup"), "%.2fx"), row["status"]))
    return rows


def summarize_grid(rows, where, elapsed):
    ran = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] not in ("ok", "not available")]
    missing = sorted({r["mode"] for r in rows
                      if r["status"] == "not available"})
    parts = []
    for mode in MODES[1:]:
        speedups = [r["speedup"] for r in ran
                    if r["mode"] == mode and r.get("speedup")]
        if speedups:
            parts.append("%s %.2fx geomean (worst %.2fx)" %
                         (mode, geomean(speedups), min(speedups)))
    # The goal's rows: GEMM and communication within 2x of each other.
    balanced = [r for r in ran if r["mode"] == "fused" and r.get("gemm") and
                r.get("comm") and 0.5 <= r["gemm"] / r["comm"] <= 2]
    if balanced:
        parts.append("fused efficiency %.2f where gemm ~ comm (%d rows)" %
                     (statistics.fmean(r["efficiency"] or 0
                                       for r in balanced), len(balanced)))
    auto_gaps = []
    for r in ran:
        if r["mode"] != "auto":
            continue
        best = min((o["measured"] for o in ran
                    if o["m"] == r["m"] and o["n"] == r["n"] and
                    o["k"] == r["k"] and o["tp"] == r["tp"] and
                    o["collective"] == r["collective"] and
                    o["mode"] != "auto"), default=None)
        if best:
            auto_gaps.append(r["measured"] / best)
    if auto_gaps:
        parts.append("auto within %.0f%% of the best mode measured (worst)" %
                     (100 * (max(auto_gaps) - 1)))
    predictions = [r["measured"] / r["predicted"] for r in ran
                   if r.get("predicted")]
    if predictions:
        parts.append("measured/predicted geomean %.2f" % geomean(predictions))
    log("# Summary (%s): speedup over sequential: %s; %d/%d jobs ok%s%s; "
        "%.0f s, load average %s" % (
            where, "; ".join(parts) if parts else "-", len(ran),
            len(rows) - sum(r["status"] == "not available" for r in rows),
            "; not available: " + ", ".join(missing) if missing else "",
            "; FAILED: %d" % len(failed) if failed else "", elapsed,
            load_average()))
    return not failed


def section_local(args, grid):
    log("# local: %s workers x 1 cpu device per TP size (meshctl up on "
        "127.0.0.1), float32, verify %s, %d repeat(s) (median); measured: "
        "the mode phase (total_seconds); gemm, comm: each alone in the same "
        "job; bound: max(gemm, comm); load average %s" % (
            "/".join(str(t) for t in sorted({g[3] for g in grid})),
            args.verify, args.repeat, load_average()))
    start = time.time()
    rows = []
    for tp in sorted({g[3] for g in grid}):
        with local_cluster(args, tp) as cluster:
            part = run_grid(cluster, [g for g in grid if g[3] == tp], args,
                            "local")
            cluster.ok = all(r["status"] in ("ok", "not available")
                             for r in part)
            rows += part
    return summarize_grid(rows, "local", time.time() - start), rows


def section_net(args, grid):
    if os.geteuid() != 0:
        log("# net: SKIPPED: the emulated cluster (scripts/netcluster.sh) "
            "needs root for network namespaces and tc; run this section "
            "with sudo")
        return True, []
    log("# net: netcluster of TP hosts x 1 cpu device, links %s each way; "
        "load average %s" % (args.rate, load_average()))
    start = time.time()
    rows = []
    for tp in sorted({g[3] for g in grid}):
        with net_cluster(args, tp) as cluster:
            part = run_grid(cluster, [g for g in grid if g[3] == tp], args,
                            "net")
            cluster.ok = all(r["status"] in ("ok", "not available")
                             for r in part)
            rows += part
    return summarize_grid(rows, "net", time.time() - start), rows


# ---- the paper's setting, simulated ---------------------------------------

def plan_offline(args, spec, tp):
    path = write_spec(spec)
    try:
        result = subprocess.run(
            [args.meshctl, "plan", "-f", path, "--cluster", "%dx1" % tp,
             "--device-kind", "h100", "--inter-gbps", str(NVLINK_GBPS),
             "--inter-latency-us", str(NVLINK_LATENCY_US), "--output",
             "json"],
            capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(path)
    if result.returncode != 0:
        if not_available(result.stdout + result.stderr):
            return None
        raise RuntimeError("meshctl plan failed: %s" % result.stderr.strip())
    return json.loads(result.stdout)


def section_paper(args):
    log("# paper: the T3 paper's tensor-parallel sublayers, simulated by "
        "meshctl plan (offline) at H100-class rates: 989 TFLOP/s bf16 per "
        "GPU (--device-kind h100), a ring of TP GPUs with NVLink-class "
        "links of %d Gbit/s each way and %d us (--cluster TPx1); bf16, m = "
        "%d tokens, reduce-scatter; the mode phase's predicted time" % (
            NVLINK_GBPS, NVLINK_LATENCY_US, PAPER_TOKENS))
    log("# ideal: max(gemm alone, collective alone) as predicted; lower_bd: "
        "the planner's bound on any schedule (the collective's own bound "
        "can be below the collective as the engine runs it, so fused may "
        "beat `ideal`: marked <)")
    fmt_row = "%-8s %-9s %3s %6s %6s %6s %10s %10s %-10s %10s %10s %8s %8s"
    log("#" + fmt_row % ("model", "sublayer", "tp", "m", "n", "k",
                         "sequential", "fused", "fused_as", "ideal",
                         "lower_bd", "speedup", "ideal_sp"))
    log("#" + fmt_row % ("", "", "", "", "", "", "(s)", "(s)", "", "(s)",
                         "(s)", "", ""))
    models = MODELS[:2] if args.quick else MODELS
    speedups, ideal_speedups = [], []
    missing = False
    for model, hidden, tps in models:
        for tp in tps[:1] if args.quick else tps:
            for sublayer, factor in (SUBLAYERS[:1] if args.quick
                                     else SUBLAYERS):
                m, n, k = PAPER_TOKENS, hidden, factor * hidden
                if k % tp or m % tp:
                    continue
                mesh = [tp, 1]
                figures = {}
                for mode in ("sequential", "fused"):
                    doc = plan_offline(args, job_spec(
                        m, n, k, tp, "reduce_scatter", mode,
                        dtype="DTYPE_BFLOAT16", mesh=mesh), tp)
                    figures[mode] = doc
                seq, fused = figures["sequential"], figures["fused"]
                if seq is None or fused is None:
                    missing = True
                    log(" " + fmt_row % (model, sublayer, tp, m, n, k, "-",
                                         "-", "-", "-", "-", "-", "-") +
                        "  fused not available")
                    continue
                t_seq = seq["predicted_metrics"].get(
                    "predicted_total_seconds", seq["predicted_seconds"])
                t_fused = fused["predicted_metrics"].get(
                    "predicted_total_seconds", fused["predicted_seconds"])
                pm = seq["predicted_metrics"]
                ideal = max(pm.get("gemm_seconds", 0),
                            pm.get("comm_seconds", 0)) or None
                speedup = t_seq / t_fused - 1
                ideal_speedup = t_seq / ideal - 1 if ideal else None
                speedups.append(1 + speedup)
                if ideal_speedup is not None:
                    ideal_speedups.append(1 + ideal_speedup)
                beats = ideal and t_fused < ideal
                log(" " + fmt_row % (
                    model, sublayer, tp, m, n, k, fmt_s(t_seq),
                    fmt_s(t_fused), fused.get("strategy", "-"),
                    fmt_s(ideal) + ("<" if beats else ""),
                    fmt_s(fused.get("lower_bound_seconds")),
                    fmt(100 * speedup, "%+.0f%%"),
                    fmt(100 * ideal_speedup if ideal_speedup is not None
                        else None, "%+.0f%%")))
    if speedups:
        log("# Summary (paper, simulated here): fused over sequential %+.0f%% "
            "geomean, %+.0f%% max over %d sublayers (ideal overlap %+.0f%% "
            "geomean, %+.0f%% max); T3 reports %+.0f%% geomean, %+.0f%% max "
            "on its simulated GPUs" % (
                100 * (geomean(speedups) - 1), 100 * (max(speedups) - 1),
                len(speedups), 100 * ((geomean(ideal_speedups) or 1) - 1),
                100 * ((max(ideal_speedups) if ideal_speedups else 1) - 1),
                100 * PAPER_GEOMEAN, 100 * PAPER_MAX))
    elif missing:
        log("# Summary (paper): the fused mode is not available in this "
            "build's planner")
    return True


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default=None,
                   help="comma-separated: local, net, paper (default: all "
                   "three; with --quick: local, paper)")
    p.add_argument("--quick", action="store_true",
                   help="one small shape at TP 4, two paper rows (CI smoke)")
    p.add_argument("--grid", default=None,
                   help="m,n,k,tp;m,n,k,tp;... (default: a built-in grid)")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--collectives", default="reduce_scatter,all_reduce")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per row; the median is shown")
    p.add_argument("--verify", default="VERIFY_MODE_FULL",
                   choices=["VERIFY_MODE_FULL", "VERIFY_MODE_SAMPLE",
                            "VERIFY_MODE_OFF"])
    p.add_argument("--rate", default="1gbit",
                   help="net: link rate (tc units)")
    bc.add_cluster_args(p, job_timeout=120)
    p.add_argument("--up-arg", action="append", default=[], dest="up_args",
                   help="extra flag for `meshctl up` (repeatable)")
    a = p.parse_args(argv)
    if a.sections is None:
        a.sections = "local,paper" if a.quick else "local,net,paper"
    a.section_list = bc.split_sections(p, a.sections, ('local', 'net', 'paper'))
    a.mode_list = [m for m in a.modes.split(",") if m]
    for m in a.mode_list:
        if m not in MODES:
            p.error("--modes: unknown '%s'; allowed: %s" %
                    (m, ", ".join(MODES)))
    if "sequential" in a.mode_list:
        # Speedups are over the sequential run of the same shape: run it
        # first.
        a.mode_list.remove("sequential")
        a.mode_list.insert(0, "sequential")
    a.collective_list = [c for c in a.collectives.split(",") if c]
    for c in a.collective_list:
        if c not in ("reduce_scatter", "all_reduce"):
            p.error("--collectives: unknown '%s'; allowed: reduce_scatter, "
                    "all_reduce" % c)
    if a.repeat < 1:
        p.error("--repeat must be >= 1")
    if a.grid:
        try:
            a.grid_list = [tuple(int(x) for x in item.split(","))
                           for item in a.grid.split(";") if item]
            assert all(len(g) == 4 and min(g) > 0 for g in a.grid_list)
        except (ValueError, AssertionError):
            p.error("--grid: want m,n,k,tp;... of positive integers")
    else:
        a.grid_list = QUICK_GRID if a.quick else GRID
    if a.quick:
        a.collective_list = a.collective_list[:1]
    return a


def main(argv):
    args = parse_args(argv)
    return bc.run_bench("tp_overlap_bench", args, {
        "local": lambda a: section_local(a, a.grid_list),
        "net": lambda a: section_net(a, a.grid_list),
        "paper": lambda a: (section_paper(a), [])})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
