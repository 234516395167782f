"""What every cluster benchmark in bench/ shares: number formatting, job
files, finding the binaries, and the two clusters a benchmark runs jobs on
(a local `meshctl up` cluster and the emulated multi-host cluster of
scripts/netcluster.sh).

    sys.path.insert(0, os.path.join(REPO, "bench", "common"))
    import bench_common as bc
    with bc.LocalCluster(meshctl, controller, worker, workers=2, devices=2,
                         prefix="moe-bench-") as cluster:
        result = cluster.ctl(["submit", "-f", path, "--wait"], timeout=60)

Python 3 standard library only.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def add_cluster_args(parser, job_timeout):
    """The flags every cluster benchmark takes: --job-timeout, --bin-dir
    (default $MESHCAST_BUILD_DIR), --json and --worker-args."""
    parser.add_argument("--job-timeout", type=float, default=job_timeout)
    parser.add_argument("--bin-dir",
                        default=os.environ.get("MESHCAST_BUILD_DIR"),
                        help="build directory with the daemons and meshctl")
    parser.add_argument("--json", default=None,
                        help="also write the rows as JSON to this file")
    parser.add_argument("--worker-args", default="",
                        help="net sections: extra flags for every worker, "
                        "one string (scripts/netcluster.sh --worker-args), "
                        "e.g. \"--gloo-connections=2\"")


def split_sections(parser, sections, allowed):
    """The comma-separated --sections as a list; parser.error naming the
    allowed ones on an unknown section."""
    names = [s for s in sections.split(",") if s]
    for name in names:
        if name not in allowed:
            parser.error("--sections: unknown '%s'; allowed: %s" %
                         (name, ", ".join(allowed)))
    return names


def log(*parts):
    print(*parts, flush=True)


def fmt(x, spec="%.3f"):
    if x is None or (isinstance(x, float) and (math.isnan(x) or
                                                math.isinf(x))):
        return "-"
    return spec % x


def fmt_s(x):
    return fmt(x, "%.4g")


def ratio(a, b):
    return a / b if a and b else None


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else None


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def write_spec(spec):
    """`spec` (a JobSpec as JSON) in a temporary file; the caller unlinks
    it."""
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(spec, f)
    f.close()
    return f.name


def submit_wait(cluster, spec, timeout):
    """Runs the JobSpec dict `spec` on `cluster` with `meshctl submit -f
    --wait --output json`; returns (the finished job as a dict, or
    {"state": "ERROR", "message": ...} when meshctl printed no job, and
    meshctl's CompletedProcess)."""
    path = write_spec(spec)
    try:
        result = cluster.ctl(["submit", "-f", path, "--wait", "--output",
                              "json", "--timeout", str(int(timeout))],
                             timeout=timeout + 30)
    finally:
        os.unlink(path)
    try:
        return json.loads(result.stdout), result
    except json.JSONDecodeError:
        return {"state": "ERROR",
                "message": (result.stderr or result.stdout).strip()[-300:]}, \
            result


def find_binary(bin_dir, name, subdir):
    candidates = []
    if bin_dir:
        candidates += [os.path.join(bin_dir, name),
                       os.path.join(bin_dir, subdir, name)]
    candidates.append(os.path.join(REPO, "build", subdir, name))
    for c in candidates:
        if os.access(c, os.X_OK):
            return os.path.abspath(c)
    raise RuntimeError("%s not found in %s (pass --bin-dir)" %
                       (name, ", ".join(candidates)))


class LocalCluster:
    """`meshctl up` of `workers` x `devices` CPU devices in a temporary
    directory; `meshctl down` on exit. Set .ok = True to drop its logs."""

    def __init__(self, meshctl, controller, worker, workers, devices=1,
                 up_args=(), prefix="bench-"):
        self.meshctl = meshctl
        self.workers = workers
        self.devices = devices
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.cluster_dir = os.path.join(self.dir, "cluster")
        self.bin_dir = os.path.join(self.dir, "bin")
        self.up_args = list(up_args)
        self.controller = controller
        self.worker = worker
        self.ok = False

    def __enter__(self):
        os.makedirs(self.bin_dir)
        os.symlink(self.controller,
                   os.path.join(self.bin_dir, "meshcast-controller"))
        os.symlink(self.worker, os.path.join(self.bin_dir, "meshcast-worker"))
        result = subprocess.run(
            [self.meshctl, "up", "--dir", self.cluster_dir, "--bin-dir",
             self.bin_dir, "--workers", str(self.workers),
             "--devices-per-worker", str(self.devices), "--output", "json"] +
            self.up_args, capture_output=True, text=True, timeout=90)
        if result.returncode != 0:
            self.__exit__(None, None, None)
            raise RuntimeError("meshctl up failed: %s" %
                               (result.stderr.strip()[-1500:]))
        return self

    def __exit__(self, *exc):
        subprocess.run([self.meshctl, "down", "--dir", self.cluster_dir,
                        "--grace", "5"], capture_output=True, timeout=90)
        if self.ok:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            log("# cluster logs kept in %s/logs" % self.cluster_dir)
        return False

    def ctl(self, argv, timeout):
        return subprocess.run([self.meshctl] + argv + ["--dir",
                                                      self.cluster_dir],
                              capture_output=True, text=True,
                              timeout=timeout)


class NetCluster:
    """scripts/netcluster.sh: `hosts` x `devices`, links at `rate` (tc
    units) each way, each link's queue `queue_ms` milliseconds of traffic
    (None: netcluster.sh's default). Needs root."""

    def __init__(self, bin_dir, rate, hosts, devices=1, cluster_id="bench",
                 prefix="netbench-", worker_args="", queue_ms=None):
        sys.path.insert(0, os.path.join(REPO, "bench", "netcluster"))
        import netcluster_bench  # noqa: E402 (the netcluster driver)
        self.dir = tempfile.mkdtemp(prefix=prefix)
        options = argparse.Namespace(
            dir=self.dir, id=cluster_id, hosts=hosts, devices=devices,
            rate=rate, bin_dir=bin_dir, intra_gbps=None, host_copy_gbps=None,
            transfer_setup_us=None, worker_args=worker_args,
            queue_ms=queue_ms)
        self.cluster = netcluster_bench.Cluster(options)
        self.ok = False

    def __enter__(self):
        self.cluster.up()
        return self

    def __exit__(self, *exc):
        self.cluster.down()
        if self.ok:
            shutil.rmtree(self.dir, ignore_errors=True)
        return False

    def ctl(self, argv, timeout):
        return self.cluster.meshctl(argv, timeout)


def run_bench(name, args, sections):
    """The main of a cluster benchmark: finds meshctl (and, for a `local`
    section, the daemons) under args.bin_dir, runs each of
    args.section_list with sections[name](args) -> (ok, rows), a section
    that raises RuntimeError or times out counting as failed, writes every
    row to args.json when set, and prints the closing line. Returns the
    exit status: 0 ok, 1 a section failed, 2 a binary is missing."""
    import time
    try:
        args.meshctl = find_binary(args.bin_dir, "meshctl", "cli")
        if "local" in args.section_list:
            args.controller_bin = find_binary(args.bin_dir,
                                              "meshcast-controller",
                                              "controller")
            args.worker_bin = find_binary(args.bin_dir, "meshcast-worker",
                                          "worker")
    except RuntimeError as e:
        log("%s: %s" % (name, e))
        return 2
    ok = True
    all_rows = []
    start = time.time()
    for section in args.section_list:
        try:
            good, rows = sections[section](args)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            log("# %s: FAILED: %s" % (section, e))
            good, rows = False, []
        ok = ok and good
        all_rows += rows
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": all_rows}, f, indent=1)
    log("# %s: %s in %.0f s" % (name, "ok" if ok else "FAILED",
                                time.time() - start))
    return 0 if ok else 1
