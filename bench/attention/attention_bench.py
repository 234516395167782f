#!/usr/bin/env python3
"""attention_bench: sequence-parallel self-attention (`attention` jobs)
measured against the compute-only ideal.

Sections:
  plan   (offline, `meshctl plan -f`): every algorithm (rsa, ring, ulysses)
         on hosts of 8 H100-class GPUs, predicted time beside the
         compute-only ideal (the attention FLOPs split evenly, no
         communication) and the plan's memory per device, for growing
         sequence lengths; the longest sequence whose plan fits a per-device
         memory budget, ring against a tensor-parallel-only baseline (each
         device holding the whole sequence of heads / P heads).
  net    (the emulated multi-host cluster, root): every algorithm x layout
         measured, verified, beside two ideals: the compute-only ideal of
         the same plan (FLOPs over the probed GEMM rate) and the one-device
         ideal (the same attention run as a job on one device, no
         communication, its time divided by the P devices: what the ring
         would take if its kernel ran as fast as alone and nothing waited
         for a transfer, the yardstick of ring-flash-attention's ~90%);
         with causal balance (max / mean per rank of the CPU seconds
         its attention steps used; `wall`: of their spans, which also
         hold the time a shared core ran something else) and the work
         balance the plan gives (max / mean attention FLOPs).
  local  (a local cluster of 127.0.0.1 workers): the same, no link limits.

Every section runs the forward pass and the forward and backward pass
(`--passes`; label suffix "+bwd", whose ideal counts the backward's 10
FLOPs per score pair and head_dim beside the forward's 4). Every row
prints measured (or predicted) seconds, the ideal, and their ratio; the
closing line summarizes ring/ideal, rsa/ring and the balance of
contiguous against zigzag, per pass.
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "common"))
import bench_common as bc  # noqa: E402
from bench_common import fmt, fmt_s, geomean, log, write_spec  # noqa: E402

ALGORITHMS = ["rsa", "ring", "ulysses"]
ROW = "%-28s %-10s %-8s %11s %11s %7s %11s %7s %8s %6s %6s %10s %s"
HEADER = ("layer B,H,Hkv,S,D,causal", "layout", "algo", "seconds", "ideal",
          "ideal/t", "1dev/P", "1dev/Pt", "balance", "wall", "work", "mem/dev",
          "note")


def spec(c, algorithm, verify="VERIFY_MODE_SAMPLE", dtype="DTYPE_FLOAT32"):
    return {"name": "attn-%s-%d-%s" % (c["layout"], c["seq"], algorithm),
            "verify": verify,
            "attention": {"batch": c["batch"], "heads": c["heads"],
                          "kv_heads": c["kv_heads"], "seq_len": c["seq"],
                          "head_dim": c["dim"], "causal": c["causal"],
                          "layout": c["layout"], "algorithm": algorithm,
                          "dtype": dtype, "pass": c.get("pass", "forward"),
                          "mesh": {"shape": list(c["mesh"])}}}


def label(c):
    return "%d,%d,%d,%d,%d,%s%s" % (
        c["batch"], c["heads"], c["kv_heads"], c["seq"], c["dim"],
        "causal" if c["causal"] else "full",
        "+bwd" if c.get("pass") == "forward_backward" else "")


def plan(argv, job, cluster_flags):
    path = write_spec(job)
    try:
        result = subprocess.run(argv + ["plan", "-f", path, "--output",
                                        "json"] + cluster_flags,
                                capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(path)
    if result.returncode != 0:
        raise RuntimeError("meshctl plan: %s" % result.stderr.strip()[-300:])
    return json.loads(result.stdout)


def memory_of(doc):
    """Bytes of the chosen plan's buffers on its busiest device."""
    per = {}
    plan_ = doc.get("plan", {})
    sizes = {"DTYPE_FLOAT32": 4, "DTYPE_BFLOAT16": 2, "DTYPE_FLOAT16": 2,
             "DTYPE_FLOAT64": 8}
    tensors = plan_.get("tensors", [])
    for b in plan_.get("buffers", []):
        n = 1
        for i in b.get("box", []):
            n *= int(i.get("end", 0)) - int(i.get("begin", 0))
        t = tensors[int(b.get("tensor", 0))]
        per[b.get("device", 0)] = per.get(b.get("device", 0), 0) + n * sizes.get(
            t.get("dtype", "DTYPE_FLOAT32"), 4)
    return max(per.values()) if per else None


def section_plan(args):
    gpus = 8
    log("# plan: offline on 1 host x %d H100 (NVLink 900 GB/s as 7200 "
        "Gbit/s per device), bf16, batch 1, 32 heads (8 kv heads), head_dim "
        "128, causal, zigzag; predicted seconds against the compute-only "
        "ideal" % gpus)
    log("#" + ROW % HEADER)
    rows, ok = [], True
    for pass_ in args.passes:
        for seq in ([8192, 32768] if args.quick else [8192, 32768, 131072]):
            c = dict(batch=1, heads=32, kv_heads=8, seq=seq, dim=128,
                     causal=True, layout="zigzag", mesh=(1, gpus), **{
                         "pass": pass_})
            for algorithm in ALGORITHMS:
                doc = plan([args.meshctl], spec(c, algorithm,
                                                  dtype="DTYPE_BFLOAT16"),
                           ["--cluster", "1x%d" % gpus, "--inter-gbps", "400",
                            "--intra-gbps", "7200", "--device-kind", "h100"])
                rows.append(plan_row(c, algorithm, doc))
    for pass_ in args.passes:
        by = {}
        for r in rows:
            if r["pass"] == pass_:
                by.setdefault(r["seq"], {})[r["algorithm"]] = r
        fractions = [v["ring"]["ideal"] / v["ring"]["predicted"]
                     for v in by.values() if v["ring"]["predicted"]]
        log("# Summary (plan, %s): ring predicted at %s of the compute-only "
            "ideal (geomean); rsa / ring %s; memory per device at the "
            "longest sequence: %s" % (
                pass_, fmt(geomean(fractions), "%.2f"),
                fmt(geomean([v["rsa"]["predicted"] / v["ring"]["predicted"]
                             for v in by.values()]), "%.2fx"),
                ", ".join("%s %.0f MiB" % (a, by[max(by)][a]["memory"] /
                                            2**20)
                          for a in ALGORITHMS if by[max(by)][a]["memory"])))
    return ok, rows


def plan_row(c, algorithm, doc):
    alt = [a for a in doc.get("alternatives", []) if a.get("chosen")]
    seconds = alt[0]["predicted_seconds"] if alt else None
    ideal = alt[0].get("lower_bound_seconds") if alt else None
    mem = memory_of(doc)
    log(" " + ROW % (label(c), c["layout"], algorithm, fmt_s(seconds),
                     fmt_s(ideal), fmt(ideal / seconds if seconds else None,
                                       "%.2f"), "-", "-", "-", "-", "-",
                     bc.fmt(mem / 2**20 if mem else None, "%.0f MiB"), ""))
    return dict(c, algorithm=algorithm, predicted=seconds, ideal=ideal,
                memory=mem, where="plan")


def run_job(cluster, job, timeout):
    return bc.submit_wait(cluster, job, timeout)[0]


def one_device_seconds(cluster, c, ranks, timeout, cache):
    """The one-device ideal of case `c`: the same attention (every head,
    the whole sequence) as a job on one device, where nothing is sent,
    its total_seconds over `ranks`; None if that job fails. One job per
    (pass, seq, causal): the layout does not matter on one device."""
    key = (c["pass"], c["seq"], c["causal"])
    if key not in cache:
        job = run_job(cluster, spec(dict(c, mesh=(1, 1), layout="contiguous"),
                                    "ring"), timeout)
        res = job.get("result", {})
        t = res.get("metrics", {}).get("total_seconds")
        good = job.get("state") == "SUCCEEDED" and res.get(
            "mismatches", 1) == 0
        if not good:
            log("# one-device job for %s: %s: %s" % (
                label(c), job.get("state"), (job.get("message") or "")[:120]))
        cache[key] = t / ranks if good and t else None
    return cache[key]


def section_cluster(args, where):
    hosts, devices = (2, 2) if args.quick else (args.hosts, args.devices)
    ranks = hosts * devices
    seqs = [256] if args.quick else args.seq_lens
    if where == "net" and os.geteuid() != 0:
        log("# net: SKIPPED: the emulated cluster needs root")
        return True, []
    log("# %s: %d x %d devices, float32, verify sample; measured "
        "total_seconds against the compute-only ideal of the same plan; "
        "balance: max / mean compute CPU seconds per rank (wall: of the "
        "steps' spans); work: max / mean attention FLOPs the plan gives a "
        "rank; load average %s" % (
            where, hosts, devices, bc.load_average()))
    log("#" + ROW % HEADER)
    if where == "net":
        cluster = bc.NetCluster(args.bin_dir, args.rate, hosts,
                                devices=devices, cluster_id="attb",
                                prefix="attention-netbench-",
                                worker_args=args.worker_args)
    else:
        cluster = bc.LocalCluster(args.meshctl, args.controller_bin,
                                  args.worker_bin, hosts, devices=devices,
                                  prefix="attention-bench-")
    rows, ok, one_device = [], True, {}
    with cluster:
        cases = [(pass_, seq, causal, layout) for pass_ in args.passes
                 for seq in seqs
                 for causal, layout in ((False, "contiguous"),
                                        (True, "contiguous"),
                                        (True, "zigzag"))]
        for pass_, seq, causal, layout in cases:
            c = dict(batch=1, heads=ranks, kv_heads=ranks, seq=seq,
                     dim=64, causal=causal, layout=layout,
                     mesh=(hosts, devices), **{"pass": pass_})
            alone = one_device_seconds(cluster, c, ranks, args.job_timeout,
                                       one_device)
            for algorithm in ALGORITHMS:
                job = run_job(cluster, spec(c, algorithm), args.job_timeout)
                res = job.get("result", {})
                m = res.get("metrics", {})
                good = (job.get("state") == "SUCCEEDED" and
                        res.get("mismatches", 1) == 0)
                ok = ok and good
                t = m.get("total_seconds")
                ideal = m.get("compute_only_ideal_seconds")
                note = "" if good else "%s: %s" % (
                    job.get("state"), (job.get("message") or "")[:80])
                log(" " + ROW % (label(c), layout, algorithm, fmt_s(t),
                                 fmt_s(ideal),
                                 fmt(ideal / t if t and ideal else None,
                                     "%.2f"), fmt_s(alone),
                                 fmt(alone / t if t and alone else None,
                                     "%.2f"),
                                 fmt(m.get("causal_balance"), "%.2f"),
                                 fmt(m.get("causal_balance_wall"), "%.2f"),
                                 fmt(m.get("work_balance"), "%.2f"),
                                 fmt((m.get("memory_bytes_per_rank_max")
                                      or 0) / 2**20, "%.1f MiB"), note))
                rows.append(dict(c, algorithm=algorithm, where=where,
                                 seconds=t, ideal=ideal, alone=alone,
                                 ok=good,
                                 balance=m.get("causal_balance"),
                                 work_balance=m.get("work_balance"),
                                 predicted=m.get(
                                     "predicted_total_seconds")))
        cluster.ok = ok
    for pass_ in args.passes:
        summarize(where, [r for r in rows if r["pass"] == pass_], pass_)
    return ok, rows


def summarize(where, rows, pass_):
    good = [r for r in rows if r["ok"] and r["seconds"]]
    ring = [r["ideal"] / r["seconds"] for r in good
            if r["algorithm"] == "ring" and r["ideal"]]
    ring_alone = {lay: [r["alone"] / r["seconds"] for r in good
                        if r["algorithm"] == "ring" and r.get("alone") and
                        r["layout"] == lay and (r["causal"] or
                                                lay == "contiguous")]
                  for lay in ("contiguous", "zigzag")}
    pairs = {}
    for r in good:
        pairs.setdefault((r["seq"], r["causal"], r["layout"]), {})[
            r["algorithm"]] = r["seconds"]
    rsa_over_ring = [p["rsa"] / p["ring"] for p in pairs.values()
                     if "rsa" in p and "ring" in p]
    balance = {lay: [r["balance"] for r in good if r["causal"] and
                     r["layout"] == lay and r["algorithm"] == "ring" and
                     r["balance"]] for lay in ("contiguous", "zigzag")}
    log("# Summary (%s, %s): %d/%d jobs ok; ring at %s of the compute-only "
        "ideal (geomean), at %s of the one-device ideal with zigzag (causal) "
        "and %s with contiguous (full and causal); "
        "rsa / ring %s (geomean; ring faster in %d/%d); "
        "causal balance of ring: contiguous %s, zigzag %s (max / mean "
        "compute CPU seconds)" % (
            where, pass_, len(good), len(rows), fmt(geomean(ring), "%.2f"),
            fmt(geomean(ring_alone["zigzag"]), "%.2f"),
            fmt(geomean(ring_alone["contiguous"]), "%.2f"),
            fmt(geomean(rsa_over_ring), "%.2fx"),
            sum(x > 1 for x in rsa_over_ring), len(rsa_over_ring),
            fmt(geomean(balance["contiguous"]), "%.2f"),
            fmt(geomean(balance["zigzag"]), "%.2f")))


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default=None,
                   help="comma-separated: plan, net, local (default: plan, "
                   "net; with --quick: plan, local)")
    p.add_argument("--quick", action="store_true", help="CI smoke")
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--seq-lens", default="1024,4096",
                   help="net/local: sequence lengths")
    p.add_argument("--rate", default="1gbit", help="net: link rate")
    p.add_argument("--passes", default="forward,forward_backward",
                   help="comma-separated: forward, forward_backward")
    p.add_argument("--job-timeout", type=float, default=300)
    p.add_argument("--bin-dir", default=os.environ.get("MESHCAST_BUILD_DIR"))
    p.add_argument("--json", default=None)
    p.add_argument("--worker-args", default="",
                   help="net: extra flags for every worker, one string "
                   "(scripts/netcluster.sh --worker-args)")
    a = p.parse_args(argv)
    if a.sections is None:
        a.sections = "plan,local" if a.quick else "plan,net"
    a.section_list = [s for s in a.sections.split(",") if s]
    for s in a.section_list:
        if s not in ("plan", "net", "local"):
            p.error("--sections: unknown '%s'; allowed: plan, net, local" % s)
    a.passes = [x for x in a.passes.split(",") if x]
    for x in a.passes:
        if x not in ("forward", "forward_backward"):
            p.error("--passes: unknown '%s'; allowed: forward, "
                    "forward_backward" % x)
    try:
        a.seq_lens = [int(x) for x in a.seq_lens.split(",") if x]
    except ValueError:
        p.error("--seq-lens: want N[,N...]")
    return a


def main(argv):
    args = parse_args(argv)
    return bc.run_bench("attention_bench", args, {
        "plan": section_plan,
        "net": lambda a: section_cluster(a, "net"),
        "local": lambda a: section_cluster(a, "local")})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
