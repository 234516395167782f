#!/usr/bin/env python3
"""netcluster_bench: measured resharding on an emulated multi-host cluster.

Runs the public cases of docs/conventions.md (the cross-mesh resharding paper's suite),
scaled down, and two reshardings inside one host, for every strategy on a
cluster of network namespaces with rate-limited links (scripts/netcluster.sh),
and prints, per case and strategy, the measured time next to the cost model's
prediction and the lower bound, with their ratios, in one aligned table; then
a summary: do the strategies rank the same measured as predicted, how many
NIC-bound rows are within 20% of their prediction, what fraction of the lower
bound's bandwidth meshcast reaches, and how far the host-bound rows (where
CPU-side costs decide: host copy capacity, set-up time) are from theirs.

    sudo bench/netcluster/netcluster_bench.py --bin-dir build-x
    sudo bench/netcluster/netcluster_bench.py --dir /tmp/nc --reuse  # a cluster already up
    bench/netcluster/netcluster_bench.py --dry-run   # predictions only, no root

Measured time: the job's data-plane time as the workers report it (from a
barrier after setup to the last step, the slowest worker), which is what the
simulator models. Every job verifies every destination element; a row whose
job did not succeed is marked and left out of the summary.

Python 3 standard library only. Exit status: 0 when every job succeeded, 1
otherwise, 2 on bad flags, 77 when it cannot run (not root, no namespaces).
"""

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bench", "workloads"))
import public_suite  # noqa: E402
NETCLUSTER = os.path.join(REPO, "scripts", "netcluster.sh")
STRATEGIES = ["send_recv", "local_allgather", "broadcast", "broadcast_lb",
              "meshcast"]
# Predicted times closer than this are a tie for ranking purposes.
RANK_TIE = 0.10
# A row is within the goal if measured is within this of predicted.
AGREEMENT = 0.20
# One table row (nccl-tests style: fixed-width columns, "#" header lines).
ROW_FORMAT = "%-13s %7s %-15s %9s %9s %9s %9s %8s %8s %7s %6s %s"


def public_cases(size_mib):
    """The suite of bench/workloads/public_suite.txt (docs/conventions.md)
    with tensors scaled from 2 GiB to size_mib, by their last dimension.

    Meshes are (hosts, devices per host); the source mesh starts at host 0,
    the destination at the next free host, as in bench/reshard_plan_bench.
    """
    scale = size_mib / 2048.0
    suite = []
    for case in public_suite.load():
        shape = list(case["shape"])
        shape[-1] = max(1, round(shape[-1] * scale))
        suite.append({
            "name": case["name"], "shape": shape,
            "src_mesh": case["src_mesh"], "src_spec": case["src_spec"],
            "dst_mesh": case["dst_mesh"], "dst_spec": case["dst_spec"],
            "same_hosts": False
        })
    big = next(c["shape"] for c in suite if c["name"] == "case1")
    # Not in the paper's suite: reshardings inside one host (source and
    # destination on the same devices), which only the host's memory copies
    # limit: an all-gather and an all-to-all over 4 devices (mesh axis 1 is
    # the devices of the host).
    for name, dst_spec in [("intra-ag(1,4)", "RRR"), ("intra-a2a(1,4)",
                                                       "RS1R")]:
        suite.append({
            "name": name, "shape": big, "src_mesh": (1, 4),
            "src_spec": "S1RR", "dst_mesh": (1, 4), "dst_spec": dst_spec,
            "same_hosts": True
        })
    return suite


def mesh_flag(mesh, first_host):
    return "%dx%d@%d" % (mesh[0], mesh[1], first_host)


def reshard_flags(case, devices):
    """meshctl flags of a case, meshes pinned: source from host 0, the
    destination from the next free host (or host 0 for same-host cases)."""
    src, dst = case["src_mesh"], case["dst_mesh"]
    if src[1] > devices or dst[1] > devices:
        raise ValueError("%s needs %d devices per host" %
                         (case["name"], max(src[1], dst[1])))
    dst_host = 0 if case["same_hosts"] else src[0]
    return [
        "--shape", "x".join(str(d) for d in case["shape"]), "--dtype", "int32",
        "--src-mesh", mesh_flag(src, 0), "--src-spec", case["src_spec"],
        "--dst-mesh", mesh_flag(dst, dst_host), "--dst-spec", case["dst_spec"]
    ]


def hosts_needed(case):
    if case["same_hosts"]:
        return max(case["src_mesh"][0], case["dst_mesh"][0])
    return case["src_mesh"][0] + case["dst_mesh"][0]


def tensor_bytes(case):
    return 4 * math.prod(case["shape"])


class Cluster:
    """Runs commands against a netcluster (or offline meshctl)."""

    def __init__(self, args):
        self.args = args
        self.dir = args.dir
        self.env = {}
        self.started = False

    def netcluster(self, *argv, check=True, capture=True, timeout=None):
        cmd = ["bash", NETCLUSTER] + list(argv)
        env = None
        queue_ms = getattr(self.args, "queue_ms", None)
        if queue_ms:
            # netcluster.sh reads the shaped links' queue from its environment.
            env = dict(os.environ, NETCLUSTER_QUEUE_MS=str(queue_ms))
        result = subprocess.run(cmd, capture_output=capture, text=True,
                                timeout=timeout, env=env)
        if check and result.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" %
                               (" ".join(cmd), result.returncode,
                                (result.stderr or "").strip()[-2000:]))
        return result

    def load_env(self):
        path = os.path.join(self.dir, "netcluster.env")
        # The file is shell syntax written with printf %q; let bash read it.
        out = subprocess.run(
            ["bash", "-c", 'set -a; source "$1"; env -0', "_", path],
            capture_output=True, check=True).stdout.decode()
        self.env = dict(
            item.split("=", 1) for item in out.split("\0") if "=" in item)

    def up(self):
        a = self.args
        argv = ["up", "--dir", self.dir, "--id", a.id, "--hosts",
                str(a.hosts), "--devices", str(a.devices), "--rate", a.rate]
        if a.bin_dir:
            argv += ["--bin-dir", a.bin_dir]
        if a.intra_gbps:
            argv += ["--intra-gbps", str(a.intra_gbps)]
        if a.host_copy_gbps:
            argv += ["--host-copy-gbps", str(a.host_copy_gbps)]
        if a.transfer_setup_us:
            argv += ["--transfer-setup-us", str(a.transfer_setup_us)]
        if getattr(a, "worker_args", ""):
            argv += ["--worker-args", a.worker_args]
        self.started = True
        self.netcluster(*argv, timeout=180)
        self.load_env()

    def down(self):
        if self.started:
            self.netcluster("down", "--dir", self.dir, check=False,
                            timeout=120)

    def meshctl(self, argv, timeout):
        result = self.netcluster("exec", "--dir", self.dir, "--", "meshctl",
                                 *argv, check=False, timeout=timeout)
        return result


def offline_plan(meshctl, case, hosts, devices, inter_gbps, intra_gbps):
    """meshctl plan offline: {strategy: predicted}, lower bound."""
    argv = [meshctl, "plan", "--cluster", "%dx%d" % (hosts, devices),
            "--inter-gbps", str(inter_gbps), "--intra-gbps", str(intra_gbps),
            "--output", "json"] + reshard_flags(case, devices)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError("meshctl plan failed: " + out.stderr.strip())
    doc = json.loads(out.stdout)
    predicted = {
        row["strategy"]: row["predicted_seconds"] for row in doc["strategies"]
    }
    return predicted, doc["lower_bound_seconds"]


def find_meshctl(bin_dir):
    candidates = []
    if bin_dir:
        candidates += [os.path.join(bin_dir, "meshctl"),
                       os.path.join(bin_dir, "cli", "meshctl")]
    candidates.append(os.path.join(REPO, "build", "cli", "meshctl"))
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    raise RuntimeError("meshctl not found in %s (pass --bin-dir)" %
                       ", ".join(candidates))


def load_average():
    """The 1/5/15-minute load average, for the record: timings on a loaded
    machine run slow."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def gbps(nbytes, seconds):
    return nbytes * 8 / seconds / 1e9 if seconds > 0 else float("nan")


def fmt(x, digits=3):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return "%.*f" % (digits, x)


def fmt_seconds(x):
    """Seconds with 4 significant digits, so that millisecond rows of small
    tensors keep their precision."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return "%.4g" % x


def rank_agreement(rows):
    """Pairs of strategies of one case whose predictions differ by more than
    RANK_TIE: (pairs ordered alike measured, pairs)."""
    alike = total = 0
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            a, b = rows[i], rows[j]
            if a["measured"] is None or b["measured"] is None:
                continue
            lo, hi = sorted([a["predicted"], b["predicted"]])
            if hi <= lo * (1 + RANK_TIE):
                continue
            total += 1
            if (a["predicted"] < b["predicted"]) == (a["measured"] <
                                                     b["measured"]):
                alike += 1
    return alike, total


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default=None,
                   help="netcluster state directory (default: a temp dir)")
    p.add_argument("--id", default="bench", help="netcluster id (namespaces)")
    p.add_argument("--reuse", action="store_true",
                   help="use the cluster already up in --dir; leave it up")
    p.add_argument("--hosts", type=int, default=5)
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--rate", default="1gbit", help="link rate (tc units)")
    p.add_argument("--intra-gbps", default=None,
                   help="intra-host bandwidth per device for the planner: "
                   "Gbit/s, memcpy or calibrate (default: netcluster.sh's, "
                   "calibrate)")
    p.add_argument("--host-copy-gbps", default=None,
                   help="per-host memory-copy bandwidth for the planner: "
                   "Gbit/s, 0 (unlimited), memcpy, calibrate or probed (what "
                   "the workers measure at start) (default: netcluster.sh's, "
                   "calibrate)")
    p.add_argument("--transfer-setup-us", default=None,
                   help="fixed start-up cost of every transfer for the "
                   "planner, microseconds (default: netcluster.sh's)")
    p.add_argument("--size-mib", type=float, default=128,
                   help="size of the suite's 2 GiB tensor after scaling; "
                   "1-to-m uses half, as the paper does (default 128)")
    p.add_argument("--cases", default="all",
                   help="comma-separated case names, or all")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per row; the table shows the median")
    p.add_argument("--job-timeout", type=float, default=120)
    p.add_argument("--bin-dir", default=os.environ.get("MESHCAST_BUILD_DIR"),
                   help="build directory with the daemons and meshctl")
    p.add_argument("--dry-run", action="store_true",
                   help="print the offline predictions only (no cluster)")
    p.add_argument("--json", default=None,
                   help="also write the rows as JSON to this file")
    a = p.parse_args(argv)
    a.strategy_list = [s for s in a.strategies.split(",") if s]
    for s in a.strategy_list:
        if s not in STRATEGIES:
            p.error("--strategies: unknown '%s'; allowed: %s" %
                    (s, ", ".join(STRATEGIES)))
    if a.repeat < 1:
        p.error("--repeat must be >= 1")
    if a.size_mib <= 0:
        p.error("--size-mib must be > 0")
    return a


def main(argv):
    args = parse_args(argv)
    cases = public_cases(args.size_mib)
    if args.cases != "all":
        # Names like 1-to-m(1,2) hold commas: split outside parentheses.
        wanted = [w.strip(",") for w in re.findall(r"(?:[^,(]|\([^)]*\))+",
                                                   args.cases)]
        unknown = [w for w in wanted if w not in [c["name"] for c in cases]]
        if unknown:
            print("--cases: unknown %s; allowed: %s" %
                  (", ".join(unknown), ", ".join(c["name"] for c in cases)),
                  file=sys.stderr)
            return 2
        cases = [c for c in cases if c["name"] in wanted]
    too_big = [c["name"] for c in cases if hosts_needed(c) > args.hosts]
    if too_big:
        print("--hosts %d is too few for %s" % (args.hosts, ", ".join(too_big)),
              file=sys.stderr)
        return 2
    meshctl = find_meshctl(args.bin_dir)

    if args.dry_run:
        return dry_run(args, cases, meshctl)
    if os.geteuid() != 0:
        print("netcluster_bench: SKIP: needs root (network namespaces, tc)",
              file=sys.stderr)
        return 77

    tmp = None
    if args.dir is None:
        tmp = tempfile.mkdtemp(prefix="netcluster-bench-")
        args.dir = tmp
    cluster = Cluster(args)
    status = 1
    try:
        if args.reuse:
            cluster.load_env()
        else:
            cluster.up()
        status = run_suite(args, cases, cluster, meshctl)
        return status
    finally:
        if not args.reuse:
            cluster.down()
        if tmp is not None:
            if status == 0:
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                print("# logs kept in %s/logs" % tmp, file=sys.stderr)


def dry_run(args, cases, meshctl):
    rate_bits = float(args.rate.lower().replace("gbit", "e9").replace(
        "mbit", "e6").replace("kbit", "e3").replace("bit", ""))
    inter = rate_bits * 1448 / 1514 / 1e9
    try:
        intra = float(args.intra_gbps)
    except (TypeError, ValueError):
        intra = 10  # about what calibration finds on a 2-core machine
    total = 0
    print("# offline predictions: %dx%d hosts, %.4g Gbps NIC goodput, "
          "%.4g Gbps intra" % (args.hosts, args.devices, inter, intra))
    for case in cases:
        predicted, lb = offline_plan(meshctl, case, args.hosts, args.devices,
                                     inter, intra)
        row = "  ".join("%s %.3f" % (s, predicted[s])
                        for s in args.strategy_list)
        total += sum(predicted[s] for s in args.strategy_list)
        print("%-14s %7.1f MiB  lb %.3f  %s" %
              (case["name"], tensor_bytes(case) / 2**20, lb, row))
    print("# sum of predicted data-plane time: %.1f s x %d repeat(s)" %
          (total, args.repeat))
    return 0


def run_suite(args, cases, cluster, meshctl):
    env = cluster.env
    hosts, devices = int(env["NETCLUSTER_HOSTS"]), int(env["NETCLUSTER_DEVICES"])
    inter = float(env["NETCLUSTER_INTER_GBPS"])
    intra = float(env["NETCLUSTER_INTRA_GBPS"])
    print("# netcluster_bench: %d hosts x %d cpu devices, links %s each way "
          "(planner %.4g Gbps goodput), intra-host %.4g Gbps per device (%s; "
          "memcpy %s Gbps), host copy %s Gbps (%s; 0 = unlimited), transfer "
          "setup %s us; load average %s" %
          (hosts, devices, env["NETCLUSTER_RATE"], inter, intra,
           env.get("NETCLUSTER_INTRA_SOURCE", "?"),
           env.get("NETCLUSTER_MEMCPY_GBPS", "?"),
           env.get("NETCLUSTER_HOST_COPY_GBPS", "0"),
           env.get("NETCLUSTER_HOST_COPY_SOURCE", "-"),
           env.get("NETCLUSTER_TRANSFER_SETUP_US", "0"), load_average()))
    sizes = {}
    for case in cases:
        sizes.setdefault("x".join(map(str, case["shape"])),
                         []).append(case["name"])
    print("# tensors (int32): %s; %d repeat(s) per row, median shown" %
          ("; ".join("%s = %.0f MiB for %s" %
                     (shape, 4 * math.prod(map(int, shape.split("x"))) /
                      2**20, ", ".join(names))
                     for shape, names in sizes.items()), args.repeat))
    print("# measured: data-plane seconds reported by the workers; predicted: "
          "flow-level simulator; lb: lower bound on any plan")
    print("#" + ROW_FORMAT %
          ("case", "MiB", "strategy", "measured", "predicted", "lower_bd",
           "meas/pred", "pred/lb", "lb/meas", "algbw", "bound", "status"))
    print("#" + ROW_FORMAT %
          ("", "", "", "(s)", "(s)", "(s)", "", "", "", "(Gbps)", "", ""))
    rows = []
    failures = 0
    start = time.time()
    for case in cases:
        # NIC-bound: the lower bound of the cluster's own topology (which the
        # jobs report) is no more than 5% above the bound of a topology
        # where only the links between hosts cost anything (device ports
        # infinitely fast, no host copy limit, no set-up time). Otherwise
        # the row is "host"-bound: CPU-side costs inside the hosts decide.
        _, lb_nic_only = offline_plan(meshctl, case, hosts, devices, inter,
                                      1e6)
        nic_bound = None
        case_rows = []
        for strategy in args.strategy_list:
            times = []
            predicted = lb = None
            status = "ok"
            for _ in range(args.repeat):
                result = cluster.meshctl(
                    ["submit", "reshard"] + reshard_flags(case, devices) +
                    ["--strategy", strategy, "--wait", "--output", "json",
                     "--timeout", str(args.job_timeout)],
                    timeout=args.job_timeout + 30)
                try:
                    job = json.loads(result.stdout)
                except json.JSONDecodeError:
                    job = {"state": "ERROR", "message": result.stderr.strip()}
                res = job.get("result", {})
                if job.get("state") != "SUCCEEDED":
                    status = "%s: %s" % (job.get("state"), job.get("message"))
                    break
                if res.get("mismatches", 0) != 0:
                    status = "MISMATCH"
                    break
                times.append(res["seconds"])
                predicted = res["predicted_seconds"]
                lb = res["lower_bound_seconds"]
                if nic_bound is None:
                    nic_bound = lb_nic_only >= lb / 1.05
            measured = statistics.median(times) if status == "ok" else None
            if status != "ok":
                failures += 1
            row = {
                "case": case["name"], "bytes": tensor_bytes(case),
                "strategy": strategy, "measured": measured,
                "predicted": predicted, "lower_bound": lb,
                "nic_bound": nic_bound, "status": status,
                "runs": times
            }
            case_rows.append(row)
            ratio = lambda a, b: a / b if a and b else None
            print(" " + ROW_FORMAT %
                  (case["name"], "%.1f" % (row["bytes"] / 2**20), strategy,
                   fmt_seconds(measured), fmt_seconds(predicted),
                   fmt_seconds(lb),
                   fmt(ratio(measured, predicted)), fmt(ratio(predicted, lb)),
                   fmt(ratio(lb, measured)),
                   fmt(gbps(row["bytes"], measured) if measured else None),
                   "nic" if nic_bound else "host", status),
                  flush=True)
        rows += case_rows
    elapsed = time.time() - start
    summarize(rows, args, elapsed)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "env": {
                k: v for k, v in env.items() if k.startswith("NETCLUSTER_")
            }}, f, indent=1)
    return 1 if failures else 0


def summarize(rows, args, elapsed):
    ok = [r for r in rows if r["measured"]]
    by_case = {}
    for r in ok:
        by_case.setdefault(r["case"], []).append(r)
    alike = total = same_cases = 0
    for case_rows in by_case.values():
        a, t = rank_agreement(case_rows)
        alike += a
        total += t
        same_cases += a == t
    nic = [r for r in ok if r["nic_bound"]]
    within = [r for r in nic
              if abs(r["measured"] / r["predicted"] - 1) <= AGREEMENT]
    mc = [r for r in nic if r["strategy"] == "meshcast"]
    fractions = [r["lower_bound"] / r["measured"] for r in mc]
    worst = min(mc, key=lambda r: r["lower_bound"] / r["measured"],
                default=None)
    print("# Summary: ranking same measured as predicted in %d/%d cases "
          "(%d/%d strategy pairs >%d%% apart ordered alike); measured within "
          "%d%% of predicted on %d/%d NIC-bound rows; meshcast reaches %s of "
          "the lower bound's bandwidth (NIC-bound rows, geomean; worst %s on "
          "%s); %d/%d jobs ok, %.0f s, load average %s" %
          (same_cases, len(by_case), alike, total, RANK_TIE * 100,
           AGREEMENT * 100, len(within), len(nic),
           ("%.0f%%" % (100 * math.exp(statistics.fmean(
               math.log(f) for f in fractions)))) if fractions else "-",
           ("%.0f%%" % (100 * worst["lower_bound"] / worst["measured"]))
           if worst else "-", worst["case"] if worst else "-",
           len(ok), len(rows), elapsed, load_average()))
    off = [r for r in nic
           if abs(r["measured"] / r["predicted"] - 1) > AGREEMENT]
    for r in off:
        print("#   off by more than %d%%: %s %s measured %.3f s, predicted "
              "%.3f s (x%.2f)" % (AGREEMENT * 100, r["case"], r["strategy"],
                                  r["measured"], r["predicted"],
                                  r["measured"] / r["predicted"]))
    host = [r for r in ok if not r["nic_bound"]]
    if host:
        ratios = [r["measured"] / r["predicted"] for r in host]
        print("# host-bound rows (CPU-side costs decide): measured/predicted "
              "geomean %.2f, range %.2f..%.2f, within %d%% on %d/%d" %
              (math.exp(statistics.fmean(math.log(x) for x in ratios)),
               min(ratios), max(ratios), AGREEMENT * 100,
               sum(abs(x - 1) <= AGREEMENT for x in ratios), len(ratios)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
