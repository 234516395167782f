#!/usr/bin/env python3
"""`tp_overlap` jobs end to end: a tensor-parallel GEMM whose output feeds a
reduce-scatter or an all-reduce, in every mode (sequential, chunked, fused,
auto) and with both collectives, on a local cluster of 4 workers x 1 CPU
device (the TP group is the mesh [4, 1]), each submitted as a JobSpec job
file with full verification.

Every job must SUCCEED with 0 mismatches, verify at least the output Y (m x n
elements per reduce-scatter, one whole Y per rank for all-reduce) against the
workers' float64 reference, and report the figures the issue defines:
gemm_seconds, comm_seconds, total_seconds (> 0), overlap_efficiency (in
[0, 1.05]) and gemm_slowdown (> 0). A job whose only fault is a timing
figure out of range (noise on a loaded machine) runs once more.

A mode the planner refuses as "not available" (the overlapping modes before
they are built) is reported and skipped; with MESHCAST_TP_OVERLAP_ALL_MODES=1
in the environment it fails the test instead. So is a missing gemm_slowdown
while only `sequential` exists.
"""

import json
import os
import tempfile

import cluster_lib as lib

MODES = ["sequential", "chunked", "fused", "auto"]
COLLECTIVES = ["reduce_scatter", "all_reduce"]
TP = 4
M, N, K = 256, 256, 2048
METRICS = ["gemm_seconds", "comm_seconds", "total_seconds",
           "overlap_efficiency", "gemm_slowdown"]


def job_file(spec):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
        return f.name


def submit(cluster, mode, collective, chunks=0):
    """The finished job, or None if the planner says the mode is not
    available."""
    spec = {"name": "tp-%s-%s-%d" % (mode, collective, chunks),
            "verify": "VERIFY_MODE_FULL",
            "tp_overlap": {"m": M, "n": N, "k": K, "dtype": "DTYPE_FLOAT32",
                           "mesh": {"shape": [TP, 1]},
                           "collective": collective, "mode": mode,
                           "chunks": chunks}}
    path = job_file(spec)
    try:
        result = cluster.ctl("submit", "-f", path, "--wait", "--output",
                             "json", timeout=120)
    finally:
        os.unlink(path)
    if result.code != 0 and "not available" in result.out + result.err:
        return None
    job = result.json()
    lib.check(result.code == (0 if job.get("state") == "SUCCEEDED" else 1),
              "submit --wait exit code %d for state %s: %r" %
              (result.code, job.get("state"), result))
    return job


def check_job(job, mode, collective, require_slowdown):
    what = "tp_overlap %s %s" % (mode, collective)
    lib.log("%s: %s, strategy %s, metrics %s" % (
        what, job.get("state"), job.get("plan", {}).get("strategy", "?"),
        json.dumps(job.get("result", {}).get("metrics", {}),
                   sort_keys=True)))
    lib.check(job.get("state") == "SUCCEEDED",
              "%s: state %s: %s" % (what, job.get("state"), job.get("message")))
    result = job.get("result", {})
    output = M * N if collective == "reduce_scatter" else TP * M * N
    lib.check(result.get("mismatches") == 0,
              "%s: %s mismatches" % (what, result.get("mismatches")))
    lib.check(result.get("elements_verified", 0) >= output,
              "%s: verified %s elements, the output alone has %d" %
              (what, result.get("elements_verified"), output))
    lib.check(result.get("max_abs_error", 0) < 1e-3,
              "%s: max_abs_error %s" % (what, result.get("max_abs_error")))
    metrics = result.get("metrics", {})
    for name in METRICS:
        if name == "gemm_slowdown" and not require_slowdown:
            continue
        lib.check(name in metrics, "%s: metric %s missing: %s" %
                  (what, name, metrics))
    for name in ("gemm_seconds", "comm_seconds", "total_seconds",
                 "gemm_slowdown"):
        if name in metrics:
            lib.check(metrics[name] > 0, "%s: %s = %s" %
                      (what, name, metrics[name]))
    efficiency = metrics["overlap_efficiency"]
    if not 0 <= efficiency <= 1.05:
        return "%s: overlap_efficiency %s" % (what, efficiency)
    # The ranks' GEMMs ran on four different workers.
    workers = {s["worker"] for s in result.get("steps", [])}
    lib.check(len(workers) == TP, "%s: steps on %s" % (what, workers))
    lib.log("%-10s %-14s ok: strategy %s, total %.4f s, gemm %.4f s, comm "
            "%.4f s, efficiency %.2f, slowdown %s" % (
                mode, collective, job.get("plan", {}).get("strategy", "?"),
                metrics["total_seconds"], metrics["gemm_seconds"],
                metrics["comm_seconds"], efficiency,
                metrics.get("gemm_slowdown", "-")))
    return None


def check_with_retry(cluster, job, mode, collective, require_slowdown,
                     chunks=0):
    """check_job; the timing figures of a job on a loaded 2-core machine
    can be off (an efficiency above 1 means the phases alone were measured
    slower than together), so a job whose only fault is such a figure runs
    once more. Verification must pass every time."""
    problem = check_job(job, mode, collective, require_slowdown)
    if problem is None:
        return
    lib.log("%s; running it once more" % problem)
    job = submit(cluster, mode, collective, chunks)
    problem = check_job(job, mode, collective, require_slowdown)
    lib.check(problem is None, problem)


def run():
    require_all = os.environ.get("MESHCAST_TP_OVERLAP_ALL_MODES") == "1"
    with lib.LocalCluster(workers=TP, devices=1) as cluster:
        jobs = {}
        missing = []
        for mode in MODES:
            for collective in COLLECTIVES:
                job = submit(cluster, mode, collective)
                if job is None:
                    missing.append(mode)
                    continue
                jobs[(mode, collective)] = job
        missing = sorted(set(missing))
        lib.check(("sequential", "reduce_scatter") in jobs,
                  "the sequential mode must always run")
        lib.check(not (missing and require_all),
                  "modes not available: %s" % ", ".join(missing))
        # Once the overlapping modes exist, every figure must be there.
        require_slowdown = not missing
        for (mode, collective), job in jobs.items():
            check_with_retry(cluster, job, mode, collective,
                             require_slowdown)
        if "chunked" not in missing:
            # A chunk count given explicitly is taken as given.
            job = submit(cluster, "chunked", "reduce_scatter", chunks=4)
            lib.check(job is not None, "chunked with chunks=4 refused")
            check_with_retry(cluster, job, "chunked", "reduce_scatter", True,
                             chunks=4)
        if missing:
            lib.log("NOT AVAILABLE (skipped): %s" % ", ".join(missing))
        lib.log("%d tp_overlap jobs verified on %d workers" %
                (len(jobs), TP))


if __name__ == "__main__":
    lib.main(run, limit_seconds=170)
