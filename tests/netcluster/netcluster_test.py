#!/usr/bin/env python3
"""Integration test of meshcast on an emulated multi-host cluster.

Brings up scripts/netcluster.sh with 3 hosts x 2 CPU devices behind links
shaped to 300 Mbit/s, then checks, in order:

  1. the shaping: TCP goodput between hosts, alone and under incast, is
     within 15% of the rate the planner is told;
  2. resharding end to end through `meshctl submit --wait`: a few cases
     (several strategies, dtypes, an uneven shape), each verified element by
     element by the workers; the NIC-bound one and one inside a host (bound
     by the host's calibrated copy capacity, which the controller must have
     been given) measured within a loose bound of the simulator's
     prediction, and the controller's topology carrying the host copy
     capacity and the per-transfer set-up time netcluster.sh passed;
  3. every collective (`meshctl submit collective`) across the hosts, each
     verified element by element, its bus bandwidth (nccl-tests'
     definition) logged next to the link bound and never above it;
  4. a fault: a destination host's link is cut while its bytes are arriving
     (the cut is triggered by the link's own byte counter): the job fails
     with an error naming the host within a bounded time, every daemon stays
     alive, the other workers go back to ready, and once the link is back
     the host re-registers and the next job succeeds;
  5. bring-up failures (a worker that cannot start) leave nothing behind,
     and `down` is idempotent.

Everything is torn down at the end, also on failure or SIGTERM/SIGINT
(ctest's timeout), and the namespaces of earlier runs that were killed
outright are removed at start. Exits 77 (skipped) with the reason when not
root or when network namespaces or tc shaping are unavailable.

    sudo tests/netcluster/netcluster_test.py --bin-dir BUILD_DIR

Python 3 standard library only.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NETCLUSTER = os.path.join(REPO, "scripts", "netcluster.sh")
SKIP = 77
HOSTS, DEVICES, RATE = 3, 2, "300mbit"
LEASE_SECONDS = 3
# The whole test, enforced here so that clean-up runs before ctest's own
# timeout would kill the process.
DEADLINE_SECONDS = 170


class Skip(Exception):
    pass


class TestFailure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise TestFailure(message)


def log(message):
    print("[netcluster_test %6.1fs] %s" % (time.time() - START, message),
          flush=True)


def run(argv, timeout=60, check_rc=True):
    result = subprocess.run(argv, capture_output=True, text=True,
                            timeout=timeout)
    if check_rc and result.returncode != 0:
        raise TestFailure("%s exited %d:\n%s%s" %
                          (" ".join(argv), result.returncode, result.stdout,
                           result.stderr))
    return result


def alive(pid):
    """True if pid runs; a zombie (exited, not yet reaped by its adoptive
    parent) counts as gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return False
    # The state follows the parenthesized command name.
    return not stat.rsplit(")", 1)[1].strip().startswith("Z")


def our_namespaces(cluster_id):
    out = run(["ip", "netns", "list"]).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if n.startswith("mc-%s-" % cluster_id)]


def probe_environment(cluster_id):
    """Raises Skip unless namespaces and tc tbf work here."""
    if os.geteuid() != 0:
        raise Skip("needs root (network namespaces and tc need CAP_NET_ADMIN)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise Skip("'%s' not found (iproute2 missing)" % tool)
    probe = "mc-%s-probe" % cluster_id
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True,
                          text=True)
    if made.returncode != 0:
        raise Skip("'ip netns add' failed: %s" % made.stderr.strip())
    try:
        shaped = subprocess.run(
            ["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "tbf",
             "rate", "100mbit", "burst", "128k", "latency", "50ms"],
            capture_output=True, text=True)
        if shaped.returncode != 0:
            raise Skip("'tc qdisc add ... tbf' failed: %s" %
                       shaped.stderr.strip())
        veth = subprocess.run(
            ["ip", "-n", probe, "link", "add", "name", "pa", "type", "veth", "peer",
             "name", "pb"], capture_output=True, text=True)
        if veth.returncode != 0:
            raise Skip("veth pairs unavailable: %s" % veth.stderr.strip())
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def remove_stale_clusters():
    """Tears down clusters of earlier runs of this test that were killed
    before their clean-up (their id is t<pid> and that pid is gone)."""
    out = run(["ip", "netns", "list"]).stdout
    stale = set()
    for line in out.splitlines():
        m = re.match(r"mc-(t(\d+))-", line)
        if m and not alive(int(m.group(2))):
            stale.add(m.group(1))
    for cluster_id in sorted(stale):
        log("removing namespaces of a killed earlier run: mc-%s-*" %
            cluster_id)
        with tempfile.TemporaryDirectory() as d:
            run(["bash", NETCLUSTER, "down", "--dir", d, "--id", cluster_id],
                timeout=60, check_rc=False)


class Cluster:

    def __init__(self, state_dir, cluster_id, bin_dir):
        self.dir = state_dir
        self.id = cluster_id
        self.bin_dir = bin_dir
        self.env = {}

    def netcluster(self, *argv, timeout=60, check_rc=True):
        return run(["bash", NETCLUSTER] + list(argv), timeout=timeout,
                   check_rc=check_rc)

    def up(self, extra=()):
        self.netcluster(
            "up", "--dir", self.dir, "--id", self.id, "--hosts", str(HOSTS),
            "--devices", str(DEVICES), "--rate", RATE, "--bin-dir",
            self.bin_dir, "--lease-seconds", str(LEASE_SECONDS),
            "--register-timeout", "30", *extra, timeout=120)
        out = run(["bash", "-c", 'set -a; source "$1"; env -0', "_",
                   os.path.join(self.dir, "netcluster.env")]).stdout
        self.env = dict(item.split("=", 1) for item in out.split("\0")
                        if "=" in item)

    def down(self):
        return self.netcluster("down", "--dir", self.dir, "--id", self.id,
                               timeout=90, check_rc=False)

    def meshctl(self, *argv, timeout=60, check_rc=False):
        return self.netcluster("exec", "--dir", self.dir, "--", "meshctl",
                               *argv, timeout=timeout, check_rc=check_rc)

    def meshctl_json(self, *argv, timeout=60):
        result = self.meshctl(*argv, "--output", "json", timeout=timeout)
        try:
            return json.loads(result.stdout)
        except json.JSONDecodeError:
            raise TestFailure("meshctl %s: no JSON (exit %d): %s %s" %
                              (" ".join(argv), result.returncode,
                               result.stdout, result.stderr))

    def workers(self):
        return {w["name"]: w for w in self.meshctl_json("cluster")["workers"]}

    def daemon_pids(self):
        pids = {"controller": int(self.env["NETCLUSTER_CONTROLLER_PID"])}
        for i, pid in enumerate(self.env["NETCLUSTER_WORKER_PIDS"].split()):
            pids["h%d" % i] = int(pid)
        return pids

    def received_bytes(self, host):
        """Bytes the bridge has sent into host's link (its ingress)."""
        out = run(["tc", "-s", "-n", self.env["NETCLUSTER_BRIDGE_NS"],
                   "qdisc", "show", "dev", "h%d" % host]).stdout
        m = re.search(r"Sent (\d+) bytes", out)
        check(m is not None, "no tc counters on h%d's link: %s" % (host, out))
        return int(m.group(1))


def reshard_args(shape, dtype, src_mesh, src_spec, dst_mesh, dst_spec,
                 strategy):
    return ["submit", "reshard", "--shape", shape, "--dtype", dtype,
            "--src-mesh", src_mesh, "--src-spec", src_spec, "--dst-mesh",
            dst_mesh, "--dst-spec", dst_spec, "--strategy", strategy]


def test_shaping(cluster):
    out = cluster.netcluster("check", "--dir", cluster.dir, "--bytes",
                             str(12 << 20), timeout=90).stdout
    log("link check:\n" + out.rstrip())
    ratios = re.findall(r"^(h\S+.*?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", out,
                        re.M)
    check(len(ratios) == HOSTS + 1,
          "expected %d probe rows, got: %s" % (HOSTS + 1, out))
    for name, _, _, ratio in ratios:
        check(0.85 <= float(ratio) <= 1.08,
              "link %s: goodput %.3f x the planner's rate (want 0.85..1.08)"
              % (name.strip(), float(ratio)))


def test_controller_topology(cluster):
    """The controller was started with the CPU-side costs netcluster.sh
    worked out (its start-up line lists the topology it plans with)."""
    env = cluster.env
    copy_gbps = float(env["NETCLUSTER_HOST_COPY_GBPS"])
    setup_us = float(env["NETCLUSTER_TRANSFER_SETUP_US"])
    check(env["NETCLUSTER_HOST_COPY_SOURCE"] == "calibrate",
          "host copy should be calibrated by default with 2 devices: %s" %
          env["NETCLUSTER_HOST_COPY_SOURCE"])
    check(copy_gbps > 0, "calibrated host copy %s Gbps" % copy_gbps)
    check(setup_us == 300, "default transfer setup %s us" % setup_us)
    with open(os.path.join(cluster.dir, "logs", "controller.log")) as f:
        text = f.read()
    m = re.search(r"host copy ([\d.e+]+) Gbps, transfer setup ([\d.e+]+) us",
                  text)
    check(m is not None, "controller log has no topology line:\n%s" % text)
    check(abs(float(m.group(1)) / copy_gbps - 1) < 1e-3 and
          abs(float(m.group(2)) - setup_us) < 1e-6,
          "controller plans with host copy %s Gbps, setup %s us; netcluster "
          "passed %s, %s" % (m.group(1), m.group(2), copy_gbps, setup_us))


def test_reshard_cases(cluster):
    cases = [
        # (args, timed): "nic" and "copy" rows are timed against the model.
        (reshard_args("1024x1024x8", "int32", "1x2@0", "S1RR", "2x2@1",
                      "RRR", "meshcast"), "nic"),
        # Inside host 1 only: its copy capacity decides (the calibration job,
        # on another host).
        (reshard_args("128x128x1024", "int32", "1x2@1", "S1RR", "1x2@1",
                      "RRR", "meshcast"), "copy"),
        (reshard_args("1000x999x7", "float32", "1x2@0", "S0RR", "2x2@1",
                      "RS1R", "broadcast_lb"), None),
        (reshard_args("512x512x24", "bfloat16", "2x2@0", "S0RR", "1x2@2",
                      "RS0R", "send_recv"), None),
        (reshard_args("256x384x40", "int8", "1x2@2", "RS01R", "2x2@0",
                      "S01RR", "local_allgather"), None),
        (reshard_args("333x257x9", "float64", "1x1@1", "RRR", "2x1@0", "S0RR",
                      "broadcast"), None),
    ]
    # Loose: the benchmark reports the exact ratios. The copy-bound one
    # varies with what else runs on the machine's cores.
    bounds = {"nic": (0.7, 1.5), "copy": (0.4, 2.5)}
    for args, timed in cases:
        started = time.time()
        job = cluster.meshctl_json(*args, "--wait", "--timeout", "60",
                                   timeout=90)
        result = job.get("result", {})
        log("%s %s: %s in %.1f s wall: %s" %
            (job.get("id"), " ".join(args[2:]), job.get("state"),
             time.time() - started, job.get("message")))
        check(job.get("state") == "SUCCEEDED",
              "job %s did not succeed: %s" % (" ".join(args), job))
        check(result.get("mismatches", -1) == 0 and
              result.get("elements_verified", 0) > 0,
              "verification: %s" % result)
        if timed:
            measured = result["seconds"]
            if timed == "copy":
                # A few milliseconds of copies, which run at about 50 or
                # about 150 Gbit/s from one run to the next on a shared VM:
                # the median of three runs against the calibration's
                # median of five, not one run against it.
                runs = [measured]
                for _ in range(2):
                    again = cluster.meshctl_json(*args, "--wait", "--timeout",
                                                 "60", timeout=90)
                    check(again.get("state") == "SUCCEEDED",
                          "job %s did not succeed: %s" % (" ".join(args),
                                                          again))
                    runs.append(again["result"]["seconds"])
                measured = sorted(runs)[1]
                log("  copy-bound runs: %s s" %
                    ", ".join("%.4f" % r for r in runs))
            ratio = measured / result["predicted_seconds"]
            log("  %s-bound: measured %.4f s, predicted %.4f s, lower bound "
                "%.4f s (measured/predicted %.2f)" %
                (timed, measured, result["predicted_seconds"],
                 result["lower_bound_seconds"], ratio))
            low, high = bounds[timed]
            check(low <= ratio <= high,
                  "%s-bound job: measured/predicted %.2f outside %.1f..%.1f"
                  % (timed, ratio, low, high))
            if timed == "copy":
                # The planner charged the host's copy capacity: both 32 MiB
                # halves are copied to the other device through it, after
                # the set-up time. (Without it, the per-device ports at
                # memcpy speed would predict about half of this.)
                env = cluster.env
                floor = (64 << 20) / (float(env["NETCLUSTER_HOST_COPY_GBPS"])
                                      * 1e9 / 8) + float(
                                          env["NETCLUSTER_TRANSFER_SETUP_US"]
                                      ) * 1e-6
                check(result["predicted_seconds"] >= 0.99 * floor,
                      "predicted %.4f s is below the host copy bound %.4f s: "
                      "the controller ignores --host-copy-gbps?" %
                      (result["predicted_seconds"], floor))


COLLECTIVE_OPS = ["all_reduce", "all_gather", "reduce_scatter",
                  "all_to_all", "broadcast"]


def collective_elements(op, ranks, size, element_bytes):
    """Destination elements of a collective, from its definition."""
    count = size // element_bytes
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        count -= count % ranks
    return {"all_reduce": ranks * count, "all_gather": ranks * count,
            "reduce_scatter": count, "all_to_all": ranks * count,
            "broadcast": (ranks - 1) * count}[op]


def test_collectives(cluster):
    # One device per host: every byte crosses the shaped links. 3x2 adds the
    # hierarchical path (two ranks per worker).
    cases = [(op, "%dx1" % HOSTS, HOSTS, 4 << 20) for op in COLLECTIVE_OPS]
    cases.append(("all_reduce", "%dx2" % HOSTS, HOSTS * 2, 4 << 20))
    for op, mesh, ranks, size in cases:
        job = cluster.meshctl_json(
            "submit", "collective", "--op", op, "--mesh", mesh, "--bytes",
            str(size), "--dtype", "float32", "--iterations", "2", "--wait",
            "--timeout", "60", timeout=90)
        result = job.get("result", {})
        metrics = result.get("metrics", {})
        check(job.get("state") == "SUCCEEDED",
              "collective %s on %s did not succeed: %s" % (op, mesh, job))
        expected = collective_elements(op, ranks, size, 4)
        check(result.get("mismatches", -1) == 0 and
              result.get("elements_verified") == expected,
              "collective %s on %s verified %s elements (want %d), %s "
              "mismatches" % (op, mesh, result.get("elements_verified"),
                              expected, result.get("mismatches")))
        busbw = metrics.get("busbw_bytes_per_second", 0)
        bound = metrics.get("busbw_bound_bytes_per_second", 0)
        log("  %-14s %s %5.1f MiB: busbw %.3f Gbps, link bound %.3f Gbps "
            "(%.2f), predicted %.3f Gbps" %
            (op, mesh, size / 2**20, busbw * 8e-9, bound * 8e-9,
             busbw / bound if bound else 0,
             metrics.get("busbw_predicted_bytes_per_second", 0) * 8e-9))
        check(busbw > 0 and bound > 0, "metrics missing: %s" % metrics)
        # Nothing beats the links (10% for timer and shaping slack).
        check(busbw <= 1.1 * bound,
              "collective %s on %s: busbw %.3g B/s above the link bound "
              "%.3g B/s" % (op, mesh, busbw, bound))


def wait_for(predicate, timeout, what, interval=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TestFailure("timed out after %.0f s waiting for %s" % (timeout, what))


# From host `src`'s namespace, a TCP connect to `addr` gets an answer: a
# connection or a refusal (port 9 has no listener) proves the path and the
# neighbour entry are back; "no route to host" or a timeout does not.
REACH_PROBE = """
import socket, sys
s = socket.socket()
s.settimeout(1)
try:
    s.connect((sys.argv[1], 9))
except ConnectionRefusedError:
    pass
except OSError:
    sys.exit(1)
"""


def reachable(cluster, src, addr):
    ns = cluster.env["NETCLUSTER_HOST_NS"].split()[src]
    return subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c",
                           REACH_PROBE, addr], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, timeout=10).returncode == 0


def test_link_fault(cluster):
    victim = 2  # a destination host
    pids = cluster.daemon_pids()
    # 128 MiB into each destination host: about 3.7 s on the wire at 300
    # Mbit/s, long enough to cut the link in the middle.
    job = cluster.meshctl_json(*reshard_args("1024x1024x32", "int32", "1x2@0",
                                             "S1RR", "2x2@1", "RRR",
                                             "meshcast"))
    job_id = job["id"]
    expected = 4 * 1024 * 1024 * 32
    base = cluster.received_bytes(victim)
    wait_for(lambda: cluster.received_bytes(victim) - base > expected // 4,
             30, "a quarter of the job's bytes to reach h%d" % victim,
             interval=0.05)
    state = cluster.meshctl_json("get", job_id)["state"]
    check(state == "RUNNING",
          "the job should be mid-transfer at the cut, but is %s" % state)
    cluster.netcluster("link", str(victim), "down", "--dir", cluster.dir)
    cut = time.time()
    log("cut h%d's link with %d of %d bytes delivered to it" %
        (victim, cluster.received_bytes(victim) - base, expected))
    try:
        ended = wait_for(
            lambda: (lambda j: j if j["state"] != "RUNNING" else None)(
                cluster.meshctl_json("get", job_id)),
            30, "job %s to end after the cut" % job_id, interval=0.25)
        failed_after = time.time() - cut
        log("job %s %s %.1f s after the cut: %s" %
            (job_id, ended["state"], failed_after, ended["message"]))
        check(ended["state"] == "FAILED",
              "job should fail after the cut, got %s" % ended["state"])
        victim_names = ("h%d" % victim,
                        cluster.env["NETCLUSTER_HOST_ADDRS"].split()[victim])
        check(any(name in ended["message"] for name in victim_names),
              "the failure should name h%d or its address: %s" %
              (victim, ended["message"]))
        check(failed_after <= 3 * LEASE_SECONDS + 5,
              "failure took %.1f s (lease %d s)" % (failed_after,
                                                    LEASE_SECONDS))
        # The others let go of the job: back to ready, not stuck busy.
        wait_for(lambda: all(w["state"] == "ready"
                             for n, w in cluster.workers().items()
                             if n != "h%d" % victim),
                 15, "the other workers to be ready again")
        for name, pid in pids.items():
            check(alive(pid), "%s (pid %d) died after the cut" % (name, pid))
    finally:
        cluster.netcluster("link", str(victim), "up", "--dir", cluster.dir)
    restored = time.time()
    wait_for(lambda: len(cluster.workers()) == HOSTS and all(
        w["state"] == "ready" for w in cluster.workers().values()),
             30, "h%d to re-register after the link came back" % victim)
    log("all workers ready %.1f s after the link came back" %
        (time.time() - restored))
    # Registered through the controller's path is not yet the data plane:
    # the victim's neighbour entries for its peers failed during the cut.
    # Recovered means the victim reaches every other host again.
    addrs = cluster.env["NETCLUSTER_HOST_ADDRS"].split()
    for peer, addr in enumerate(addrs):
        if peer != victim:
            wait_for(lambda: reachable(cluster, victim, addr), 15,
                     "h%d to reach h%d (%s) again" % (victim, peer, addr),
                     interval=0.5)
    log("h%d reaches every host %.1f s after the link came back" %
        (victim, time.time() - restored))
    after = cluster.meshctl_json(*reshard_args("1024x1024x8", "int32",
                                               "1x2@0", "S1RR", "2x2@1", "RRR",
                                               "meshcast"),
                                 "--wait", "--timeout", "60", timeout=90)
    log("next job %s: %s" % (after.get("id"), after.get("message")))
    check(after["state"] == "SUCCEEDED",
          "the job after the link came back failed: %s" % after)
    for name, pid in pids.items():
        check(alive(pid), "%s (pid %d) is gone" % (name, pid))


def test_teardown(cluster):
    pids = cluster.daemon_pids()
    out = cluster.down()
    check(out.returncode == 0, "down failed: %s" % out.stderr)
    check(not our_namespaces(cluster.id),
          "namespaces left: %s" % our_namespaces(cluster.id))
    for name, pid in pids.items():
        check(not alive(pid), "%s (pid %d) survived down" % (name, pid))
    check(cluster.down().returncode == 0, "a second down failed")


def test_failed_up_cleans_up(cluster):
    # A worker that cannot start: up must fail and leave nothing behind.
    result = cluster.netcluster(
        "up", "--dir", cluster.dir, "--id", cluster.id, "--hosts", "2",
        "--devices", "1", "--rate", RATE, "--bin-dir", cluster.bin_dir,
        "--intra-gbps", "10", "--worker-args", "--devices=bogus",
        timeout=120, check_rc=False)
    check(result.returncode != 0, "up with a broken worker succeeded")
    check("worker h0" in result.stderr,
          "up should name the failed worker: %s" % result.stderr)
    check(not our_namespaces(cluster.id),
          "failed up left namespaces: %s" % our_namespaces(cluster.id))
    check(not os.path.exists(os.path.join(cluster.dir, "netcluster.env")),
          "failed up left netcluster.env")
    leftovers = run(["pgrep", "-f", "--", "--db %s/controller.db" %
                     cluster.dir], check_rc=False).stdout.split()
    check(not leftovers, "failed up left processes: %s" % leftovers)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True,
                        help="build directory with meshcast-controller, "
                        "meshcast-worker and meshctl")
    args = parser.parse_args()
    cluster_id = "t%d" % os.getpid()
    try:
        probe_environment(cluster_id)
    except Skip as skip:
        print("SKIP: %s" % skip, flush=True)
        return SKIP
    remove_stale_clusters()

    # Turn ctest's SIGTERM, a Ctrl-C and our own deadline into an exception,
    # so that the clean-up below always runs.
    def on_signal(signum, frame):
        if signum == signal.SIGALRM:
            raise TestFailure("test took longer than %d s" % DEADLINE_SECONDS)
        raise TestFailure("interrupted by signal %d" % signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(signum, on_signal)
    signal.alarm(DEADLINE_SECONDS)

    state_dir = tempfile.mkdtemp(prefix="netcluster-test-")
    cluster = Cluster(state_dir, cluster_id, os.path.abspath(args.bin_dir))
    status = 1
    try:
        log("bringing up %d hosts x %d devices at %s in %s" %
            (HOSTS, DEVICES, RATE, state_dir))
        cluster.up()
        log("up: planner told %s Gbps between hosts, %s Gbps per device "
            "inside, host copy %s Gbps, transfer setup %s us" %
            (cluster.env["NETCLUSTER_INTER_GBPS"],
             cluster.env["NETCLUSTER_INTRA_GBPS"],
             cluster.env["NETCLUSTER_HOST_COPY_GBPS"],
             cluster.env["NETCLUSTER_TRANSFER_SETUP_US"]))
        for test in (test_shaping, test_controller_topology,
                     test_reshard_cases, test_collectives, test_link_fault,
                     test_teardown, test_failed_up_cleans_up):
            log("--- %s" % test.__name__)
            test(cluster)
        status = 0
        log("PASS")
    except (TestFailure, subprocess.TimeoutExpired) as failure:
        log("FAIL: %s" % failure)
        for name in sorted(os.listdir(os.path.join(state_dir, "logs"))
                           if os.path.isdir(os.path.join(state_dir, "logs"))
                           else []):
            with open(os.path.join(state_dir, "logs", name)) as f:
                tail = f.readlines()[-15:]
            print("--- %s (last lines)\n%s" % (name, "".join(tail)))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        cluster.down()
        left = our_namespaces(cluster_id)
        if left:
            log("FAIL: namespaces left after clean-up: %s" % left)
            status = 1
        shutil.rmtree(state_dir, ignore_errors=True)
    return status


START = time.time()
if __name__ == "__main__":
    sys.exit(main())
