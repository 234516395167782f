#!/usr/bin/env python3
"""weights_cluster_bench: a whole model's weights moved from a training mesh
to inference replicas (`reshard_model` jobs), measured on a cluster, every
strategy, next to the prediction and the lower bound: the measured half of
bench/weights (weights_bench simulates the frontier-scale move).

The model is weights_bench's (bench/weights/weights_model.h: the MLA + MoE
architecture of DeepSeek-V3 / Kimi K2, bfloat16, the same tensor kinds and
the same layouts) scaled down to tens of MiB: 4 layers (1 dense), hidden
512, vocabulary 4096, 16 routed experts and 1 shared of ffn 256, 8 heads
(q_lora 192, kv_lora 128, qk_nope 32, qk_rope 16, v_head 32): 66
tensors, 28.4M parameters (routed experts 66%), 54.2 MiB. The training
mesh is [ep, tp] = 2x2 (2 hosts x 2 devices; weights_bench's [dp, ep, tp]
with dp = 1): routed experts by expert over ep and ffn over tp, every
other matrix tensor-parallel over tp (the MLA down-projections, router and
norms replicated). Each inference
replica is [hosts, gpus] = 1x2 (one host): routed experts by expert over
its devices, the rest tensor-parallel as in training. Every job is pinned
(training on hosts 0-1, replica r on host 2 + r) and verified (every
destination element, unless --verify says otherwise).

Sections (--sections, default net; with --quick: local):

  net    the emulated multi-host cluster of scripts/netcluster.sh: 2 + R
         hosts x 2 CPU devices (R = --replicas, default 4), each host
         behind a tc-shaped link (--rate, default 1gbit); needs root. When
         it cannot start (not root, no namespaces) the section says why and
         runs the local one instead.
  local  a local cluster (`meshctl up`, 127.0.0.1, no link limits): the
         jobs run, but loopback makes every host link alike and fast, so
         the strategies' trade-off hardly shows.
  plan   offline (`meshctl plan -f`, no cluster): every strategy's
         prediction on a topology like the emulated one (--rate's goodput
         between hosts; --intra-gbps, --host-copy-gbps and
         --transfer-setup-us: rough figures of a 2-core machine, where the
         measured sections use the cluster's own calibrated ones); a dry
         run of the job files.

Columns of the measured table (nccl-tests style):

  strategy         the job's `strategy:` (checked against the plan's)
  model (MiB)      one copy of the model
  delivered (MiB)  bytes written into replica devices
                   (JobResult.bytes_delivered)
  measured (s)     the job's data-plane seconds as the workers report them
                   (JobResult.seconds); median of --repeat runs
  predicted (s)    the controller's simulation of the same plan on the live
                   topology (JobResult.predicted_seconds)
  lower_bd (s)     no plan can be faster (JobResult.lower_bound_seconds)
  meas/pred        model error
  pred/lb          plan quality under the model
  x mc meas        measured over meshcast's measured time
  x mc pred        predicted over meshcast's predicted time
  algbw (Gbps)     model bits / measured time (one copy: nccl-tests' size
                   over time; each replica host takes in a whole copy)
  spread           (max - min) / median of the runs

    sudo bench/weights/run_weights_cluster_bench.sh              # net, ~2 min
    bench/weights/weights_cluster_bench.py --sections plan --bin-dir build
    bench/weights/weights_cluster_bench.py --quick --bin-dir build  # < 20 s

Python 3 standard library only. Exit status: 0 when every job succeeded with
0 mismatches and ran the strategy it asked for, 1 otherwise, 2 when a
binary is missing, 77 with --quick when no cluster can start.
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
from bench_common import fmt, fmt_s, geomean, load_average, log  # noqa: E402

STRATEGIES = ["send_recv", "local_allgather", "broadcast", "broadcast_lb",
              "meshcast"]
# Predicted times closer than this are a tie for ranking purposes (as in
# bench/netcluster).
RANK_TIE = 0.10
# Training mesh [ep, tp] and one replica [hosts, gpus]; devices per host.
TRAIN_MESH = (2, 2)
REPLICA_MESH = (1, 2)
DEVICES = 2
EP, TP = 0, 1          # training mesh axes
INFER_HOSTS, INFER_GPUS = 0, 1

# weights_model.h's MoeModelShape, scaled down. "tiny" is --quick's.
SHAPES = {
    "kimi-k2-small": dict(layers=4, dense_layers=1, hidden=512, vocab=4096,
                          dense_ffn=1536, experts=16, shared_experts=1,
                          expert_ffn=256, heads=8, q_lora_rank=192,
                          kv_lora_rank=128, qk_nope_head_dim=32,
                          qk_rope_head_dim=16, v_head_dim=32),
    "kimi-k2-tiny": dict(layers=2, dense_layers=1, hidden=128, vocab=1024,
                         dense_ffn=384, experts=8, shared_experts=1,
                         expert_ffn=64, heads=4, q_lora_rank=64,
                         kv_lora_rank=32, qk_nope_head_dim=16,
                         qk_rope_head_dim=8, v_head_dim=16),
}
BF16 = 2  # bytes per element


def spec_text(axes):
    """A sharding spec from one list of mesh axes per dimension: [[1], []]
    -> "S1,R"; [[0, 1], [], []] -> "S01,R,R"."""
    return ",".join("S" + "".join(str(a) for a in dim) if dim else "R"
                    for dim in axes)


# How a tensor is split in both layouts (weights_model.cc's Split).
LAYOUTS = {
    "replicated": lambda n: ([[]] * n, [[]] * n),
    "column": lambda n: ([[], [TP]], [[], [INFER_GPUS]]),
    "row": lambda n: ([[TP], []], [[INFER_GPUS], []]),
    "expert_in": lambda n: ([[EP], [], [TP]],
                            [[INFER_HOSTS, INFER_GPUS], [], []]),
    "expert_out": lambda n: ([[EP], [TP], []],
                             [[INFER_HOSTS, INFER_GPUS], [], []]),
}


def model_tensors(s):
    """Every tensor of the model in weights_model.cc's order: (name, shape,
    training spec, replica spec)."""
    out = []

    def add(name, shape, split):
        train, infer = LAYOUTS[split](len(shape))
        out.append((name, list(shape), spec_text(train), spec_text(infer)))

    def mlp(at, ffn):
        add(at + "w1", (s["hidden"], ffn), "column")
        add(at + "w3", (s["hidden"], ffn), "column")
        add(at + "w2", (ffn, s["hidden"]), "row")

    h, qk = s["hidden"], s["qk_nope_head_dim"] + s["qk_rope_head_dim"]
    add("embed", (s["vocab"], h), "row")
    for layer in range(s["layers"]):
        at = "layers.%d." % layer
        add(at + "input_norm", (h,), "replicated")
        add(at + "attn.q_a", (h, s["q_lora_rank"]), "replicated")
        add(at + "attn.q_a_norm", (s["q_lora_rank"],), "replicated")
        add(at + "attn.q_b", (s["q_lora_rank"], s["heads"] * qk), "column")
        add(at + "attn.kv_a", (h, s["kv_lora_rank"] + s["qk_rope_head_dim"]),
            "replicated")
        add(at + "attn.kv_a_norm", (s["kv_lora_rank"],), "replicated")
        add(at + "attn.kv_b", (s["kv_lora_rank"], s["heads"] * (
            s["qk_nope_head_dim"] + s["v_head_dim"])), "column")
        add(at + "attn.o", (s["heads"] * s["v_head_dim"], h), "row")
        add(at + "post_attn_norm", (h,), "replicated")
        if layer < s["dense_layers"]:
            mlp(at + "mlp.", s["dense_ffn"])
            continue
        add(at + "mlp.router", (s["experts"], h), "replicated")
        add(at + "mlp.router_bias", (s["experts"],), "replicated")
        e, f = s["experts"], s["expert_ffn"]
        add(at + "mlp.experts.w1", (e, h, f), "expert_in")
        add(at + "mlp.experts.w3", (e, h, f), "expert_in")
        add(at + "mlp.experts.w2", (e, f, h), "expert_out")
        if s["shared_experts"] > 0:
            mlp(at + "mlp.shared.", s["shared_experts"] * f)
    add("final_norm", (h,), "replicated")
    add("lm_head", (h, s["vocab"]), "column")
    return out


def numel(shape):
    n = 1
    for e in shape:
        n *= e
    return n


def model_bytes(tensors):
    return BF16 * sum(numel(t[1]) for t in tensors)


def describe(name, s, tensors):
    params = sum(numel(t[1]) for t in tensors)
    experts = sum(numel(t[1]) for t in tensors if ".experts." in t[0])
    return ("%s: %d layers (%d dense, ffn %d), hidden %d, vocab %d, %d routed "
            "+ %d shared experts of ffn %d, %d heads, MLA q_lora %d, kv_lora "
            "%d, qk_nope %d, qk_rope %d, v_head %d, bfloat16; %d tensors, "
            "%d parameters (%.1fM, routed experts %.0f%%), %.1f MiB" % (
                name, s["layers"], s["dense_layers"], s["dense_ffn"],
                s["hidden"], s["vocab"], s["experts"], s["shared_experts"],
                s["expert_ffn"], s["heads"], s["q_lora_rank"],
                s["kv_lora_rank"], s["qk_nope_head_dim"],
                s["qk_rope_head_dim"], s["v_head_dim"], len(tensors), params,
                params / 1e6, 100.0 * experts / params,
                model_bytes(tensors) / 2**20))


def job_spec(tensors, strategy, replicas, verify, tag=""):
    """The reshard_model JobSpec (job-file form), meshes pinned: training
    on hosts 0..1, replica r on host 2 + r."""
    first = TRAIN_MESH[0]
    return {
        "name": "weights-%s%s" % (strategy, tag),
        "verify": verify,
        "reshard_model": {
            "src_mesh": "%dx%d@0" % TRAIN_MESH,
            "dst_meshes": ["%dx%d@%d" % (REPLICA_MESH + (first + r,))
                           for r in range(replicas)],
            "strategy": strategy,
            "tensors": [{"name": name, "shape": shape, "dtype": "bfloat16",
                         "src_spec": src, "dst_spec": dst}
                        for name, shape, src, dst in tensors]}}


def hosts_needed(replicas):
    return TRAIN_MESH[0] + replicas * REPLICA_MESH[0]


def parse_rate_bps(rate):
    """A tc rate ("1gbit", "300mbit") in bits/s; None if not one."""
    for suffix, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3),
                          ("bit", 1.0)):
        if rate.lower().endswith(suffix):
            try:
                return float(rate[:-len(suffix)]) * scale
            except ValueError:
                return None
    return None


def gbps(nbytes, seconds):
    return nbytes * 8 / seconds / 1e9 if nbytes and seconds else None


def rank_agreement(rows):
    """Pairs of strategies whose predictions differ by more than RANK_TIE:
    (pairs ordered alike measured, pairs)."""
    alike = total = 0
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            a, b = rows[i], rows[j]
            if not (a.get("measured") and b.get("measured") and
                    a.get("predicted") and b.get("predicted")):
                continue
            lo, hi = sorted([a["predicted"], b["predicted"]])
            if hi <= lo * (1 + RANK_TIE):
                continue
            total += 1
            alike += (a["predicted"] < b["predicted"]) == (
                a["measured"] < b["measured"])
    return alike, total


# --- offline ---------------------------------------------------------------

def section_plan(args):
    """Every strategy's prediction, offline, on a topology like the
    emulated cluster's."""
    tensors = model_tensors(SHAPES[args.model])
    hosts = hosts_needed(args.replicas)
    inter = parse_rate_bps(args.rate) * 1448 / 1514 / 1e9
    flags = ["--cluster", "%dx%d" % (hosts, DEVICES), "--inter-gbps",
             "%.6g" % inter, "--intra-gbps", str(args.intra_gbps),
             "--host-copy-gbps", str(args.host_copy_gbps),
             "--transfer-setup-us", str(args.transfer_setup_us)]
    log("# plan: offline (meshctl plan -f %s), %s" % (" ".join(flags),
                                                      args.rate))
    log("# model " + describe(args.model, SHAPES[args.model], tensors))
    alts = {}
    for s in STRATEGIES:
        path = bc.write_spec(job_spec(tensors, s, args.replicas, "full"))
        try:
            result = subprocess.run([args.meshctl, "plan", "-f", path,
                                     "--output", "json"] + flags,
                                    capture_output=True, text=True,
                                    timeout=300)
        finally:
            os.unlink(path)
        if result.returncode != 0:
            raise RuntimeError("meshctl plan -f (%s): %s" % (s, (
                result.stderr or result.stdout).strip()[-600:]))
        doc = json.loads(result.stdout)
        alts[s] = dict(predicted_seconds=doc.get("predicted_seconds"),
                       lower_bound_seconds=doc.get("lower_bound_seconds"))
    mbytes = model_bytes(tensors)
    mc = (alts.get("meshcast") or {}).get("predicted_seconds")
    fmt_row = "%-16s %9s %9s %8s %9s %7s %s"
    log("#" + fmt_row % ("strategy", "predicted", "lower_bd", "pred/lb",
                         "x mc pred", "algbw", "note"))
    log("#" + fmt_row % ("", "(s)", "(s)", "", "", "(Gbps)", ""))
    rows, ok = [], True
    for s in STRATEGIES:
        row = alts.get(s)
        if row is None:
            ok = False
            log(" " + fmt_row % (s, "-", "-", "-", "-", "-",
                                 "missing from the plan (got %s)" %
                                 sorted(alts)))
            continue
        t, lb = row.get("predicted_seconds"), row.get("lower_bound_seconds")
        note = ""
        log(" " + fmt_row % (s, fmt_s(t), fmt_s(lb), fmt(bc.ratio(t, lb),
                                                         "%.2f"),
                             fmt(bc.ratio(t, mc), "%.2f"),
                             fmt(gbps(mbytes, t), "%.2f"), note))
        rows.append(dict(section="plan", strategy=s, predicted=t,
                         lower_bound=lb))
    return ok, rows


# --- measured --------------------------------------------------------------

def measure(cluster, tensors, strategy, args):
    """--repeat runs of one strategy: the median data-plane seconds and the
    first run's figures; status "ok" or what failed."""
    runs, first = [], None
    for attempt in range(args.repeat):
        job, _ = bc.submit_wait(
            cluster, job_spec(tensors, strategy, args.replicas, args.verify,
                              "-%d" % attempt), args.job_timeout)
        res = job.get("result", {})
        if job.get("state") != "SUCCEEDED":
            return dict(status="%s: %s" % (job.get("state"),
                                           (job.get("message") or "")[:160]),
                        runs=runs)
        if int(res.get("mismatches", 0)) != 0:
            return dict(status="MISMATCH (%s)" % res["mismatches"], runs=runs)
        ran = job.get("plan", {}).get("strategy")
        if ran != strategy:
            return dict(status="ran %s" % ran, runs=runs)
        first = first or res
        runs.append(float(res["seconds"]))
    med = statistics.median(runs)
    return dict(status="ok", measured=med, runs=runs,
                spread=(max(runs) - min(runs)) / med if med else None,
                predicted=float(first.get("predicted_seconds", 0)) or None,
                lower_bound=float(first.get("lower_bound_seconds", 0)) or None,
                delivered=int(first.get("bytes_delivered", 0)),
                verified=int(first.get("elements_verified", 0)))


ROW = "%-16s %6s %9s %9s %9s %9s %9s %7s %9s %9s %7s %6s  %s"


def start_cluster(args, where):
    hosts = hosts_needed(args.replicas)
    if where == "net":
        return bc.NetCluster(args.bin_dir, args.rate, hosts, devices=DEVICES,
                             cluster_id="wtb", prefix="weights-netbench-",
                             worker_args=args.worker_args)
    return bc.LocalCluster(args.meshctl, args.controller_bin,
                           args.worker_bin, hosts, devices=DEVICES,
                           prefix="weights-bench-")


def cluster_line(cluster, where):
    if where != "net":
        return "127.0.0.1, no link limits"
    env = cluster.cluster.env
    return ("links %s each way (planner %s Gbps goodput), intra-host %s Gbps "
            "per device (%s), host copy %s Gbps (%s), transfer setup %s us" % (
                env.get("NETCLUSTER_RATE", "?"),
                env.get("NETCLUSTER_INTER_GBPS", "?"),
                env.get("NETCLUSTER_INTRA_GBPS", "?"),
                env.get("NETCLUSTER_INTRA_SOURCE", "?"),
                env.get("NETCLUSTER_HOST_COPY_GBPS", "0"),
                env.get("NETCLUSTER_HOST_COPY_SOURCE", "-"),
                env.get("NETCLUSTER_TRANSFER_SETUP_US", "0")))


def ensure_daemons(args):
    if getattr(args, "controller_bin", None):
        return
    args.controller_bin = bc.find_binary(args.bin_dir, "meshcast-controller",
                                         "controller")
    args.worker_bin = bc.find_binary(args.bin_dir, "meshcast-worker",
                                     "worker")


def section_cluster(args, where):
    tensors = model_tensors(SHAPES[args.model])
    if where == "net":
        reason = None
        if os.geteuid() != 0:
            reason = "needs root (network namespaces, tc)"
        else:
            try:
                cluster = start_cluster(args, "net")
                cluster.__enter__()
            except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
                reason = "netcluster.sh up failed: %s" % str(e)[-400:]
        if reason:
            log("# net: the emulated cluster cannot start here (%s); running "
                "the local section instead: its links are loopback, all "
                "alike and fast, so the figures say less" % reason)
            if "local" in args.section_list:
                return True, []
            ensure_daemons(args)
            return section_cluster(args, "local")
    else:
        ensure_daemons(args)
        cluster = start_cluster(args, "local")
        try:
            cluster.__enter__()
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
            if args.quick:
                log("# local: SKIP: the local cluster cannot start: %s" %
                    str(e)[-400:])
                args.skipped = True
                return True, []
            raise
    try:
        return run_strategies(args, where, cluster, tensors)
    finally:
        cluster.__exit__(None, None, None)


def run_strategies(args, where, cluster, tensors):
    hosts = hosts_needed(args.replicas)
    mbytes = model_bytes(tensors)
    log("# %s: %d hosts x %d cpu devices; %s; load average %s" % (
        where, hosts, DEVICES, cluster_line(cluster, where), load_average()))
    log("# model " + describe(args.model, SHAPES[args.model], tensors))
    log("# training mesh %dx%d@0 ([ep, tp]), %d replicas of %dx%d "
        "([hosts, gpus]) on hosts %s; verify %s; %d run(s) per strategy, "
        "median shown" % (
            TRAIN_MESH + (args.replicas,) + REPLICA_MESH +
            (",".join(str(TRAIN_MESH[0] + r) for r in range(args.replicas)),
             args.verify[len("VERIFY_MODE_"):].lower(), args.repeat)))
    log("#" + ROW % ("strategy", "model", "delivered", "measured",
                     "predicted", "lower_bd", "meas/pred", "pred/lb",
                     "x mc meas", "x mc pred", "algbw", "spread", "status"))
    log("#" + ROW % ("", "(MiB)", "(MiB)", "(s)", "(s)", "(s)", "", "", "",
                     "", "(Gbps)", "", ""))
    start = time.time()
    got = {s: measure(cluster, tensors, s, args) for s in args.strategy_list}
    mc = got.get("meshcast", {})
    rows = []
    for s in args.strategy_list:
        r = got[s]
        log(" " + ROW % (
            s, "%.1f" % (mbytes / 2**20),
            fmt((r.get("delivered") or 0) / 2**20 or None, "%.1f"),
            fmt_s(r.get("measured")), fmt_s(r.get("predicted")),
            fmt_s(r.get("lower_bound")),
            fmt(bc.ratio(r.get("measured"), r.get("predicted")), "%.2f"),
            fmt(bc.ratio(r.get("predicted"), r.get("lower_bound")), "%.2f"),
            fmt(bc.ratio(r.get("measured"), mc.get("measured")), "%.2f"),
            fmt(bc.ratio(r.get("predicted"), mc.get("predicted")), "%.2f"),
            fmt(gbps(mbytes, r.get("measured")), "%.3f"),
            fmt(r.get("spread"), "%.2f"), r["status"]))
        rows.append(dict(section=where, strategy=s, model_bytes=mbytes,
                         **{k: v for k, v in r.items()}))
    good = [r for r in rows if r["status"] == "ok"]
    cluster.ok = len(good) == len(rows)
    summarize(where, rows, good, mbytes, time.time() - start)
    return cluster.ok, rows


def summarize(where, rows, good, mbytes, elapsed):
    mc = next((r for r in good if r["strategy"] == "meshcast"), None)
    others = [r for r in good if r["strategy"] != "meshcast"]
    fastest = min(good, key=lambda r: r["measured"], default=None)
    alike, pairs = rank_agreement(good)
    ratios = [r["measured"] / r["predicted"] for r in good if r["predicted"]]
    parts = ["%d/%d strategies ok (verified, 0 mismatches)" % (len(good),
                                                                 len(rows))]
    if mc:
        parts.append("meshcast %s s measured, %s x predicted (%s s), at %s "
                     "of the lower bound's bandwidth, %s Gbps algbw" % (
                         fmt_s(mc["measured"]),
                         fmt(bc.ratio(mc["measured"], mc["predicted"]),
                             "%.2f"), fmt_s(mc["predicted"]),
                         fmt(100 * mc["lower_bound"] / mc["measured"]
                             if mc["lower_bound"] else None, "%.0f%%"),
                         fmt(gbps(mbytes, mc["measured"]), "%.3f")))
    if mc and others:
        xs = [r["measured"] / mc["measured"] for r in others]
        ps = [r["predicted"] / mc["predicted"] for r in others
              if r["predicted"] and mc["predicted"]]
        parts.append("the others %s..%sx meshcast measured (predicted "
                     "%s..%sx)" % (fmt(min(xs), "%.2f"), fmt(max(xs), "%.2f"),
                                   fmt(min(ps) if ps else None, "%.2f"),
                                   fmt(max(ps) if ps else None, "%.2f")))
    if fastest:
        parts.append("fastest measured: %s" % fastest["strategy"])
    parts.append("ranked alike measured and predicted: %d/%d pairs >%d%% "
                 "apart" % (alike, pairs, RANK_TIE * 100))
    parts.append("measured/predicted geomean %s (%s..%s)" % (
        fmt(geomean(ratios), "%.2f"), fmt(min(ratios) if ratios else None,
                                          "%.2f"),
        fmt(max(ratios) if ratios else None, "%.2f")))
    log("# Summary (%s): %s; %.0f s, load average %s" % (
        where, "; ".join(parts), elapsed, load_average()))


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default=None,
                   help="comma-separated: net, local, plan (default net; "
                   "with --quick local)")
    p.add_argument("--quick", action="store_true",
                   help="the tiny model (under 1 MiB) once per strategy on "
                   "a local cluster, well under 20 s; exit 77 when the "
                   "cluster cannot start")
    p.add_argument("--model", default=None, choices=sorted(SHAPES),
                   help="default kimi-k2-small (kimi-k2-tiny with --quick)")
    p.add_argument("--replicas", type=int, default=None,
                   help="inference replicas, one host each (default 4; 2 "
                   "with --quick)")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--rate", default="1gbit",
                   help="net / plan: link rate (tc units)")
    p.add_argument("--repeat", type=int, default=None,
                   help="runs per strategy, the median shown (default 3; "
                   "1 with --quick)")
    p.add_argument("--verify", default="full",
                   choices=["full", "sample", "off"])
    p.add_argument("--intra-gbps", type=float, default=20,
                   help="plan: per-device bandwidth inside a host, Gbit/s")
    p.add_argument("--host-copy-gbps", type=float, default=40,
                   help="plan: each host's memory-copy capacity, Gbit/s")
    p.add_argument("--transfer-setup-us", type=float, default=300,
                   help="plan: start-up of every transfer, microseconds")
    bc.add_cluster_args(p, job_timeout=180)
    a = p.parse_args(argv)
    if a.sections is None:
        a.sections = "local" if a.quick else "net"
    a.section_list = bc.split_sections(p, a.sections, ('net', 'local', 'plan'))
    a.model = a.model or ("kimi-k2-tiny" if a.quick else "kimi-k2-small")
    a.repeat = a.repeat or (1 if a.quick else 3)
    a.replicas = a.replicas or (2 if a.quick else 4)
    a.strategy_list = [s for s in a.strategies.split(",") if s]
    for s in a.strategy_list:
        if s not in STRATEGIES:
            p.error("--strategies: unknown '%s'; allowed: %s" %
                    (s, ", ".join(STRATEGIES)))
    if a.repeat < 1:
        p.error("--repeat must be >= 1")
    if a.replicas < 1 or a.replicas > 8:
        p.error("--replicas must be 1..8")
    if parse_rate_bps(a.rate) is None:
        p.error("--rate: want a tc rate such as 1gbit or 300mbit")
    a.verify = "VERIFY_MODE_" + a.verify.upper()
    a.skipped = False
    return a


def main(argv):
    args = parse_args(argv)
    status = bc.run_bench("weights_cluster_bench", args, {
        "plan": section_plan,
        "net": lambda a: section_cluster(a, "net"),
        "local": lambda a: section_cluster(a, "local")})
    if args.quick and (args.skipped or status == 2):
        return 77  # no cluster here: skip, as ctest reads 77
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
