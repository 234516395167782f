#!/usr/bin/env python3
"""Every dashboard query returns data from a real Prometheus scraping a live
local cluster while jobs run (issue 4; the offline twin with a fake exporter
is tests/deploy/dashboards_fake_cluster_test.py).

Starts meshcast-controller and two meshcast-worker processes on 127.0.0.1
(workers relay in 64-byte chunks, so that a 128 MiB job needs two million
chunk messages and runs far longer than the controller's 4 s task deadline,
which is long enough that the first such job is still RUNNING when it is
cancelled on a loaded machine, while a 16 KiB job still takes milliseconds) and a real Prometheus server (Debian
package `prometheus`) scraping their metrics ports every second, as
deploy/prometheus/prometheus.yml does (jobs meshcast-controller and
meshcast-worker, label worker=<--name>), with the meshcast alert rules
loaded. While a background thread keeps submitting small jobs (broadcast
and point-to-point, alternately), the test also runs:
  - a slow job cancelled while RUNNING, and a small one cancelled while
    QUEUED behind it (cancelled jobs, queue depth, aborted worker tasks);
  - a slow job that misses the task deadline (a FAILED job);
  - a submission with an invalid spec (an RPC error code).
Then every panel query and variable query of dashboards/*.json, variables
filled in (with "All", and with one worker, op and state picked), is
evaluated through Prometheus's HTTP API with tests/deploy/panel_queries.py
and must return data (instant queries, and over the last 30 s); every query parses (`promtool check rules` on
panel_queries.py --rules-out); Prometheus loaded every alert rule healthy.

Bounded: the script stops itself after 120 s and always stops every process
it started. Exit 77 (skipped) only when prometheus or promtool is missing.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import monitoring_lib as lib

sys.path.insert(0, os.path.join(lib.REPO, "tests", "deploy"))
import panel_queries  # noqa: E402

ALERTS = ("MeshcastControllerDown", "MeshcastWorkerLost", "MeshcastJobFailures",
          "MeshcastVerificationFailures", "MeshcastBandwidthBelowPrediction",
          "MeshcastQueueGrowing")
SMALL = [
    dict(shape="64x64", dtype="int32", src_mesh="1x1", src_spec="RR",
         dst_mesh="1x2", dst_spec="RR", strategy="broadcast", name="small"),
    dict(shape="64x64", dtype="float32", src_mesh="1x2", src_spec="S1R",
         dst_mesh="1x2", dst_spec="S1R", name="small"),
]
# 128 MiB in 64-byte chunks: far longer than the 4 s task deadline.
SLOW = dict(shape="64x2048x256", dtype="float32", src_mesh="1x2",
            src_spec="S1RR", dst_mesh="1x2", dst_spec="RS1R", name="slow")


def get_json(url):
    return json.loads(lib.http_get(url, timeout=5))


def write_config(path, cluster, rules):
    lines = ["global: {scrape_interval: 1s, evaluation_interval: 1s}",
             "rule_files: [%s]" % json.dumps(rules),
             "scrape_configs:"]
    by_job = {}
    for job, target, worker in cluster.metrics_targets():
        by_job.setdefault(job, []).append((target, worker))
    for job, targets in by_job.items():
        lines.append("  - job_name: %s" % job)
        lines.append("    static_configs:")
        for target, worker in targets:
            labels = " labels: {worker: %s}," % worker if worker else ""
            lines.append("      - {targets: [%s],%s}" %
                         (json.dumps(target), labels))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


class Load:
    """Submits the SMALL jobs one after the other until stopped."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.stop = threading.Event()
        self.states = []
        self.error = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        i = 0
        try:
            while not self.stop.is_set():
                job = self.cluster.submit(**SMALL[i % len(SMALL)])
                self.states.append(self.cluster.wait(job, timeout=30)[0])
                i += 1
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=40)
        return False


class Prometheus:
    def __init__(self, binary, config, work):
        self.port = lib.free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(work, "prometheus.log")
        with open(self.log_path, "w") as log_file:
            self.proc = subprocess.Popen(
                [binary, "--config.file=" + config,
                 "--storage.tsdb.path=" + os.path.join(work, "data"),
                 "--web.listen-address=127.0.0.1:%d" % self.port,
                 "--log.level=warn"],
                stdout=log_file, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)

    def query(self, expr):
        return get_json(self.base + "/api/v1/query?query=" +
                        urllib.parse.quote(expr))["data"]["result"]

    def wait_for_scrapes(self, count, targets, timeout):
        """Until every target has `count` successful scrapes."""
        deadline = time.time() + timeout
        expr = ('count_over_time(up{job=~"meshcast.*"}[1m]) >= %d and '
                'up{job=~"meshcast.*"} == 1' % count)
        while True:
            lib.check(self.proc.poll() is None, "prometheus exited: " +
                      open(self.log_path).read()[-2000:])
            try:
                if len(self.query(expr)) == targets:
                    return
            except (OSError, ValueError, KeyError):
                pass
            lib.check(time.time() < deadline,
                      "prometheus did not scrape %d targets %d times in %d s"
                      % (targets, count, timeout))
            time.sleep(0.25)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def check_queries_parse(promtool, work):
    rules = os.path.join(work, "panel-queries.rules.yml")
    lib.check(panel_queries.main(["--rules-out", rules]) == 0,
              "panel_queries.py could not extract the queries")
    proc = subprocess.run([promtool, "check", "rules", rules],
                          capture_output=True, text=True, timeout=60)
    lib.check(proc.returncode == 0, "promtool check rules on the panel "
              "queries: %s %s" % (proc.stdout, proc.stderr))


def scenario(cluster):
    """Cancelled, queued, failed and refused jobs."""
    slow = cluster.submit(**SLOW)
    cluster.wait_for_state(slow, ("RUNNING",), timeout=30)
    queued = cluster.submit(**SMALL[1])
    cluster.wait_for_state(queued, ("QUEUED",), timeout=10)
    time.sleep(1.5)  # a scrape or two with a job in the queue
    lib.check(cluster.cancel(queued) == "CANCELLED", "queued job not cancelled")
    lib.check(cluster.cancel(slow) == "CANCELLED", "running job not cancelled")
    lib.log("cancelled a running and a queued job")

    failing = cluster.submit(**SLOW)
    state, message = cluster.wait(failing, timeout=30)
    lib.check(state == "FAILED", "slow job under a 4 s deadline: %s %s" %
              (state, message))
    lib.log("job past its deadline FAILED:", message[:100])

    code = cluster.submit_expecting_error(
        shape="8x8", dtype="int32", src_mesh="1x2", src_spec="Q",
        dst_mesh="1x2", dst_spec="RR")
    lib.check(code == "INVALID_ARGUMENT", "bad spec answered %s" % code)


def test():
    prometheus_bin = shutil.which("prometheus")
    promtool = shutil.which("promtool")
    if not prometheus_bin or not promtool:
        print("SKIP: no prometheus/promtool (Debian package `prometheus`, "
              "scripts/install-deps.sh)")
        return lib.SKIP
    work = tempfile.mkdtemp(prefix="meshcast-live-prometheus-")
    rules = os.path.join(lib.REPO, "deploy", "prometheus", "rules",
                         "meshcast-alerts.yml")
    prometheus = None
    try:
        check_queries_parse(promtool, work)
        with lib.LocalCluster(
                workers=2, devices=2,
                controller_args=["--task-timeout-seconds=4"],
                worker_args=["--chunk-bytes=64"]) as cluster:
            config = os.path.join(work, "prometheus.yml")
            write_config(config, cluster, rules)
            prometheus = Prometheus(prometheus_bin, config, work)
            start = time.time()
            with Load(cluster) as load:
                scenario(cluster)
                # rate() over the 10 s windows below needs several scrapes of
                # every target since the jobs started.
                prometheus.wait_for_scrapes(8, 3, timeout=40)
                lib.check(load.error is None, "load: %r" % load.error)
                lib.check(load.states and set(load.states) == {"SUCCEEDED"},
                          "small jobs ended %s" % load.states)
                lib.log("%d small jobs succeeded; evaluating the panel "
                        "queries after %.1f s" %
                        (len(load.states), time.time() - start))
                failures = []
                if panel_queries.main([prometheus.base, "--rate-interval",
                                       "10s", "--interval", "5s", "--range",
                                       "1m"]) != 0:
                    failures.append("panel queries (instant) returned no "
                                    "data or errors")
                # One worker, op and final state picked, as a user would:
                # the worker on the destination side (the jobs' sources sit
                # on the other one, which receives nothing).
                receivers = prometheus.query(
                    'meshcast_worker_bytes_received_total{link="inter"} > 0')
                lib.check(receivers, "no worker received inter-worker bytes")
                receiver = receivers[0]["metric"]["worker"]
                if panel_queries.main([prometheus.base, "--rate-interval",
                                       "10s", "--range", "1m",
                                       "--var", "worker=" + receiver,
                                       "--var", "op=broadcast",
                                       "--var", "state=succeeded",
                                       "--var", "type=reshard"]) != 0:
                    failures.append("panel queries with variables set "
                                    "returned no data or errors")
                if panel_queries.main([prometheus.base, "--query-range", "30",
                                       "--step", "2", "--rate-interval", "10s",
                                       "--range", "1m"]) != 0:
                    failures.append("panel queries over the last 30 s "
                                    "returned no data or errors")
            groups = get_json(prometheus.base + "/api/v1/rules")["data"]["groups"]
            loaded = {r["name"]: r for g in groups for r in g["rules"]}
            for name in ALERTS:
                rule = loaded.get(name)
                if not rule:
                    failures.append("alert %s not loaded" % name)
                elif rule.get("health") not in ("ok", "unknown"):
                    failures.append("alert %s: health %s: %s" %
                                    (name, rule.get("health"),
                                     rule.get("lastError")))
            # The failure panels saw real failures, not only zeros.
            failed = prometheus.query(
                'sum(meshcast_controller_jobs_finished_total{state="failed"})')
            cancelled = prometheus.query(
                'sum(meshcast_controller_jobs_finished_total'
                '{state="cancelled"})')
            aborted = prometheus.query(
                'sum(meshcast_worker_tasks_total{result="aborted"})')
            for what, result, want in (("failed jobs", failed, 1),
                                       ("cancelled jobs", cancelled, 2),
                                       ("aborted worker tasks", aborted, 1)):
                got = float(result[0]["value"][1]) if result else 0
                if got < want:
                    failures.append("prometheus saw %g %s, expected >= %d" %
                                    (got, what, want))
            for f in failures:
                lib.log("FAIL:", f)
            lib.check(not failures, "%d failure(s)" % len(failures))
            lib.log("every panel query returned data; %d rules loaded" %
                    len(loaded))
    finally:
        if prometheus is not None:
            prometheus.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    lib.run_main(test, 120)
