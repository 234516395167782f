#!/usr/bin/env python3
"""`moe` jobs end to end: one MoE layer under MP + EP + ESP on a local
cluster of 2 workers x 2 CPU devices (mesh [2, 2]: ep 2 hosts x mp 2), in
every schedule (baseline, s1, s2, auto), once with a capacity that drops
choices and once with one that keeps them all, and with uneven expert loads
(expert_skew), and with `pass: forward_backward` in every schedule, each
submitted as a JobSpec job file with full verification.

Every job must SUCCEED with 0 mismatches, verify the whole output Y on every
device (tokens x hidden per device) and, with the backward, every element of
dX, dWg, dW1 and dW2 too, and report the per-phase figures the kind
defines. `meshctl plan -f` must list every schedule with its prediction
and mark auto's pick. A bad spec must be refused at submit, naming the field.
"""

import json
import os
import tempfile

import cluster_lib as lib

EP, MP = 2, 2
TOKENS, HIDDEN, FFN, EXPERTS = 128, 32, 64, 4
METRICS = ["gate_seconds", "dispatch_seconds", "esp_gather_seconds",
           "experts_seconds", "esp_reduce_seconds", "combine_seconds",
           "total_seconds", "dropped_tokens_fraction"]
BACKWARD_METRICS = ["combine_backward_seconds", "experts_backward_seconds",
                    "dispatch_backward_seconds", "gate_backward_seconds"]


def job_file(spec):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
        return f.name


def spec(schedule, capacity, **extra):
    moe = {"tokens": TOKENS, "hidden": HIDDEN, "ffn": FFN,
           "experts": EXPERTS, "top_k": 2, "capacity_factor": capacity,
           "mesh": {"shape": [EP, MP]}, "schedule": schedule}
    moe.update(extra)
    return {"name": "moe-%s-%g" % (schedule, capacity),
            "verify": "VERIFY_MODE_FULL", "moe": moe}


def run_job(cluster, schedule, capacity, **extra):
    """Runs one verified job; returns its metrics."""
    path = job_file(spec(schedule, capacity, **extra))
    try:
        result = cluster.ctl("submit", "-f", path, "--wait", "--output",
                             "json", timeout=120)
    finally:
        os.unlink(path)
    job = result.json()
    what = "moe %s capacity %g %s" % (schedule, capacity, extra or "")
    lib.check(job.get("state") == "SUCCEEDED" and result.code == 0,
              "%s: state %s (exit %d): %s" % (what, job.get("state"),
                                              result.code, job.get("message")))
    res = job.get("result", {})
    lib.check(res.get("mismatches") == 0,
              "%s: %s mismatches" % (what, res.get("mismatches")))
    output = EP * TOKENS * HIDDEN * MP  # every device holds its group's Y
    backward = extra.get("pass") == "forward_backward"
    if backward:
        # dX like Y; dWg on every device; dW1 and dW2 once over the mesh.
        output *= 2
        output += HIDDEN * EXPERTS * EP * MP + 2 * EXPERTS * HIDDEN * FFN
    lib.check(res.get("elements_verified", 0) == output,
              "%s: verified %s elements, the outputs have %d" %
              (what, res.get("elements_verified"), output))
    metrics = res.get("metrics", {})
    for name in METRICS + (BACKWARD_METRICS if backward else []):
        lib.check(name in metrics, "%s: metric %s missing: %s" %
                  (what, name, sorted(metrics)))
    lib.check(metrics["total_seconds"] > 0, "%s: total_seconds %s" %
              (what, metrics["total_seconds"]))
    dropped = metrics["dropped_tokens_fraction"]
    lib.check((dropped > 0) == (capacity < 1 or "expert_skew" in extra),
              "%s: dropped_tokens_fraction %s" % (what, dropped))
    workers = {s["worker"] for s in res.get("steps", [])}
    lib.check(len(workers) == EP, "%s: steps on %s" % (what, workers))
    strategy = job.get("plan", {}).get("strategy", "?")
    if schedule != "auto":
        lib.check(strategy.split("/")[0] == schedule,
                  "%s: ran %s" % (what, strategy))
    lib.log("%-8s f=%-4g ok: ran %-6s total %.4f s (predicted %s), "
            "max error %.2e" % (schedule, capacity, strategy,
                                metrics["total_seconds"],
                                metrics.get("predicted_total_seconds"),
                                res.get("max_abs_error", 0)))
    return metrics


def check_plan(cluster):
    path = job_file(spec("auto", 1.0))
    try:
        result = cluster.ctl("plan", "-f", path, "--live", "--output", "json")
    finally:
        os.unlink(path)
    lib.check(result.code == 0, "plan -f: %r" % (result,))
    plan = result.json()
    rows = plan.get("alternatives", [])
    names = {row.get("name", "").split("/")[0] for row in rows}
    lib.check({"baseline", "s1", "s2"} <= names,
              "plan lists %s" % sorted(names))
    chosen = [row for row in rows if row.get("chosen")]
    lib.check(len(chosen) == 1, "plan marks %d choices" % len(chosen))
    fastest = min(float(row.get("predictedSeconds",
                                row.get("predicted_seconds", 0)))
                  for row in rows)
    picked = float(chosen[0].get("predictedSeconds",
                                 chosen[0].get("predicted_seconds", 0)))
    lib.check(picked == fastest, "auto picked %s of %s" % (picked, fastest))
    lib.log("plan: %d alternatives, auto picks %s" %
            (len(rows), chosen[0].get("name")))


def check_refusal(cluster):
    path = job_file(spec("s3", 1.0))
    try:
        result = cluster.ctl("submit", "-f", path)
    finally:
        os.unlink(path)
    lib.check(result.code != 0 and "moe.schedule" in result.out + result.err,
              "a bad schedule was not refused by name: %r" % (result,))


def run():
    with lib.LocalCluster(workers=EP, devices=MP) as cluster:
        check_plan(cluster)
        check_refusal(cluster)
        count = 0
        for capacity in (0.75, 4.0):
            for schedule in ("baseline", "s1", "s2", "auto"):
                run_job(cluster, schedule, capacity)
                count += 1
        # Uneven expert loads: the popular experts drop choices.
        for schedule in ("baseline", "s1", "s2"):
            metrics = run_job(cluster, schedule, 1.0, expert_skew=1.5)
            lib.check(metrics["expert_load_imbalance"] > 1.5,
                      "expert_skew 1.5: imbalance %s" %
                      metrics["expert_load_imbalance"])
            count += 1
        # The backward: every gradient verified, every schedule.
        for schedule in ("baseline", "s1", "s2", "auto"):
            run_job(cluster, schedule, 0.75, **{"pass": "forward_backward"})
            count += 1
        lib.log("%d moe jobs verified on %d workers x %d devices" %
                (count, EP, MP))


if __name__ == "__main__":
    lib.main(run, limit_seconds=170)
