#!/usr/bin/env python3
"""moe_bench: MoE layers under MP + EP + ESP, three communication schedules.

Three sections (--sections, default grid,net):

  grid   a grid of layer configurations (tokens, hidden, ffn, experts,
         top-k, capacity factor, ep x mp), each planned by `meshctl plan -f`
         (offline, the same planner library) on a GPU cluster's figures:
         baseline (every MP rank repeats gate, dispatch and combine; n-fold
         all-to-all), s1 and s2 predicted, auto's pick, and its speedup over
         the baseline beside the 1.13x-5.77x the Parm paper reports over
         DeepSpeed-MoE on its 1296 layers.
  net    a grid run for real on the emulated multi-host cluster of
         scripts/netcluster.sh (ep hosts x mp CPU devices, rate-limited
         links; needs root): baseline, s1 and s2 measured, verified (sample),
         auto's pick from the live planner; how often auto picks the
         measured-fastest schedule and what it loses when it does not, and
         measured/predicted.
  local  the same on a local cluster (`meshctl up`, 127.0.0.1): no link
         limits, so it checks the jobs rather than the schedules' trade-off.

    bench/moe/run_moe_bench.sh                      # grid, net (root)
    bench/moe/moe_bench.py --quick --bin-dir build  # CI smoke: grid, local

Python 3 standard library only. Exit status: 0 when every job that ran
succeeded with 0 mismatches, 1 otherwise, 2 on bad flags.
"""

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bench", "common"))
import bench_common as bc  # noqa: E402
from bench_common import (fmt, fmt_s, geomean, load_average,  # noqa: E402
                          log, write_spec)

SCHEDULES = ["baseline", "s1", "s2"]
PAPER_MIN, PAPER_MAX = 1.13, 5.77

# The simulated grid: 3 x 3 x 2 x 2 x 2 x 2 x 3 = 432 layers. tokens per MP
# group, hidden, ffn / hidden, experts, top-k, capacity factor, (ep, mp).
GRID = dict(tokens=[1024, 2048, 4096], hidden=[512, 1024, 2048],
            ffn_ratio=[2, 4], experts=[8, 16], top_k=[1, 2],
            capacity=[1.2, 2.4], mesh=[(2, 4), (4, 4), (8, 4)])
QUICK_GRID = dict(tokens=[1024], hidden=[1024], ffn_ratio=[4],
                  experts=[8, 16], top_k=[2], capacity=[1.2],
                  mesh=[(2, 4), (8, 4)])
# The measured grid (CPU devices, so smaller layers): 2 x 2 x 2 x 2 x 2 x 2
# x 2 = 128 layers x 3 schedules.
NET_GRID = dict(tokens=[512, 1024, 2048], hidden=[256, 512],
                ffn_ratio=[2, 4], experts=[4, 8], top_k=[1, 2],
                capacity=[1.2, 2.4], mesh=[(2, 2), (2, 4), (4, 2)])
QUICK_NET_GRID = dict(tokens=[128], hidden=[64], ffn_ratio=[2], experts=[4],
                      top_k=[2], capacity=[1.2], mesh=[(2, 2)])

# The simulated testbed: hosts of 4 GPUs on PCIe (about 100 Gbit/s between
# GPUs of a host, the plausible reading of the paper's 32-GPU cluster) and
# a 100 Gbit/s NIC per host; GPU compute at H100 rates (the nearest preset).
SIM_INTER_GBPS, SIM_INTRA_GBPS, SIM_DEVICE = 100, 100, "h100"

ROW = "%-30s %7s %-8s %10s %10s %10s %10s %-7s %8s %s"
HEADER = ("layer B,M,H,E,k,f", "ep x mp", "where", "baseline", "s1", "s2",
          "auto", "pick", "speedup", "note")


def configs(grid):
    for b, m, r, e, k, f, (ep, mp) in itertools.product(
            grid["tokens"], grid["hidden"], grid["ffn_ratio"],
            grid["experts"], grid["top_k"], grid["capacity"], grid["mesh"]):
        if e % ep or b % mp:
            continue
        yield dict(tokens=b, hidden=m, ffn=r * m, experts=e, top_k=k,
                   capacity=f, ep=ep, mp=mp)


def label(c):
    return "%d,%d,%d,%d,%d,%g" % (c["tokens"], c["hidden"], c["ffn"],
                                  c["experts"], c["top_k"], c["capacity"])


# The pass every job runs: forward, or forward_backward (--pass).
PASS = ["forward"]


def job_spec(c, schedule, dtype="DTYPE_FLOAT32", verify="VERIFY_MODE_SAMPLE"):
    return {"name": "moe-%s-%s" % (label(c).replace(",", "-"), schedule),
            "verify": verify,
            "moe": {"tokens": c["tokens"], "hidden": c["hidden"],
                    "ffn": c["ffn"], "experts": c["experts"],
                    "top_k": c["top_k"], "capacity_factor": c["capacity"],
                    "mesh": {"shape": [c["ep"], c["mp"]]},
                    "schedule": schedule, "dtype": dtype, "pass": PASS[0]}}


def plan(argv_prefix, spec, run):
    """meshctl plan -f: {schedule: predicted seconds} (s2: its best piece
    count) and auto's pick."""
    path = write_spec(spec)
    try:
        result = run(argv_prefix + ["plan", "-f", path, "--output", "json"])
    finally:
        os.unlink(path)
    if result.returncode != 0:
        raise RuntimeError("meshctl plan failed: %s" % result.stderr.strip())
    doc = json.loads(result.stdout)
    predicted, pick = {}, None
    for row in doc.get("alternatives", []):
        name = row["name"].split("/")[0]
        seconds = row["predicted_seconds"]
        if name not in predicted or seconds < predicted[name]:
            predicted[name] = seconds
        if row.get("chosen"):
            pick = name
    return predicted, pick


def section_grid(args):
    grid = QUICK_GRID if args.quick else GRID
    log("# grid: MoE layers planned offline (meshctl plan -f) on hosts of 4 "
        "GPUs: %d Gbit/s between GPUs of a host, %d Gbit/s NIC per host, "
        "%s compute rates, bf16; predicted layer time (%s)" % (
            SIM_INTRA_GBPS, SIM_INTER_GBPS, SIM_DEVICE, PASS[0]))
    log("#" + ROW % HEADER)
    start = time.time()
    rows = []
    for c in configs(grid):
        spec = job_spec(c, "auto", dtype="DTYPE_BFLOAT16")
        hosts = c["ep"]
        predicted, pick = plan(
            [], spec, lambda argv: subprocess.run(
                [args.meshctl] + argv + [
                    "--cluster", "%dx%d" % (hosts, c["mp"]),
                    "--inter-gbps", str(SIM_INTER_GBPS), "--intra-gbps",
                    str(SIM_INTRA_GBPS), "--device-kind", SIM_DEVICE],
                capture_output=True, text=True, timeout=300))
        base = predicted.get("baseline")
        best = min(predicted.get(s, float("inf")) for s in ("s1", "s2"))
        row = dict(c, predicted=predicted, pick=pick,
                   speedup=base / predicted[pick] if base else None,
                   parm_beats_baseline=best < base)
        rows.append(row)
        log(" " + ROW % (label(c), "%dx%d" % (c["ep"], c["mp"]), "sim",
                         fmt_s(base), fmt_s(predicted.get("s1")),
                         fmt_s(predicted.get("s2")),
                         fmt_s(predicted.get(pick)), pick,
                         fmt(row["speedup"], "%.2fx"), ""))
    speedups = [r["speedup"] for r in rows if r["speedup"]]
    picks = {s: sum(r["pick"] == s for r in rows) for s in SCHEDULES}
    log("# Summary (grid, simulated): %d layers; auto over baseline %.2fx "
        "geomean, %.2fx..%.2fx; s1 or s2 beats the baseline in %d/%d layers "
        "(all have mp > 1); auto picks %s; Parm reports %.2fx..%.2fx over "
        "DeepSpeed-MoE on its 1296 layers; %.0f s" % (
            len(rows), geomean(speedups) or 0, min(speedups or [0]),
            max(speedups or [0]),
            sum(r["parm_beats_baseline"] for r in rows), len(rows),
            ", ".join("%s %d" % kv for kv in picks.items()), PAPER_MIN,
            PAPER_MAX, time.time() - start))
    return True, rows


def run_job(cluster, spec, timeout):
    return bc.submit_wait(cluster, spec, timeout)[0]


def measure(cluster, c, args, where):
    """One layer: every schedule measured (median of --repeat), auto's
    pick from the live planner."""
    predicted, pick = plan([], job_spec(c, "auto"),
                           lambda argv: cluster.ctl(argv + ["--live"], 120))
    row = dict(c, where=where, predicted=predicted, pick=pick, measured={},
               runs={}, status="ok")
    runs = {schedule: [] for schedule in SCHEDULES}
    # Repeats interleave the schedules (b, s1, s2, b, s1, s2, ...) so that a
    # slow stretch of this shared machine hits them alike.
    for attempt in range(args.repeat):
        for schedule in SCHEDULES:
            # The first run is verified; repeats only time the layer (the
            # reference costs seconds per job on this machine).
            verify = args.verify if attempt == 0 else "VERIFY_MODE_OFF"
            job = run_job(cluster, job_spec(c, schedule, verify=verify),
                          args.job_timeout)
            result = job.get("result", {})
            if job.get("state") != "SUCCEEDED":
                row["status"] = "%s %s: %s" % (schedule, job.get("state"),
                                               (job.get("message") or "")[:100])
                return row
            if result.get("mismatches", 0) != 0:
                row["status"] = "%s MISMATCH (%s)" % (schedule,
                                                     result["mismatches"])
                return row
            runs[schedule].append(
                result.get("metrics", {}).get("total_seconds"))
    row["runs"] = runs
    row["measured"] = {s: statistics.median(r) for s, r in runs.items()}
    m = row["measured"]
    fastest = min(m, key=m.get)
    # A tie: in at least one round (the schedules run back to back) the
    # pick was the faster of the two. With 5 rounds or fewer a sign test
    # cannot call a difference unless one side wins every round.
    tie = (pick != fastest and args.repeat >= 2 and
           any(p < f for p, f in zip(runs[pick], runs[fastest])))
    row.update(fastest=fastest, hit=pick == fastest, tie=tie,
               loss=m[pick] / m[fastest] - 1,
               speedup=m["baseline"] / m[pick])
    return row


def calibrate(cluster, args):
    """meshctl calibrate on the fresh cluster, so that auto's picks use the
    measured collective times (docs/calibration.md)."""
    start = time.time()
    result = cluster.ctl(["calibrate", "--max-size", args.calibrate_max_size,
                          "--repeat", "3"], 600)
    if result.returncode != 0:
        raise RuntimeError("meshctl calibrate failed: %s" %
                           (result.stderr or result.stdout).strip()[-300:])
    log("# calibrated in %.0f s:" % (time.time() - start))
    for line in result.stdout.splitlines():
        log("#   " + line)


def section_cluster(args, where):
    grid = QUICK_NET_GRID if args.quick else NET_GRID
    grid_configs = [c for c in configs(grid)
                    if not args.mesh_list or
                    (c["ep"], c["mp"]) in args.mesh_list]
    if args.limit:
        grid_configs = grid_configs[:args.limit]
    meshes = sorted({(c["ep"], c["mp"]) for c in grid_configs})
    if where == "net" and os.geteuid() != 0:
        log("# net: SKIPPED: the emulated cluster (scripts/netcluster.sh) "
            "needs root for network namespaces and tc; run it with sudo")
        return True, []
    log("# %s: %d layers x (baseline, s1, s2) as moe jobs, float32, verify "
        "%s (first run), %d run(s) (median); %s; measured: total_seconds "
        "of the layer; auto: the live planner's pick; load average %s" % (
            where, len(grid_configs), args.verify, args.repeat,
            "links %s each way" % args.rate if where == "net"
            else "127.0.0.1, no link limits", load_average()))
    log("#" + ROW % HEADER)
    start = time.time()
    rows = []
    for ep, mp in meshes:
        if where == "net":
            cluster = bc.NetCluster(args.bin_dir, args.rate, ep, devices=mp,
                                    cluster_id="moeb", prefix="moe-netbench-",
                                    worker_args=args.worker_args)
        else:
            cluster = bc.LocalCluster(args.meshctl, args.controller_bin,
                                      args.worker_bin, ep, devices=mp,
                                      prefix="moe-bench-")
        with cluster:
            if args.calibrate:
                calibrate(cluster, args)
            part = []
            for c in grid_configs:
                if (c["ep"], c["mp"]) != (ep, mp):
                    continue
                row = measure(cluster, c, args, where)
                part.append(row)
                m = row["measured"]
                note = row["status"] if row["status"] != "ok" else (
                    "auto hit" if row["hit"] else
                    "auto missed %s by %.0f%%%s" % (
                        row["fastest"], 100 * row["loss"],
                        " (a tie: it won a round)" if row["tie"] else ""))
                log(" " + ROW % (label(c), "%dx%d" % (ep, mp), where,
                                 fmt_s(m.get("baseline")), fmt_s(m.get("s1")),
                                 fmt_s(m.get("s2")),
                                 fmt_s(m.get(row["pick"])), row["pick"],
                                 fmt(row.get("speedup"), "%.2fx"), note))
            cluster.ok = all(r["status"] == "ok" for r in part)
            rows += part
    ok_rows = [r for r in rows if r["status"] == "ok"]
    hits = sum(r["hit"] for r in ok_rows)
    ties = sum(r["tie"] for r in ok_rows)
    misses = [r["loss"] for r in ok_rows if not r["hit"]]
    ratios = [r["measured"][s] / r["predicted"][s] for r in ok_rows
              for s in SCHEDULES if r["predicted"].get(s)]
    beats = sum(min(r["measured"]["s1"], r["measured"]["s2"]) <
                r["measured"]["baseline"] for r in ok_rows)
    # Per schedule: a bias of one schedule's prediction against another's
    # is what turns auto's pick (a ratio of predictions) wrong.
    per_schedule = ", ".join(
        "%s %s" % (s, fmt(geomean([r["measured"][s] / r["predicted"][s]
                                   for r in ok_rows
                                   if r["predicted"].get(s)]), "%.2f"))
        for s in SCHEDULES)
    log("# Summary (%s): %d/%d layers ok; auto picks the measured-fastest "
        "in %d/%d (%.0f%%), or one its runs cannot tell from it in %d/%d "
        "(%.0f%%); worst loss when it misses %s; s1 or s2 beats "
        "the baseline in %d/%d; auto over baseline %.2fx geomean; "
        "measured/predicted geomean %s (%s); %.0f s, load average %s" % (
            where, len(ok_rows), len(rows), hits, len(ok_rows),
            100.0 * hits / max(1, len(ok_rows)), hits + ties, len(ok_rows),
            100.0 * (hits + ties) / max(1, len(ok_rows)),
            "%.0f%%" % (100 * max(misses)) if misses else "-", beats,
            len(ok_rows),
            geomean([r["speedup"] for r in ok_rows]) or 0,
            fmt(geomean(ratios), "%.2f"), per_schedule, time.time() - start,
            load_average()))
    return len(ok_rows) == len(rows), rows


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default=None,
                   help="comma-separated: grid, net, local (default: grid, "
                   "net; with --quick: grid, local)")
    p.add_argument("--quick", action="store_true",
                   help="a few layers only (CI smoke)")
    p.add_argument("--limit", type=int, default=0,
                   help="net/local: run only the first N layers of the grid")
    p.add_argument("--meshes", default="",
                   help="net/local: only these meshes of the grid, e.g. "
                   "2x4,2x2 (hosts x devices)")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per schedule; the median is shown")
    p.add_argument("--verify", default="VERIFY_MODE_SAMPLE",
                   choices=["VERIFY_MODE_FULL", "VERIFY_MODE_SAMPLE",
                            "VERIFY_MODE_OFF"])
    p.add_argument("--pass", dest="pass_", default="forward",
                   choices=["forward", "forward_backward"],
                   help="the pass of every layer (default forward)")
    p.add_argument("--calibrate", action="store_true",
                   help="net/local: run `meshctl calibrate` on each cluster "
                   "before its layers, so auto plans with measured "
                   "collective times")
    p.add_argument("--calibrate-max-size", default="4MiB",
                   help="with --calibrate: the largest size measured")
    p.add_argument("--rate", default="1gbit", help="net: link rate (tc units)")
    bc.add_cluster_args(p, job_timeout=120)
    a = p.parse_args(argv)
    if a.sections is None:
        a.sections = "grid,local" if a.quick else "grid,net"
    a.section_list = bc.split_sections(p, a.sections, ('grid', 'net', 'local'))
    if a.repeat < 1:
        p.error("--repeat must be >= 1")
    if a.limit < 0:
        p.error("--limit must be >= 0")
    try:
        a.mesh_list = [tuple(int(x) for x in m.split("x"))
                       for m in a.meshes.split(",") if m]
        assert all(len(m) == 2 and min(m) > 0 for m in a.mesh_list)
    except (ValueError, AssertionError):
        p.error("--meshes: want HxD[,HxD...], e.g. 2x4")
    PASS[0] = a.pass_
    return a


def main(argv):
    args = parse_args(argv)
    return bc.run_bench("moe_bench", args, {
        "grid": section_grid,
        "net": lambda a: section_cluster(a, "net"),
        "local": lambda a: section_cluster(a, "local")})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
