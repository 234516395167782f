#!/usr/bin/env python3
"""pipeline_bench: pipeline training steps (`pipeline` jobs) under the gpipe,
1f1b and eager_1f1b schedules, with and without overlapping the sends
between the stages' meshes.

Sections (--sections, default paper,net; with --quick: paper,local):

  paper  (offline, `meshctl plan -f` only) the end-to-end settings of the
         cross-mesh resharding paper (Zhuang et al., "On Optimizing the
         Communication of Model Parallelism", MLSys 2023) simulated on its
         testbed: hosts of 4 V100 GPUs (`--device-kind v100`: 125 TFLOP/s
         fp16 tensor peak, 900 GB/s), NVLink inside a host (1200 Gbit/s =
         150 GB/s per device each way) and a 10 Gbit/s network per host.
         Every schedule with and without overlap, for the Alpa-like
         baselines (reshard_strategy local_allgather, Alpa's send slices and
         all-gather them on the receiving mesh, and send_recv) and for ours
         (reshard_strategy auto); the gain of ours (auto, overlap,
         eager_1f1b) over the Alpa-like baseline (local_allgather, no
         overlap, 1f1b) beside the paper's reported end-to-end throughput
         gains, and each row's predicted time over the plan's lower bound
         (the kind's: the busiest stage's GEMMs at the device peak, or all
         micro-batches' transfers over one stage boundary, the longer).
  net    (the emulated multi-host cluster of scripts/netcluster.sh: 2 hosts
         x 1 or 2 CPU devices (--devices), rate-limited links; needs root)
         the three
         schedules run for real, each verified (sample), across
         communication-to-compute ratios (--rate link rates x hidden sizes):
         measured step seconds, predicted, measured/predicted, the gain of
         eager_1f1b over 1f1b measured and predicted, and whether
         |measured/predicted - 1| <= 15% (the goal).
  local  the same on a local cluster (`meshctl up`, 127.0.0.1, no link
         limits): it checks the jobs, not the schedules' trade-off.

The model: every stage runs layers_per_stage MLP blocks (Y = relu(X W1)
W2), tensor-parallel over its mesh. There is no attention and no
convolution, so the paper's models are matched by their activation sizes
and compute per micro-batch, not by their layers:

  GPT-3 2.6B   2 stages, each one host's 4 GPUs (mesh 1x4), hidden 2560,
               32 layers / 2 = 16 per stage, micro-batch 8 sequences x 1024
               tokens = 8192 rows, 4 micro-batches, float16. ffn = 6 h + s
               = 16384, so that one MLP block's forward FLOPs (4 h ffn per
               row) equal one GPT layer's (24 h^2 + 4 s h per token: QKV,
               attention scores and values, output projection, MLP); with
               ffn = 4 h the stage would do 2/3 of the layer's compute and
               the sends would weigh more than in the paper.
  U-Transformer 1B
               2 stages on (1,2) meshes, 4 GPUs in all: each stage on its
               own host (mesh pinned to host 0 and host 1), so that the
               activations cross the 10 Gbit/s network (on one host they
               would move over NVLink and the schedules would hardly
               differ). 32 micro-batches of 2048 / 32 = 64 images; the
               activation between the stages is 480 channels x 32 x 32
               pixels x 64 images = 31.5 M elements (60 MiB in float16):
               rows = 64 x 32 x 32 = 65536, hidden = 480, ffn = 4 h = 1920.
               The paper gives no FLOPs or stage times for this model; we
               take about 0.3 TFLOP of training compute per image for each
               stage's half of a 1B-parameter U-Net-like model at 32 x 32
               (a rough figure: ~0.2 TFLOP forward per image for the whole
               model), i.e. ~19 TFLOP per stage and micro-batch, which
               layers_per_stage = 26 gives (26 x 6 x 2 x 65536 x 480 x
               1920). Its predicted gains follow from that choice; the full
               run also prints 13 and 52 layers per stage to show how the
               gain moves with the compute-to-communication ratio.

Both send each stage's output whole on every device of its mesh to whole on
every device of the next (R,R -> R,R: the layout after a Megatron-style
all-reduce), the case Alpa's local all-gather was made for.

    bench/pipeline/run_pipeline_bench.sh --sections paper
    bench/pipeline/pipeline_bench.py --quick --bin-dir build  # paper, local
    sudo bench/pipeline/pipeline_bench.py --sections net --rate 1gbit,100mbit

Python 3 standard library only. Exit status: 0 when every plan and job
succeeded (jobs with 0 mismatches) and every prediction is at or above its
lower bound, 1 otherwise, 2 when a binary is missing.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "common"))
import bench_common as bc  # noqa: E402
from bench_common import (fmt, fmt_s, geomean, load_average,  # noqa: E402
                          log, write_spec)

SCHEDULES = ["gpipe", "1f1b", "eager_1f1b"]
# The measured goal: |measured / predicted - 1| at most this.
AGREEMENT = 0.15

# The paper's testbed (AWS p3: 4 x V100 SXM2 per host, NVLink, 10 Gbit/s).
SIM_DEVICE, SIM_INTER_GBPS, SIM_INTRA_GBPS = "v100", 10, 1200
# Strategies between the stages: the two Alpa-like baselines, then ours.
BASELINE, NAIVE, OURS = "local_allgather", "send_recv", "auto"
PAPER_STRATEGIES = [NAIVE, BASELINE, OURS]

GPT3 = dict(key="gpt3-2.6b", title="GPT-3 2.6B", stage_mesh=(1, 4),
            hosts=2, devices=4, rows=8192, hidden=2560, ffn=16384,
            layers=16, microbatches=4, paper_gain=0.10)
UTRANS = dict(key="utrans-1b", title="U-Transformer 1B", stage_mesh=(1, 2),
              hosts=2, devices=4, rows=65536, hidden=480, ffn=1920,
              layers=26, microbatches=32, paper_gain=0.50)


def paper_settings(quick):
    if quick:
        return [GPT3, UTRANS]
    # The U-Transformer's compute is our estimate: half and double it too.
    return [GPT3, UTRANS,
            dict(UTRANS, key="utrans-1b-L13", layers=13, paper_gain=None),
            dict(UTRANS, key="utrans-1b-L52", layers=52, paper_gain=None)]


def pipeline_spec(c, schedule, strategy="auto", overlap=True,
                  dtype="DTYPE_FLOAT32", verify="VERIFY_MODE_SAMPLE",
                  layouts=(("R,R", "R,R"), ("R,R", "R,R")), pin=False):
    """A two-stage JobSpec: stage i on a c["stage_mesh"] mesh (pinned to
    host i with `pin`), layouts[i] = (input_spec, output_spec)."""
    stages = []
    for i, (inp, out) in enumerate(layouts):
        mesh = {"shape": list(c["stage_mesh"])}
        if pin:
            mesh["first_host"] = i
        stages.append({"mesh": mesh, "input_spec": {"text": inp},
                       "output_spec": {"text": out}})
    return {"name": "pipe-%s-%s%s" % (c["key"], schedule,
                                      "" if overlap else "-noov"),
            "verify": verify,
            "pipeline": {"stages": stages,
                         "microbatches": c["microbatches"],
                         "microbatch_size": c["rows"], "hidden": c["hidden"],
                         "ffn": c["ffn"], "layers_per_stage": c["layers"],
                         "dtype": dtype, "schedule": schedule,
                         "no_overlap": not overlap,
                         "reshard_strategy": strategy, "seed": 1}}


def plan_alternatives(meshctl, spec, cluster_flags):
    """`meshctl plan -f` (offline): {alternative name: row}."""
    path = write_spec(spec)
    try:
        result = subprocess.run([meshctl, "plan", "-f", path, "--output",
                                 "json"] + cluster_flags,
                                capture_output=True, text=True, timeout=600)
    finally:
        os.unlink(path)
    if result.returncode != 0:
        raise RuntimeError("meshctl plan (%s): %s" % (
            spec["name"], (result.stderr or result.stdout).strip()[-400:]))
    return {row["name"]: row
            for row in json.loads(result.stdout).get("alternatives", [])}


def gain(base, t):
    """Throughput gain of a step of t seconds over one of base seconds."""
    return base / t - 1 if base and t else None


def pct(x):
    return fmt(100 * x if x is not None else None, "%+.1f%%")


PAPER_ROW = "%-18s %-15s %-10s %-7s %11s %9s %9s %11s %s"
PAPER_HEADER = ("setting", "strategy", "schedule", "overlap", "predicted",
                "x bound", "gain", "act mem/dev", "note")


def section_paper(args):
    def flags_of(c):
        return ["--cluster", "%dx%d" % (c["hosts"], c["devices"]),
                "--inter-gbps", str(SIM_INTER_GBPS), "--intra-gbps",
                str(SIM_INTRA_GBPS), "--device-kind", SIM_DEVICE]
    log("# paper: offline (meshctl plan -f) on the paper's testbed: hosts of "
        "4 V100 (%s preset), %d Gbit/s per device inside a host, %d Gbit/s "
        "per host between hosts; float16; MLP blocks only (no attention or "
        "convolutions), sized as the docstring says; gain: throughput over "
        "the Alpa-like baseline (%s, 1f1b, no overlap); x bound: predicted "
        "over the plan's lower bound (the busiest stage's GEMMs or one stage "
        "boundary's transfers, whichever is longer); act mem/dev: predicted "
        "peak "
        "activation bytes per device" % (SIM_DEVICE, SIM_INTRA_GBPS,
                                         SIM_INTER_GBPS, BASELINE))
    log("#" + PAPER_ROW % PAPER_HEADER)
    start = time.time()
    ok, rows, summaries = True, [], []
    for c in paper_settings(args.quick):
        log("# %s (%s): 2 stages x mesh %dx%d, one host each, %d "
            "micro-batches of %d rows, hidden %d, ffn %d, %d layers per "
            "stage" % (
                c["key"], c["title"], c["stage_mesh"][0], c["stage_mesh"][1],
                c["microbatches"], c["rows"], c["hidden"], c["ffn"],
                c["layers"]))
        table = {}
        for strategy in PAPER_STRATEGIES:
            alts = plan_alternatives(
                args.meshctl, pipeline_spec(c, "auto", strategy,
                                            dtype="DTYPE_FLOAT16", pin=True),
                flags_of(c))
            for schedule in SCHEDULES:
                for overlap in (True, False):
                    name = schedule + ("" if overlap else " (no overlap)")
                    row = alts.get(name)
                    if row is None:
                        ok = False
                        log("# %s %s: alternative '%s' missing from the "
                            "plan (got %s)" % (c["key"], strategy, name,
                                               sorted(alts)))
                        continue
                    table[(strategy, schedule, overlap)] = row
        base = table.get((BASELINE, "1f1b", False), {}).get(
            "predicted_seconds")
        for strategy in PAPER_STRATEGIES:
            for schedule in SCHEDULES:
                for overlap in (True, False):
                    row = table.get((strategy, schedule, overlap))
                    if row is None:
                        continue
                    t = row["predicted_seconds"]
                    bound = row.get("lower_bound_seconds")
                    note = []
                    if (strategy, schedule, overlap) == (BASELINE, "1f1b",
                                                         False):
                        note.append("Alpa-like baseline")
                    if (strategy, schedule, overlap) == (NAIVE, "1f1b",
                                                         False):
                        note.append("send_recv baseline")
                    if (strategy, schedule, overlap) == (OURS, "eager_1f1b",
                                                         True):
                        note.append("ours")
                    if strategy == OURS and row.get("chosen"):
                        note.append("auto's pick")
                    if not t or t <= 0 or (bound and t < bound * (1 - 1e-9)):
                        ok = False
                        note.append("BAD: predicted below the lower bound")
                    log(" " + PAPER_ROW % (
                        c["key"], strategy, schedule,
                        "yes" if overlap else "no", fmt_s(t),
                        fmt(t / bound if bound else None, "%.2f"),
                        pct(gain(base, t)),
                        fmt((row.get("peak_memory_bytes") or 0) / 2**30,
                            "%.2f GiB"), ", ".join(note)))
                    rows.append(dict(section="paper", setting=c["key"],
                                     strategy=strategy, schedule=schedule,
                                     overlap=overlap, predicted=t,
                                     lower_bound=bound,
                                     gain_over_baseline=gain(base, t),
                                     peak_memory_bytes=row.get(
                                         "peak_memory_bytes")))
        ours = table.get((OURS, "eager_1f1b", True), {}).get(
            "predicted_seconds")
        naive = table.get((NAIVE, "1f1b", False), {}).get("predicted_seconds")
        # The fastest row of all, when it beats ours by more than 0.5%.
        best = min(table.items(), key=lambda kv: kv[1]["predicted_seconds"],
                   default=None)
        bound = (table.get((OURS, "eager_1f1b", True)) or {}).get(
            "lower_bound_seconds")
        summaries.append("%s: ours %s over Alpa-like, %s over send_recv "
                         "(paper %s), ours x bound %s%s" % (
                             c["key"], pct(gain(base, ours)),
                             pct(gain(naive, ours)),
                             pct(c["paper_gain"]) if c["paper_gain"]
                             is not None else "-",
                             fmt(ours / bound if ours and bound else None,
                                 "%.2f"),
                             "" if not best or not ours or
                             best[1]["predicted_seconds"] > ours / 1.005 else
                             " (fastest: %s %s%s, %s)" % (
                                 best[0][0], best[0][1],
                                 "" if best[0][2] else " no overlap",
                                 pct(gain(ours,
                                          best[1]["predicted_seconds"])))))
    log("# Summary (paper, simulated): %s; %.0f s" % (
        "; ".join(summaries), time.time() - start))
    return ok, rows


# The measured grid: 2 stages, each one host's CPU devices; rows, layers,
# micro-batches fixed, the hidden size and the link rate varied (the sends
# grow as hidden, the compute as hidden^2). 2048 rows make every activation
# at least 512 KiB, so that the links' token-bucket burst (128 KiB at these
# rates, scripts/netcluster.sh) is a small part of each transfer: with
# 128 KiB activations a whole send passes in one burst, faster than the
# rate the planner is told.
NET = dict(rows=2048, layers=2, microbatches=8, hidden=[64, 128])
QUICK_NET = dict(rows=64, layers=2, microbatches=4, hidden=[128])
NET_LAYOUTS = (("S0,R", "R,S1"), ("R,S1", "R,R"))

NET_ROW = "%-9s %6s %9s %-10s %10s %10s %9s %6s %9s %9s %8s %s"
NET_HEADER = ("link", "hidden", "comm/comp", "schedule", "measured",
              "predicted", "meas/pred", "<=15%", "gain meas", "gain pred",
              "bubble", "note")


def parse_rate_bps(rate):
    """A tc rate ("1gbit", "100mbit", "500kbit") in bits/s; None if not
    one."""
    units = (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0))
    for suffix, scale in units:
        if rate.lower().endswith(suffix):
            try:
                return float(rate[:-len(suffix)]) * scale
            except ValueError:
                return None
    return None


def measure(cluster, c, schedule, args):
    """One schedule: median step seconds of --repeat runs (the first
    verified), the job's predicted step seconds, its bubble fraction and
    stage 0's busy seconds; status "ok" or what failed."""
    runs, first = [], None
    for attempt in range(args.repeat):
        verify = args.verify if attempt == 0 else "VERIFY_MODE_OFF"
        job, _ = bc.submit_wait(
            cluster, pipeline_spec(c, schedule, verify=verify,
                                   layouts=NET_LAYOUTS), args.job_timeout)
        result = job.get("result", {})
        if job.get("state") != "SUCCEEDED":
            return dict(status="%s: %s" % (job.get("state"),
                                           (job.get("message") or "")[:100]))
        if result.get("mismatches", 0) != 0:
            return dict(status="MISMATCH (%s)" % result["mismatches"])
        m = result.get("metrics", {})
        if "step_seconds" not in m:
            return dict(status="no step_seconds metric")
        first = first or m
        runs.append(m["step_seconds"])
    return dict(status="ok", measured=statistics.median(runs),
                predicted=first.get("predicted_step_seconds"),
                bubble=first.get("bubble_fraction"),
                busy0=first.get("stage0_busy_seconds"))


def section_cluster(args, where):
    grid = QUICK_NET if args.quick else NET
    hidden = args.hidden_list or grid["hidden"]
    rates = args.rate_list[:1] if args.quick else args.rate_list
    if where == "local":
        rates = ["local"]
    if where == "net" and os.geteuid() != 0:
        log("# net: SKIPPED: the emulated cluster (scripts/netcluster.sh) "
            "needs root for network namespaces and tc; run it with sudo")
        return True, []
    devices = args.devices or (1 if where == "net" and
                               (os.cpu_count() or 1) < 8 else 2)
    log("# %s: 2 stages x mesh 1x%d (one host each), %d micro-batches of %d "
        "rows, ffn 4 x hidden, %d layers per stage, float32, layouts "
        "S0,R>R,S1 | R,S1>R,R, reshard auto, verify %s (first run), %d "
        "run(s) (median); %s; measured: step_seconds; predicted: the live "
        "planner's; comm/comp: one activation at the link rate over stage "
        "0's measured busy time per micro-batch; gain: eager_1f1b over "
        "1f1b; load average %s" % (
            where, devices, grid["microbatches"], grid["rows"],
            grid["layers"], args.verify, args.repeat,
            "links " + ", ".join(rates) + " each way, queues %g ms" %
            args.queue_ms if where == "net"
            else "127.0.0.1, no link limits", load_average()))
    log("#" + NET_ROW % NET_HEADER)
    start = time.time()
    rows = []
    for rate in rates:
        if where == "net":
            cluster = bc.NetCluster(args.bin_dir, rate, 2, devices=devices,
                                    cluster_id="pipb",
                                    prefix="pipeline-netbench-",
                                    worker_args=args.worker_args,
                                    queue_ms=args.queue_ms)
        else:
            cluster = bc.LocalCluster(args.meshctl, args.controller_bin,
                                      args.worker_bin, 2, devices=devices,
                                      prefix="pipeline-bench-")
        with cluster:
            part = []
            for h in hidden:
                c = dict(key="%s-h%d" % (rate, h), stage_mesh=(1, devices),
                         rows=grid["rows"], hidden=h, ffn=4 * h,
                         layers=grid["layers"],
                         microbatches=grid["microbatches"])
                got = {s: measure(cluster, c, s, args) for s in SCHEDULES}
                bps = parse_rate_bps(rate)
                act = c["rows"] * h * 4
                busy = got["1f1b"].get("busy0")
                ratio_cc = (act * 8 / bps / (busy / c["microbatches"])
                            if bps and busy else None)
                g_meas = gain(got["1f1b"].get("measured"),
                              got["eager_1f1b"].get("measured"))
                g_pred = gain(got["1f1b"].get("predicted"),
                              got["eager_1f1b"].get("predicted"))
                for s in SCHEDULES:
                    r = got[s]
                    mp = bc.ratio(r.get("measured"), r.get("predicted"))
                    within = mp is not None and abs(mp - 1) <= AGREEMENT
                    eager = s == "eager_1f1b"
                    log(" " + NET_ROW % (
                        rate, h, fmt(ratio_cc, "%.2f"), s,
                        fmt_s(r.get("measured")), fmt_s(r.get("predicted")),
                        fmt(mp, "%.2f"),
                        "-" if mp is None else ("yes" if within else "no"),
                        pct(g_meas) if eager else "",
                        pct(g_pred) if eager else "",
                        fmt(r.get("bubble"), "%.2f"),
                        "" if r["status"] == "ok" else r["status"]))
                    part.append(dict(section=where, rate=rate, hidden=h,
                                     schedule=s, status=r["status"],
                                     measured=r.get("measured"),
                                     predicted=r.get("predicted"),
                                     ratio=mp, within=within,
                                     comm_over_compute=ratio_cc,
                                     bubble=r.get("bubble"),
                                     eager_gain_measured=g_meas,
                                     eager_gain_predicted=g_pred))
            cluster.ok = all(r["status"] == "ok" for r in part)
            rows += part
    good = [r for r in rows if r["status"] == "ok"]
    ratios = [r["ratio"] for r in good if r["ratio"]]
    within = sum(r["within"] for r in good)
    eager = [r for r in good if r["schedule"] == "eager_1f1b" and
             r["eager_gain_measured"] is not None and
             r["eager_gain_predicted"] is not None]
    # eager_1f1b faster than 1f1b by more than 1%, measured and predicted.
    faster_meas = sum(r["eager_gain_measured"] > 0.01 for r in eager)
    faster_pred = sum(r["eager_gain_predicted"] > 0.01 for r in eager)
    log("# Summary (%s): %d/%d jobs ok (verified, 0 mismatches); "
        "measured/predicted geomean %s, %s..%s; within 15%%: %d/%d; "
        "eager_1f1b over 1f1b geomean measured %s, predicted %s (faster by "
        "> 1%%: measured in %d/%d, predicted in %d/%d); %.0f s, load average "
        "%s" % (
            where, len(good), len(rows), fmt(geomean(ratios), "%.2f"),
            fmt(min(ratios) if ratios else None, "%.2f"),
            fmt(max(ratios) if ratios else None, "%.2f"), within, len(good),
            pct(gain_geomean([r["eager_gain_measured"] for r in eager])),
            pct(gain_geomean([r["eager_gain_predicted"] for r in eager])),
            faster_meas, len(eager), faster_pred, len(eager),
            time.time() - start, load_average()))
    return len(good) == len(rows), rows


def gain_geomean(gains):
    g = geomean([1 + x for x in gains])
    return g - 1 if g else None


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default=None,
                   help="comma-separated: paper, net, local (default: paper, "
                   "net; with --quick: paper, local)")
    p.add_argument("--quick", action="store_true",
                   help="a short run: the two paper settings only; net and "
                   "local: one link rate, hidden 128, 4 micro-batches of "
                   "64 rows")
    p.add_argument("--rate", default="1gbit,100mbit",
                   help="net: link rates (tc units), comma-separated; one "
                   "cluster each")
    p.add_argument("--hidden", default="",
                   help="net/local: hidden sizes, comma-separated (default "
                   "64,128, about 6 minutes with --repeat 3 on 2 cores; "
                   "256 adds as much again; with --quick 128)")
    p.add_argument("--devices", type=int, default=0,
                   help="net/local: CPU devices per host = per stage (each "
                   "stage a 1xN mesh). Default 2, but 1 for net on a "
                   "machine of fewer than 8 cores: 2 hosts x 2 devices "
                   "computing at once oversubscribe its cores, and the "
                   "measured compute falls behind the planner's rates")
    p.add_argument("--repeat", type=int, default=1,
                   help="net/local: runs per schedule; the median is shown")
    p.add_argument("--queue-ms", type=float, default=5,
                   help="net: each shaped link's queue, milliseconds of "
                   "traffic (default 5). The two stages send both ways at "
                   "once, and a receiver's ready notice waits behind the "
                   "packets its own host has queued the other way: a "
                   "datacenter NIC drains them in microseconds, the "
                   "emulated cluster's default queue (50 ms, sized for the "
                   "incast of many hosts; two hosts have none) in up to "
                   "that long")
    p.add_argument("--verify", default="VERIFY_MODE_SAMPLE",
                   choices=["VERIFY_MODE_FULL", "VERIFY_MODE_SAMPLE",
                            "VERIFY_MODE_OFF"])
    bc.add_cluster_args(p, job_timeout=300)
    a = p.parse_args(argv)
    if a.sections is None:
        a.sections = "paper,local" if a.quick else "paper,net"
    a.section_list = bc.split_sections(p, a.sections, ('paper', 'net', 'local'))
    a.rate_list = [r for r in a.rate.split(",") if r]
    if not a.rate_list or any(parse_rate_bps(r) is None
                              for r in a.rate_list):
        p.error("--rate: want tc rates such as 1gbit,100mbit")
    try:
        a.hidden_list = [int(x) for x in a.hidden.split(",") if x]
        assert all(x > 0 for x in a.hidden_list)
    except (ValueError, AssertionError):
        p.error("--hidden: want N[,N...], e.g. 128,512")
    if a.repeat < 1:
        p.error("--repeat must be >= 1")
    if a.devices < 0 or a.devices > 8:
        p.error("--devices must be 1..8 (0: the default)")
    return a


def main(argv):
    args = parse_args(argv)
    return bc.run_bench("pipeline_bench", args, {
        "paper": section_paper,
        "net": lambda a: section_cluster(a, "net"),
        "local": lambda a: section_cluster(a, "local")})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
