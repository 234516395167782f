"""Helpers for meshcast's end-to-end cluster tests (stdlib only).

Every test drives the real `meshctl` binary against real meshcast-controller
and meshcast-worker processes on 127.0.0.1, in a private cluster directory
(so tests run in parallel):

    with LocalCluster(workers=5, devices=4) as cluster:
        job = cluster.submit_wait(case_args(...))
        check_job_succeeded(job, expected_elements(...))

Binaries come from the environment (set by tests/cluster/CMakeLists.txt):
MESHCTL, MESHCAST_CONTROLLER_BIN, MESHCAST_WORKER_BIN.

The expected element counts are computed here, independently of the
planner: the sum over destination devices of the size of each device's
tile, with the chunking rule of docs/conventions.md (a dimension of length L split n ways uses
chunk = ceil(L/n); shard k covers [k*chunk, min((k+1)*chunk, L))).
"""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

MESHCTL = os.environ.get("MESHCTL", "meshctl")
CONTROLLER_BIN = os.environ.get("MESHCAST_CONTROLLER_BIN", "")
WORKER_BIN = os.environ.get("MESHCAST_WORKER_BIN", "")

STRATEGIES = ["send_recv", "local_allgather", "broadcast", "broadcast_lb",
              "meshcast"]

DTYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "int64": 8, "float16": 2,
               "bfloat16": 2, "float32": 4, "float64": 8}

FINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")


class TestFailure(AssertionError):
    pass


def log(*parts):
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def check(condition, message):
    if not condition:
        raise TestFailure(message)


# ---- expected results -----------------------------------------------------

def parse_spec(text):
    """'S0RR' or 'S0,R,R' -> [[0], [], []] (mesh axes per tensor dim)."""
    dims = []
    for token in re.findall(r"S\d+|R", text.replace(",", "")):
        dims.append([] if token == "R" else [int(c) for c in token[1:]])
    check("".join("R" if not d else "S" + "".join(map(str, d))
                  for d in dims) == text.replace(",", ""),
          "cannot parse spec %r" % text)
    return dims


def expected_elements(shape, mesh_shape, spec):
    """Elements the destination devices hold, summed over devices."""
    dims = parse_spec(spec)
    check(len(dims) == len(shape), "spec %s vs shape %s" % (spec, shape))
    total = 0
    num_devices = math.prod(mesh_shape)
    for index in range(num_devices):
        coords = []
        rest = index
        for extent in reversed(mesh_shape):
            coords.append(rest % extent)
            rest //= extent
        coords.reverse()
        elements = 1
        for length, axes in zip(shape, dims):
            shards = math.prod(mesh_shape[a] for a in axes) if axes else 1
            k = 0
            for a in axes:
                k = k * mesh_shape[a] + coords[a]
            chunk = -(-length // shards)
            begin = min(k * chunk, length)
            end = min((k + 1) * chunk, length)
            elements *= max(0, end - begin)
        total += elements
    return total


def mesh_shape_of(mesh):
    """'2x4', '2x4@1' -> [2, 4]."""
    return [int(x) for x in mesh.split("@")[0].split("x")]


def check_job_succeeded(job, expected, what, moves_bytes=True):
    """A job that SUCCEEDED, verified exactly `expected` elements with no
    mismatch and (when source and destination share no device) moved
    bytes."""
    check(job.get("state") == "SUCCEEDED",
          "%s: state %s: %s" % (what, job.get("state"), job.get("message")))
    result = job.get("result", {})
    check(result.get("mismatches") == 0,
          "%s: %s mismatches" % (what, result.get("mismatches")))
    check(result.get("elements_verified") == expected,
          "%s: verified %s elements, expected %d" %
          (what, result.get("elements_verified"), expected))
    if moves_bytes:
        check(result.get("bytes_moved", 0) > 0, "%s: no bytes moved" % what)


# ---- running meshctl -------------------------------------------------------

class Result:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err

    def json(self):
        try:
            return json.loads(self.out)
        except ValueError as e:
            raise TestFailure("not JSON (%s): %r / stderr %r" %
                              (e, self.out[:500], self.err[:500]))

    def __repr__(self):
        return "exit %d, stdout %r, stderr %r" % (self.code, self.out[-800:],
                                                   self.err[-800:])


def meshctl(*args, timeout=60, env=None):
    full_env = dict(os.environ)
    # Only what a test passes may point meshctl at a controller.
    for name in ("MESHCAST_CONTROLLER", "MESHCAST_HOME", "MESHCAST_TLS_CA",
                 "MESHCAST_TLS_CERT", "MESHCAST_TLS_KEY",
                 "MESHCAST_TOKEN_FILE"):
        full_env.pop(name, None)
    if env:
        full_env.update(env)
    try:
        proc = subprocess.run([MESHCTL] + [str(a) for a in args],
                              capture_output=True, text=True, timeout=timeout,
                              env=full_env)
    except subprocess.TimeoutExpired as e:
        raise TestFailure("meshctl %s: no answer in %d s (stdout %r)" %
                          (" ".join(map(str, args)), timeout, e.stdout))
    return Result(proc.returncode, proc.stdout, proc.stderr)


def run_parallel(tasks, parallelism):
    """Runs callables on `parallelism` threads; returns results in order and
    re-raises the first exception."""
    results = [None] * len(tasks)
    errors = []
    next_index = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if next_index[0] >= len(tasks) or errors:
                    return
                i = next_index[0]
                next_index[0] += 1
            try:
                results[i] = tasks[i]()
            except BaseException as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(e)

    threads = [threading.Thread(target=worker, daemon=True)
               for _ in range(parallelism)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def last_line(path):
    try:
        with open(path, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def process_running(pid):
    """False once `pid` has exited (a zombie not reaped yet counts as
    exited)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


# ---- a local cluster -------------------------------------------------------

class LocalCluster:
    """`meshctl up` in a fresh directory; `meshctl down` (and SIGKILL of
    anything left) on exit."""

    def __init__(self, workers, devices, up_args=(), output="json",
                 prepare=None):
        """`devices`: an int K gives `--devices-per-worker K`, a string
        `--devices SPEC`. `output="table"` runs `up` with its human output
        (kept in `up_text`) and reads cluster.json instead. `prepare(dir)`
        runs before `up` with the cluster directory (e.g. to seed
        DIR/tls/tokens). `up` turns TLS and tokens on unless `up_args` has
        --insecure; meshctl run through ctl() finds them in cluster.json."""
        self.prepare = prepare
        self.workers = workers
        self.devices = devices
        self.up_args = list(up_args)
        self.output = output
        self.up_text = None
        self.dir = tempfile.mkdtemp(prefix="meshcast-cluster-test-")
        self.bin_dir = os.path.join(self.dir, "bin")
        self.cluster_dir = os.path.join(self.dir, "cluster")
        self.info = None         # cluster.json as `meshctl up` wrote it
        self.killed = set()      # names the test killed on purpose
        self.extra_pids = set()  # processes the test started itself

    def __enter__(self):
        os.makedirs(self.bin_dir)
        for name, path in (("meshcast-controller", CONTROLLER_BIN),
                           ("meshcast-worker", WORKER_BIN)):
            check(path and os.access(path, os.X_OK),
                  "binary %s not found (%r)" % (name, path))
            os.symlink(path, os.path.join(self.bin_dir, name))
        if self.prepare is not None:
            self.prepare(self.cluster_dir)
        devices_flag = ("--devices" if isinstance(self.devices, str)
                        else "--devices-per-worker")
        result = meshctl("up", "--dir", self.cluster_dir, "--bin-dir", self.bin_dir,
                         "--workers", self.workers, devices_flag,
                         self.devices, "--output", self.output, *self.up_args,
                         timeout=60)
        if result.code != 0:
            self._dump_logs()
            # Whatever `up` recorded before failing goes too.
            if os.path.exists(os.path.join(self.cluster_dir, "cluster.json")):
                self.reload()
                self._stop()
            raise TestFailure("meshctl up failed: %r" % result)
        if self.output == "json":
            self.info = result.json()
        else:
            self.up_text = result.out
            self.reload()
        log("cluster up in", self.cluster_dir, "controller",
            self.info["controller"])
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and self.info:
            try:
                self.check_alive()
            except TestFailure as failure:
                self._dump_logs()
                self._stop()
                raise failure
        if exc_type is not None:
            self._dump_logs()
        return self._stop(exc_type)

    def _stop(self, exc_type=True):
        down = meshctl("down", "--dir", self.cluster_dir, "--grace", "5",
                       timeout=60) if self.info else None
        # Whatever survived (or was started by the test itself) goes now.
        for pid in self.all_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if exc_type is None:
            shutil.rmtree(self.dir, ignore_errors=True)
        if down is not None and exc_type is None:
            check(down.code == 0, "meshctl down failed: %r" % down)
        return False

    def _dump_logs(self):
        logs = os.path.join(self.cluster_dir, "logs")
        if not os.path.isdir(logs):
            return
        running = {}
        for p in (self.info or {}).get("processes", []):
            running[p["name"] + ".log"] = (p["pid"],
                                           process_running(p["pid"]))
        for name in sorted(os.listdir(logs)):
            with open(os.path.join(logs, name), errors="replace") as f:
                lines = f.readlines()
            pid, alive = running.get(name, (0, False))
            sys.stdout.write("---- %s (pid %d %s; last 30 lines) ----\n" %
                             (name, pid, "running" if alive else "gone"))
            sys.stdout.writelines(lines[-30:])
        sys.stdout.flush()

    def reload(self):
        """Re-reads cluster.json (after a `meshctl up` the test ran)."""
        with open(os.path.join(self.cluster_dir, "cluster.json")) as f:
            self.info = json.load(f)

    # -- processes

    def process(self, name):
        for p in self.info["processes"]:
            if p["name"] == name:
                return p
        raise TestFailure("no process %s" % name)

    def all_pids(self):
        pids = set(self.extra_pids)
        if self.info:
            pids.update(p["pid"] for p in self.info["processes"])
        return pids

    def kill(self, name, sig=signal.SIGKILL):
        os.kill(self.process(name)["pid"], sig)
        self.killed.add(name)

    def check_alive(self):
        """Fails naming every daemon that died without the test killing it
        (a crash: nothing a client sends may bring a daemon down)."""
        dead = [p for p in self.info["processes"]
                if p["name"] not in self.killed and
                not process_running(p["pid"])]
        if dead:
            core = os.path.join(self.cluster_dir, "core")
            raise TestFailure(
                "daemon(s) died: %s; last log lines: %s%s" % (
                    ", ".join("%s (pid %d)" % (p["name"], p["pid"])
                              for p in dead),
                    " | ".join(last_line(p["log"]) for p in dead),
                    "; core dump in " + core if os.path.exists(core) else ""))

    def restart(self, name):
        """Starts a process again with the command line `up` recorded (the
        controller on the same port), appending to its log."""
        p = self.process(name)
        with open(p["log"], "a") as log_file:
            proc = subprocess.Popen([p["binary"]] + p["args"],
                                    stdin=subprocess.DEVNULL, stdout=log_file,
                                    stderr=subprocess.STDOUT,
                                    start_new_session=True,
                                    cwd=self.cluster_dir)
        p["pid"] = proc.pid
        self.killed.discard(name)
        self.extra_pids.add(proc.pid)
        return proc

    # -- meshctl against this cluster

    def client_env(self):
        """The environment that lets meshctl reach this cluster without
        --dir: its CA and admin token (TLS, the default of `meshctl up`),
        or nothing for an --insecure cluster."""
        security = self.info.get("security", {})
        if security.get("insecure", True):
            return {}
        return {"MESHCAST_TLS_CA": security["tls_ca"],
                "MESHCAST_TOKEN_FILE": security["token_file"]}

    def ctl(self, *args, timeout=60):
        return meshctl(*args, "--dir", self.cluster_dir, timeout=timeout)

    def submit_wait(self, args, timeout=120):
        result = self.ctl("submit", *args, "--wait", "--output", "json",
                          timeout=timeout)
        job = result.json()
        expected = 0 if job.get("state") == "SUCCEEDED" else 1
        check(result.code == expected,
              "submit --wait exit code %d for state %s: %r" %
              (result.code, job.get("state"), result))
        return job

    def submit(self, args):
        result = self.ctl("submit", *args, "--output", "json")
        check(result.code == 0, "submit failed: %r" % result)
        return result.json()["id"]

    def get(self, job_id):
        result = self.ctl("get", job_id, "--output", "json")
        check(result.code == 0, "get %s failed: %r" % (job_id, result))
        return result.json()

    def wait_for(self, job_id, states, timeout=60):
        deadline = time.time() + timeout
        while True:
            job = self.get(job_id)
            if job["state"] in states:
                return job
            check(time.time() < deadline,
                  "job %s still %s after %d s (waiting for %s)" %
                  (job_id, job["state"], timeout, states))
            time.sleep(0.05)

    def cluster(self):
        result = self.ctl("cluster", "--output", "json")
        check(result.code == 0, "cluster failed: %r" % result)
        return result.json()


def main(test_function, limit_seconds):
    """Runs one scenario test with an overall limit below CTest's TIMEOUT,
    so that a hung test still cleans up its cluster."""
    def on_alarm(signum, frame):
        raise TestFailure("test exceeded %d s" % limit_seconds)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_alarm)
    signal.alarm(limit_seconds)
    start = time.time()
    try:
        test_function()
    except TestFailure as e:
        log("FAIL:", e)
        sys.exit(1)
    log("PASS in %.1f s" % (time.time() - start))
