#!/usr/bin/env python3
"""`attention` jobs end to end: self-attention over a sequence split across
a local cluster of 2 workers x 2 CPU devices (a group of 4), with every
algorithm (rsa, ring, ulysses, auto), every layout (contiguous, zigzag,
striped), causal and not, grouped-query heads, each submitted as a JobSpec
job file with full verification; and with `pass: forward_backward`, the
gradients dQ, dK and dV too.

Every job must SUCCEED with 0 mismatches, verify every element of the
output O (and of dQ, dK, dV) once (each is split over the group), and
report the kind's figures.
`meshctl plan -f` must list every algorithm with its prediction and mark
auto's pick; ulysses on heads that the group does not divide must be
refused at submit, naming the field.
"""

import json
import os
import tempfile

import cluster_lib as lib

WORKERS, DEVICES = 2, 2
BATCH, HEADS, KV_HEADS, SEQ, DIM = 2, 4, 4, 64, 16
METRICS = ["total_seconds", "compute_only_ideal_seconds", "ideal_fraction",
           "compute_max_seconds", "causal_balance",
           "bytes_sent_per_rank_max", "memory_bytes_per_rank_max"]


def job_file(spec):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
        return f.name


def spec(algorithm, layout, causal, kv_heads=KV_HEADS, backward=False):
    job = {"name": "attention-%s-%s" % (algorithm, layout),
           "verify": "VERIFY_MODE_FULL",
           "attention": {"batch": BATCH, "heads": HEADS, "kv_heads": kv_heads,
                         "seq_len": SEQ, "head_dim": DIM, "causal": causal,
                         "layout": layout, "algorithm": algorithm,
                         "mesh": {"shape": [WORKERS, DEVICES]}}}
    if backward:
        job["attention"]["pass"] = "forward_backward"
    return job


def outputs(kv_heads, backward):
    """Elements of O, and with the backward of dQ, dK and dV."""
    forward = BATCH * HEADS * SEQ * DIM
    if not backward:
        return forward
    return 2 * forward + 2 * BATCH * kv_heads * SEQ * DIM


def run_job(cluster, algorithm, layout, causal, kv_heads=KV_HEADS,
            backward=False):
    path = job_file(spec(algorithm, layout, causal, kv_heads, backward))
    try:
        result = cluster.ctl("submit", "-f", path, "--wait", "--output",
                             "json", timeout=120)
    finally:
        os.unlink(path)
    job = result.json()
    what = "%s %s causal=%s kv_heads=%d%s" % (
        algorithm, layout, causal, kv_heads, " backward" if backward else "")
    want = outputs(kv_heads, backward)
    lib.check(job.get("state") == "SUCCEEDED" and result.code == 0,
              "%s: state %s (exit %d): %s" % (what, job.get("state"),
                                              result.code, job.get("message")))
    res = job.get("result", {})
    lib.check(res.get("mismatches") == 0,
              "%s: %s mismatches" % (what, res.get("mismatches")))
    lib.check(res.get("elements_verified") == want,
              "%s: verified %s elements of %d" %
              (what, res.get("elements_verified"), want))
    metrics = res.get("metrics", {})
    for name in METRICS:
        lib.check(name in metrics, "%s: metric %s missing: %s" %
                  (what, name, sorted(metrics)))
    strategy = job.get("plan", {}).get("strategy", "?")
    if algorithm != "auto":
        lib.check(strategy == algorithm, "%s: ran %s" % (what, strategy))
    lib.log("%-8s %-10s causal=%-5s%s ok: ran %-7s total %.4f s, balance "
            "%.2f, max error %.2e" % (algorithm, layout, causal,
                                      " backward" if backward else "",
                                      strategy, metrics["total_seconds"],
                                      metrics["causal_balance"],
                                      res.get("max_abs_error", 0)))
    return metrics


def check_plan(cluster):
    path = job_file(spec("auto", "zigzag", True))
    try:
        result = cluster.ctl("plan", "-f", path, "--live", "--output", "json")
    finally:
        os.unlink(path)
    lib.check(result.code == 0, "plan -f: %r" % (result,))
    rows = result.json().get("alternatives", [])
    names = {row.get("name") for row in rows}
    lib.check(names == {"rsa", "ring", "ulysses"}, "plan lists %s" % names)
    chosen = [row for row in rows if row.get("chosen")]
    lib.check(len(chosen) == 1, "plan marks %d choices" % len(chosen))
    lib.log("plan: auto picks %s" % chosen[0].get("name"))


def check_refusal(cluster):
    path = job_file(spec("ulysses", "contiguous", False, kv_heads=2))
    try:
        result = cluster.ctl("submit", "-f", path)
    finally:
        os.unlink(path)
    lib.check(result.code != 0 and "attention.algorithm ulysses" in
              result.out + result.err,
              "ulysses on 2 kv heads over 4 ranks was not refused by name: %r"
              % (result,))


def run():
    with lib.LocalCluster(workers=WORKERS, devices=DEVICES) as cluster:
        check_plan(cluster)
        check_refusal(cluster)
        count = 0
        for algorithm in ("rsa", "ring", "ulysses", "auto"):
            for layout, causal in (("contiguous", False),
                                   ("contiguous", True), ("zigzag", True),
                                   ("striped", True)):
                run_job(cluster, algorithm, layout, causal)
                count += 1
        # Grouped-query heads (2 kv heads for 4 query heads) on the ring.
        run_job(cluster, "ring", "zigzag", True, kv_heads=2)
        count += 1
        # The backward: every algorithm, and auto's pick.
        for algorithm, layout, kv_heads in (("ring", "zigzag", 2),
                                            ("rsa", "contiguous", KV_HEADS),
                                            ("ulysses", "zigzag", KV_HEADS),
                                            ("auto", "striped", KV_HEADS)):
            run_job(cluster, algorithm, layout, True, kv_heads=kv_heads,
                    backward=True)
            count += 1
        lib.log("%d attention jobs verified on %d workers x %d devices" %
                (count, WORKERS, DEVICES))


if __name__ == "__main__":
    lib.main(run, limit_seconds=170)
