#!/usr/bin/env python3
"""`pipeline` jobs end to end: a training step of two stages, each on its
own host's 2 CPU devices (a local cluster of 2 workers x 2 devices), in
every schedule (gpipe, 1f1b, eager_1f1b, auto) and without overlap,
submitted as the YAML job file users write (meshes and layouts as text).

Every job must SUCCEED with 0 mismatches (the output and every weight
gradient against the float64 reference), report the kind's figures, and
its measured peak activation memory must be its schedule's prediction.
`meshctl plan -f` must list every schedule with its predicted memory and
mark auto's pick; `meshctl get --timeline` must draw the blocks; a forced
schedule whose activations exceed memory_limit_bytes must be refused at
submit, naming the field.
"""

import os
import re
import tempfile

import cluster_lib as lib

WORKERS, DEVICES = 2, 2
MICROBATCHES, ROWS, HIDDEN, FFN, LAYERS = 4, 16, 32, 64, 2
METRICS = ["step_seconds", "predicted_step_seconds", "bubble_fraction",
           "stage0_busy_seconds", "stage1_busy_seconds",
           "stage0_peak_activation_bytes", "stage1_peak_activation_bytes",
           "peak_activation_bytes", "predicted_peak_activation_bytes"]


def job_file(schedule, overlap=True, limit=0):
    text = """name: pipeline-%s
verify: full
pipeline:
  stages:
    - {mesh: "1x2", input_spec: "S0,R", output_spec: "R,S1"}
    - {mesh: "1x2", input_spec: "R,S1", output_spec: "R,R"}
  microbatches: %d
  microbatch_size: %d
  hidden: %d
  ffn: %d
  layers_per_stage: %d
  schedule: %s
  no_overlap: %s
  memory_limit_bytes: %d
""" % (schedule, MICROBATCHES, ROWS, HIDDEN, FFN, LAYERS, schedule,
       "false" if overlap else "true", limit)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
        return f.name


def run_job(cluster, schedule, overlap=True):
    path = job_file(schedule, overlap)
    try:
        result = cluster.ctl("submit", "-f", path, "--wait", "--output",
                             "json", timeout=120)
    finally:
        os.unlink(path)
    job = result.json()
    what = "%s%s" % (schedule, "" if overlap else " (no overlap)")
    lib.check(job.get("state") == "SUCCEEDED" and result.code == 0,
              "%s: state %s (exit %d): %s" % (what, job.get("state"),
                                              result.code, job.get("message")))
    res = job.get("result", {})
    lib.check(res.get("mismatches") == 0,
              "%s: %s mismatches" % (what, res.get("mismatches")))
    # At least the step's output and both weight gradients of every block.
    least = MICROBATCHES * ROWS * HIDDEN + 2 * LAYERS * 2 * HIDDEN * FFN
    lib.check(int(res.get("elements_verified", 0)) >= least,
              "%s: verified %s elements, fewer than %d" %
              (what, res.get("elements_verified"), least))
    metrics = res.get("metrics", {})
    for name in METRICS:
        lib.check(name in metrics, "%s: metric %s missing: %s" %
                  (what, name, sorted(metrics)))
    lib.check(0 <= metrics["bubble_fraction"] < 1,
              "%s: bubble fraction %s" % (what, metrics["bubble_fraction"]))
    lib.check(metrics["peak_activation_bytes"] ==
              metrics["predicted_peak_activation_bytes"],
              "%s: measured peak %s, predicted %s" %
              (what, metrics["peak_activation_bytes"],
               metrics["predicted_peak_activation_bytes"]))
    strategy = job.get("plan", {}).get("strategy", "?")
    if schedule != "auto":
        lib.check(strategy.split(" ")[0] == schedule,
                  "%s: ran %s" % (what, strategy))
    lib.log("%-24s ok: ran %-24s step %.4f s (predicted %.4f), bubble "
            "%.2f, peak %d B" % (what, strategy, metrics["step_seconds"],
                                 metrics["predicted_step_seconds"],
                                 metrics["bubble_fraction"],
                                 metrics["peak_activation_bytes"]))
    return job.get("id")


def check_plan(cluster):
    path = job_file("auto")
    try:
        result = cluster.ctl("plan", "-f", path, "--live", "--output", "json")
        table = cluster.ctl("plan", "-f", path, "--live")
    finally:
        os.unlink(path)
    lib.check(result.code == 0, "plan -f: %r" % (result,))
    rows = result.json().get("alternatives", [])
    names = {row.get("name") for row in rows}
    want = {"gpipe", "1f1b", "eager_1f1b", "gpipe (no overlap)",
            "1f1b (no overlap)", "eager_1f1b (no overlap)"}
    lib.check(names == want, "plan lists %s" % names)
    lib.check(all(row.get("peak_memory_bytes", 0) > 0 for row in rows),
              "plan rows without peak_memory_bytes: %s" % rows)
    chosen = [row for row in rows if row.get("chosen")]
    lib.check(len(chosen) == 1 and "no overlap" not in chosen[0]["name"],
              "plan marks %s" % chosen)
    lib.check(table.code == 0 and "peak memory/device" in table.out,
              "the plan table has no memory column: %r" % (table,))
    lib.log("plan: auto picks %s" % chosen[0].get("name"))


def check_refusal(cluster):
    path = job_file("gpipe", limit=1000)
    try:
        result = cluster.ctl("submit", "-f", path)
    finally:
        os.unlink(path)
    lib.check(result.code != 0 and "pipeline.memory_limit_bytes" in
              result.out + result.err,
              "gpipe over its memory limit was not refused by name: %r" %
              (result,))


def check_timeline(cluster, job_id):
    result = cluster.ctl("get", job_id, "--timeline")
    lib.check(result.code == 0, "get --timeline: %r" % (result,))
    # Bars too narrow for their label show its first letter only.
    lib.check("F0" in result.out and re.search(r"B[0-9]", result.out),
              "the timeline draws no F0 and B<m> labels:\n%s" % result.out)


def run():
    with lib.LocalCluster(workers=WORKERS, devices=DEVICES) as cluster:
        check_plan(cluster)
        check_refusal(cluster)
        job_id = None
        for schedule in ("gpipe", "1f1b", "eager_1f1b", "auto"):
            job_id = run_job(cluster, schedule)
        run_job(cluster, "1f1b", overlap=False)
        check_timeline(cluster, job_id)
        lib.log("5 pipeline jobs verified on %d workers x %d devices" %
                (WORKERS, DEVICES))


if __name__ == "__main__":
    lib.main(run, limit_seconds=170)
