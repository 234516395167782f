#!/usr/bin/env python3
"""Soak: a bounded mixed stream of jobs of every kind (reshard, the five
collectives, tp_overlap in sequential and fused mode) on a local cluster of
4 workers x 2 CPU devices, while workers are killed with SIGKILL and
restarted and the controller is killed and restarted once.

Checks, at the end:
  - every job the controller acknowledged reaches a terminal state (none
    is lost: each one is listed after the controller's restart too);
  - a job fails only for a reason the faults explain (a worker lost, the
    controller restarted, a peer gone) — never a verification mismatch;
  - the cluster is healthy: every worker READY, and one job of each kind
    succeeds, verified.
It prints the figures (jobs per kind and final state, faults injected,
wall time, jobs per second) as a table; docs/security.md keeps a run's.

Environment: MESHCAST_SOAK_JOBS (default 60) and MESHCAST_SOAK_SECONDS
(default 45, the length of the fault phase) make it longer.
"""

import json
import os
import random
import tempfile
import threading
import time

import cluster_lib as lib

WORKERS, DEVICES = 4, 2
LEASE_SECONDS = "2"
JOBS = int(os.environ.get("MESHCAST_SOAK_JOBS", "60"))
FAULT_SECONDS = float(os.environ.get("MESHCAST_SOAK_SECONDS", "45"))
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
# What a job may die of in this test; anything else is a bug.
FAULT_WORDS = ("lost", "restarted", "abort", "unavailable", "connect",
               "peer", "deadline", "timed out", "timeout", "closed",
               "reset", "cancel", "worker", "rendezvous")


def job_file(spec):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
        return f.name


def tp_overlap_spec(mode, index):
    return {"name": "soak-tp-%s-%d" % (mode, index),
            "verify": "VERIFY_MODE_FULL",
            "tp_overlap": {"m": 128, "n": 64, "k": 256,
                           "dtype": "DTYPE_FLOAT32",
                           "mesh": {"shape": [2, 1]},
                           "collective": "reduce_scatter", "mode": mode}}


def job_args(kind, index):
    """meshctl submit arguments for job `index` of `kind`, and the temporary
    file to remove afterwards (or None)."""
    name = "soak-%s-%d" % (kind, index)
    if kind == "reshard":
        return ["reshard", "--shape", "16x64x64", "--dtype", "int32",
                "--src-mesh", "1x2", "--src-spec", "S0RR",
                "--dst-mesh", "1x2", "--dst-spec", "RS0R",
                "--name", name], None
    if kind.startswith("collective/"):
        op = kind.split("/", 1)[1]
        return ["collective", "--op", op, "--mesh", "2x1",
                "--bytes", "262144", "--dtype", "float32",
                "--name", name], None
    mode = kind.split("/", 1)[1]
    path = job_file(tp_overlap_spec(mode, index))
    return ["-f", path], path


KINDS = ["reshard", "collective/all_reduce", "collective/all_gather",
         "collective/reduce_scatter", "collective/all_to_all",
         "collective/broadcast", "tp_overlap/sequential", "tp_overlap/fused"]


class Stream:
    """Submits JOBS jobs, retrying while the controller is down; remembers
    every id the controller acknowledged."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.ids = {}          # job id -> kind
        self.retries = 0
        self.lock = threading.Lock()

    def submit(self, kind, index, deadline):
        args, path = job_args(kind, index)
        try:
            while time.time() < deadline:
                result = self.cluster.ctl("submit", *args, "--output", "json",
                                          timeout=30)
                if result.code == 0:
                    with self.lock:
                        self.ids[result.json()["id"]] = kind
                    return
                # The controller is down (being restarted): try again.
                lib.check("reach" in result.err or "unavailable" in
                          result.err.lower() or "connect" in result.err,
                          "submit of %s refused for a reason other than the "
                          "controller being down: %r" % (kind, result))
                with self.lock:
                    self.retries += 1
                time.sleep(0.5)
            raise lib.TestFailure("could not submit %s before the deadline"
                                  % kind)
        finally:
            if path:
                os.unlink(path)

    def run(self, seconds):
        deadline = time.time() + seconds + 60
        gap = seconds / JOBS
        for i in range(JOBS):
            self.submit(KINDS[i % len(KINDS)], i, deadline)
            time.sleep(gap)


def chaos(cluster, seconds, stop, faults):
    """Kills a random worker every few seconds and restarts it 1-2 s later;
    kills and restarts the controller once, half way through."""
    rng = random.Random(1234)
    start = time.time()
    controller_done = False
    while not stop.is_set() and time.time() - start < seconds:
        time.sleep(rng.uniform(2.5, 4.5))
        if not controller_done and time.time() - start > seconds / 2:
            lib.log("soak: kill -9 the controller")
            cluster.kill("controller")
            time.sleep(1)
            cluster.restart("controller")
            faults["controller restarts"] += 1
            controller_done = True
            continue
        victim = rng.choice(sorted(p["name"] for p in cluster.info["processes"]
                                   if p["name"] != "controller"))
        lib.log("soak: kill -9", victim)
        cluster.kill(victim)
        faults["worker kills"] += 1
        time.sleep(rng.uniform(1, 2))
        cluster.restart(victim)


def wait_terminal(cluster, ids, timeout):
    deadline = time.time() + timeout
    while True:
        result = cluster.ctl("list", "--output", "json")
        if result.code == 0:
            listed = {job["id"]: job for job in result.json()["jobs"]}
            missing = [i for i in ids if i not in listed]
            lib.check(not missing, "acknowledged jobs lost: %s" % missing)
            pending = [i for i in ids if listed[i]["state"] not in TERMINAL]
            if not pending:
                return listed
        else:
            pending = ["(controller unreachable)"]
        lib.check(time.time() < deadline,
                  "jobs not terminal %d s after the faults stopped: %s" %
                  (timeout, pending[:10]))
        time.sleep(0.5)


def wait_healthy(cluster, timeout):
    deadline = time.time() + timeout
    while True:
        workers = cluster.cluster()["workers"]
        states = {w["name"]: w["state"] for w in workers}
        ready = [n for n, s in states.items() if s == "ready"]
        if len(ready) == WORKERS:
            return
        lib.check(time.time() < deadline,
                  "cluster not healthy %d s after the faults: %s" %
                  (timeout, states))
        time.sleep(0.5)


def report(stream, listed, faults, wall):
    by_kind = {}
    for job_id, kind in stream.ids.items():
        state = listed[job_id]["state"]
        by_kind.setdefault(kind, {s: 0 for s in TERMINAL})[state] += 1
    lib.log("%-28s %9s %6s %9s" % ("kind", "SUCCEEDED", "FAILED", "CANCELLED"))
    totals = {s: 0 for s in TERMINAL}
    for kind in KINDS:
        counts = by_kind.get(kind, {s: 0 for s in TERMINAL})
        lib.log("%-28s %9d %6d %9d" % (kind, counts["SUCCEEDED"],
                                       counts["FAILED"], counts["CANCELLED"]))
        for s in TERMINAL:
            totals[s] += counts[s]
    reasons = {}
    for job_id in stream.ids:
        if listed[job_id]["state"] == "FAILED":
            reason = listed[job_id].get("message", "")[:70]
            reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in sorted(reasons.items(), key=lambda r: -r[1]):
        lib.log("  failed x%d: %s" % (count, reason))
    lib.log("soak: %d jobs (%d succeeded, %d failed) in %.1f s, %.2f jobs/s; "
            "%d worker kills, %d controller restart(s), %d submit retries "
            "while the controller was down; 0 lost" % (
                len(stream.ids), totals["SUCCEEDED"], totals["FAILED"], wall,
                len(stream.ids) / wall, faults["worker kills"],
                faults["controller restarts"], stream.retries))


def check_failures_explained(stream, listed):
    for job_id in stream.ids:
        job = listed[job_id]
        if job["state"] != "FAILED":
            continue
        message = job.get("message", "")
        lib.check("mismatch" not in message and "verification" not in
                  message, "job %s failed verification: %s" % (job_id,
                                                               message))
        lib.check(any(word in message.lower() for word in FAULT_WORDS),
                  "job %s failed for a reason the faults do not explain: %s"
                  % (job_id, message))


def final_jobs(cluster):
    for i, kind in enumerate(KINDS):
        args, path = job_args(kind, 1000 + i)
        try:
            job = cluster.submit_wait(args, timeout=120)
        finally:
            if path:
                os.unlink(path)
        lib.check(job["state"] == "SUCCEEDED",
                  "after the soak, %s did not succeed: %s" %
                  (kind, job.get("message")))
        lib.check(job.get("result", {}).get("mismatches", 0) == 0,
                  "after the soak, %s has mismatches" % kind)


def run():
    faults = {"worker kills": 0, "controller restarts": 0}
    with lib.LocalCluster(
            workers=WORKERS, devices=DEVICES,
            up_args=["--lease-seconds", LEASE_SECONDS,
                     "--heartbeat-seconds", "0.5"]) as cluster:
        start = time.time()
        stream = Stream(cluster)
        stop = threading.Event()
        chaos_thread = threading.Thread(
            target=chaos, args=(cluster, FAULT_SECONDS, stop, faults))
        chaos_thread.start()
        try:
            stream.run(FAULT_SECONDS)
        finally:
            stop.set()
            chaos_thread.join()
        # The last victim may still be coming back.
        for p in cluster.info["processes"]:
            if not lib.process_running(p["pid"]):
                cluster.restart(p["name"])
        listed = wait_terminal(cluster, list(stream.ids), timeout=120)
        wall = time.time() - start
        check_failures_explained(stream, listed)
        wait_healthy(cluster, timeout=30)
        final_jobs(cluster)
        report(stream, listed, faults, wall)
        lib.check(faults["controller restarts"] == 1,
                  "the controller was restarted %d times, not once" %
                  faults["controller restarts"])


if __name__ == "__main__":
    lib.main(run, limit_seconds=290)
