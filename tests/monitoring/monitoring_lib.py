"""Helpers for meshcast's monitoring tests (python3 standard library only).

A LocalCluster is one meshcast-controller and N meshcast-worker processes on
127.0.0.1, every port chosen by the kernel (port 0) and read back from port
files, metrics served on 127.0.0.1; leaving the `with` block stops every
process it started (SIGTERM, then SIGKILL) and, on failure, prints their
logs. Jobs are driven with tests/monitoring/monitoring_client.cc:

    with LocalCluster(workers=2, devices=2) as cluster:
        job = cluster.submit(shape="64x64", dtype="int32", src_mesh="1x1",
                             src_spec="RR", dst_mesh="1x2", dst_spec="RR")
        state, message = cluster.wait(job)
        text = http_get(cluster.controller_metrics_url())

Binaries come from the environment (tests/monitoring/CMakeLists.txt sets
them): MESHCAST_CONTROLLER_BIN, MESHCAST_WORKER_BIN,
MESHCAST_MONITORING_CLIENT.

Also here: the Prometheus text-format parser and the label rules shared by
the tests, derived from docs/metrics.md and the protos rather than copied.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _binary(variable):
    path = os.environ.get(variable, "")
    # The daemons run in their own directory: relative paths would break.
    return os.path.abspath(path) if path else ""


CONTROLLER_BIN = _binary("MESHCAST_CONTROLLER_BIN")
WORKER_BIN = _binary("MESHCAST_WORKER_BIN")
CLIENT_BIN = _binary("MESHCAST_MONITORING_CLIENT")

SKIP = 77
FINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")


class TestFailure(AssertionError):
    pass


def log(*parts):
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def check(condition, message):
    if not condition:
        raise TestFailure(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode("utf-8")


def wait_for_file(path, what, timeout, processes=()):
    """Returns the stripped content of `path` once it exists and is not
    empty; fails after `timeout` s or as soon as a process exited."""
    deadline = time.time() + timeout
    while True:
        if os.path.exists(path):
            with open(path) as f:
                text = f.read().strip()
            if text:
                return text
        for p in processes:
            check(p.poll() is None,
                  "%s: process exited with %s while waiting for %s" %
                  (what, p.returncode, path))
        check(time.time() < deadline, "%s: no %s within %d s" %
              (what, path, timeout))
        time.sleep(0.02)


class LocalCluster:
    """A controller and `workers` workers with `devices` CPU devices each."""

    def __init__(self, workers=2, devices=2, controller_args=(),
                 worker_args=()):
        self.num_workers = workers
        self.devices = devices
        self.controller_args = list(controller_args)
        self.worker_args = list(worker_args)
        self.dir = tempfile.mkdtemp(prefix="meshcast-monitoring-")
        self.procs = []  # (name, Popen, log path)
        self.controller_address = None
        self.controller_metrics_port = None
        self.worker_metrics_ports = {}  # name -> port
        self.worker_names = ["worker-%d" % i for i in range(workers)]

    # -- processes

    def _start(self, name, argv):
        path = os.path.join(self.dir, name + ".log")
        with open(path, "w") as log_file:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                    stdout=log_file, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=self.dir)
        self.procs.append((name, proc, path))
        return proc

    def __enter__(self):
        try:
            self._up()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def _up(self):
        for path, what in ((CONTROLLER_BIN, "MESHCAST_CONTROLLER_BIN"),
                           (WORKER_BIN, "MESHCAST_WORKER_BIN"),
                           (CLIENT_BIN, "MESHCAST_MONITORING_CLIENT")):
            check(path and os.access(path, os.X_OK),
                  "%s is not an executable: %r" % (what, path))
        port_file = os.path.join(self.dir, "controller.port")
        metrics_file = os.path.join(self.dir, "controller.metrics-port")
        controller = self._start("controller", [
            CONTROLLER_BIN, "--listen=127.0.0.1:0",
            "--db=" + os.path.join(self.dir, "meshcast.db"),
            "--port-file=" + port_file, "--metrics-port=0",
            "--metrics-address=127.0.0.1",
            "--metrics-port-file=" + metrics_file,
            "--lease-seconds=3", "--heartbeat-seconds=0.25",
            "--insecure",  # security is tested in tests/cluster
        ] + self.controller_args)
        port = int(wait_for_file(port_file, "controller", 20, [controller]))
        self.controller_address = "127.0.0.1:%d" % port
        self.controller_metrics_port = int(
            wait_for_file(metrics_file, "controller", 5, [controller]))
        workers = []
        for name in self.worker_names:
            workers.append(self._start(name, [
                WORKER_BIN, "--controller=" + self.controller_address,
                "--listen=127.0.0.1:0", "--name=" + name,
                "--devices=cpu:%d" % self.devices,
                "--data-address=127.0.0.1", "--metrics-port=0",
                "--metrics-address=127.0.0.1",
                "--metrics-port-file=" + os.path.join(
                    self.dir, name + ".metrics-port"),
                "--insecure",
            ] + self.worker_args))
        for name, proc in zip(self.worker_names, workers):
            self.worker_metrics_ports[name] = int(wait_for_file(
                os.path.join(self.dir, name + ".metrics-port"), name, 20,
                [proc]))
        deadline = time.time() + 20
        while True:
            ready = [w for w in self.workers() if w[2] == "STATE_READY"]
            if len(ready) == self.num_workers:
                break
            check(time.time() < deadline,
                  "workers not all registered within 20 s: %r" %
                  self.workers())
            time.sleep(0.05)
        log("cluster up: controller", self.controller_address, "metrics",
            self.controller_metrics_port, "workers", self.worker_metrics_ports)

    def __exit__(self, exc_type, exc, tb):
        for _, proc, _ in self.procs:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.time() + 10
        for _, proc, _ in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if exc_type is not None:
            self.dump_logs()
        shutil.rmtree(self.dir, ignore_errors=True)
        return False

    def dump_logs(self, lines=40):
        for name, proc, path in self.procs:
            try:
                with open(path, errors="replace") as f:
                    tail = f.readlines()[-lines:]
            except OSError:
                continue
            sys.stdout.write("---- %s (exit %s; last %d lines) ----\n" %
                             (name, proc.returncode, lines))
            sys.stdout.writelines(tail)
        sys.stdout.flush()

    # -- endpoints

    def controller_metrics_url(self):
        return "http://127.0.0.1:%d/metrics" % self.controller_metrics_port

    def worker_metrics_url(self, name):
        return "http://127.0.0.1:%d/metrics" % self.worker_metrics_ports[name]

    def metrics_targets(self):
        """(job, target host:port, worker name or None) per daemon."""
        targets = [("meshcast-controller",
                    "127.0.0.1:%d" % self.controller_metrics_port, None)]
        for name in self.worker_names:
            targets.append(("meshcast-worker",
                            "127.0.0.1:%d" % self.worker_metrics_ports[name],
                            name))
        return targets

    # -- the client

    def client(self, *args, timeout=30):
        try:
            proc = subprocess.run([CLIENT_BIN] + [str(a) for a in args],
                                  capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TestFailure("monitoring_client %s: no answer in %d s" %
                              (" ".join(map(str, args)), timeout))
        return proc.returncode, proc.stdout.strip(), proc.stderr.strip()

    def workers(self):
        """[(name, gRPC address, state)] from the controller."""
        code, out, err = self.client("workers", self.controller_address)
        check(code == 0, "workers: exit %d: %s %s" % (code, out, err))
        return [tuple(line.split()) for line in out.splitlines() if line]

    def submit(self, **spec):
        code, out, err = self.client(
            "submit", self.controller_address,
            *["%s=%s" % kv for kv in sorted(spec.items())])
        check(code == 0, "submit %r: exit %d: %s %s" % (spec, code, out, err))
        return out

    def submit_expecting_error(self, **spec):
        """Returns the gRPC code name of a refused submission."""
        code, out, _ = self.client(
            "submit", self.controller_address,
            *["%s=%s" % kv for kv in sorted(spec.items())])
        check(code == 3 and out.startswith("RPC_ERROR "),
              "submit %r: expected an RPC error, got exit %d: %s" %
              (spec, code, out))
        return out.split()[1]

    def wait(self, job_id, timeout=60):
        """(final state, message)."""
        code, out, err = self.client("wait", self.controller_address, job_id,
                                     timeout, timeout=timeout + 15)
        check(code == 0, "job %s not final within %d s: %s %s" %
              (job_id, timeout, out, err))
        state, _, message = out.partition(" ")
        return state, message

    def state(self, job_id):
        code, out, err = self.client("state", self.controller_address, job_id)
        check(code == 0, "state %s: %s %s" % (job_id, out, err))
        return out

    def wait_for_state(self, job_id, states, timeout=30):
        deadline = time.time() + timeout
        while True:
            state = self.state(job_id)
            if state in states:
                return state
            check(time.time() < deadline, "job %s still %s after %d s" %
                  (job_id, state, timeout))
            time.sleep(0.02)

    def cancel(self, job_id):
        code, out, err = self.client("cancel", self.controller_address, job_id)
        check(code == 0, "cancel %s: %s %s" % (job_id, out, err))
        return out


# ---- the Prometheus text format ---------------------------------------------

SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$')
LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def parse_exposition(text):
    """Returns (types {family: type}, samples [(name, {label: value},
    value)]); raises TestFailure on a line it cannot read."""
    types, samples = {}, []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            types[name] = kind.strip()
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        check(m is not None, "unparsable sample line %r" % line)
        labels = {}
        body = m.group(3) or ""
        pos = 0
        while pos < len(body):
            lm = LABEL_RE.match(body, pos)
            check(lm is not None and lm.end() > pos,
                  "unparsable labels in %r" % line)
            labels[lm.group(1)] = lm.group(2)
            pos = lm.end()
        samples.append((m.group(1), labels, float(m.group(4))))
    return types, samples


def family_of(sample_name, types):
    """The metric family a sample belongs to (histogram and summary
    suffixes removed)."""
    if sample_name in types:
        return sample_name
    for suffix in ("_bucket", "_sum", "_count"):
        base = sample_name[:-len(suffix)]
        if sample_name.endswith(suffix) and (
                types.get(base) == "histogram" or
                (types.get(base) == "summary" and suffix != "_bucket")):
            return base
    return sample_name


def value_of(samples, name, **labels):
    """Sum of the samples named `name` whose labels include `labels`."""
    total, found = 0.0, False
    for n, ls, v in samples:
        if n == name and all(ls.get(k) == val for k, val in labels.items()):
            total += v
            found = True
    return total if found else None


# ---- what docs/metrics.md and the protos allow ---------------------------------

def documented_metrics():
    """{component: {metric name: (type, [label names])}} from the tables of
    docs/metrics.md (component = the section: controller or worker)."""
    result = {}
    section = None
    with open(os.path.join(REPO, "docs", "metrics.md"), encoding="utf-8") as f:
        for line in f:
            heading = re.match(r"^##\s+(\w+)", line)
            if heading:
                section = heading.group(1).lower()
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            # meshcast's families, and the exposer_ ones prometheus-cpp's
            # Exposer serves about its own scrapes.
            if (section is None or len(cells) < 4 or
                    not cells[0].startswith(("`meshcast_", "`exposer_"))):
                continue
            name = cells[0].strip("`")
            kind = cells[1].split()[0]
            labels = re.findall(r"`(\w+)`", cells[2])
            result.setdefault(section, {})[name] = (kind, labels)
    return result


def grpc_code_names():
    return {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
            "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
            "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
            "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
            "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}


def controller_methods():
    """Method names of the Controller service, from its proto."""
    path = os.path.join(REPO, "proto", "meshcast", "v1", "controller.proto")
    with open(path, encoding="utf-8") as f:
        methods = set(re.findall(r"^\s*rpc\s+(\w+)\s*\(", f.read(), re.M))
    check(methods, "no rpc found in " + path)
    # The standard services every daemon serves, and the catch-all.
    return methods | {"Check", "Watch", "ServerReflectionInfo", "other"}


def plan_ops():
    """'broadcast', 'send_recv', ... from the plan IR's Step.Op enum."""
    path = os.path.join(REPO, "proto", "meshcast", "v1", "plan.proto")
    with open(path, encoding="utf-8") as f:
        ops = {m.lower() for m in re.findall(r"\bOP_(\w+)\s*=", f.read())}
    check("broadcast" in ops, "no OP_ enum in " + path)
    return ops


def label_rules(devices_per_worker):
    """{label name: predicate(value)}: every value a meshcast label may take.
    Any label not here, or a value a predicate refuses, is unbounded."""
    job_states = {"queued", "planning", "running", "succeeded", "failed",
                  "cancelled"}
    methods = controller_methods()
    codes = grpc_code_names()
    ops = plan_ops()

    def number(v):
        try:
            float(v)
            return True
        except ValueError:
            return v in ("+Inf", "-Inf", "NaN")

    return {
        "state": lambda v: v in job_states | {"ready", "busy", "lost", "free"},
        "type": lambda v: v in ("reshard", "collective", "tp_overlap", "moe",
                                "calibrate", "attention", "pipeline",
                                "reshard_model"),
        "method": lambda v: v in methods,
        "code": lambda v: v in codes,
        "link": lambda v: v in ("intra", "inter"),
        "backend": lambda v: v in ("local", "gloo", "nccl"),
        "op": lambda v: v in ops,
        "device": lambda v: v.isdigit() and int(v) < devices_per_worker,
        "result": lambda v: v in ("ok", "failed", "aborted"),
        "component": lambda v: v in ("controller", "worker"),
        "quantile": lambda v: v in ("0.5", "0.9", "0.99"),
        "version": lambda v: re.fullmatch(r"\d+\.\d+\.\d+([-+][\w.]+)?", v)
                             is not None,
        "le": number,
    }


def run_main(test_function, limit_seconds):
    """Runs a test with an overall limit below CTest's TIMEOUT, so that a
    hung test still cleans up; exits 0 (pass), 1 (fail) or 77 (skip)."""
    def on_alarm(signum, frame):
        raise TestFailure("test exceeded %d s" % limit_seconds)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_alarm)
    signal.alarm(limit_seconds)
    start = time.time()
    try:
        code = test_function()
    except TestFailure as e:
        log("FAIL:", e)
        sys.exit(1)
    if code == SKIP:
        sys.exit(SKIP)
    log("PASS in %.1f s" % (time.time() - start))
    sys.exit(0)
