#!/usr/bin/env python3
"""`meshctl calibrate` end to end on a local cluster of 2 workers x 2 CPU
devices: before it, `--show` says nothing is stored; the calibrate job runs
every op inside a host and between hosts, SUCCEEDS and prints one fitted
row per (op, link class); `--show` then lists those fits with the job's id;
the planner uses them (the live `meshctl plan` of a moe layer predicts
different times than before) and they survive a controller restart.
"""

import json
import os
import tempfile
import time

import cluster_lib as lib

WORKERS, DEVICES = 2, 2
OPS = ["all_to_all", "all_gather", "reduce_scatter", "all_reduce"]


def moe_plan(cluster):
    """Predicted seconds of every schedule of a small moe layer, live."""
    spec = {"name": "moe", "moe": {
        "tokens": 256, "hidden": 64, "ffn": 128, "experts": 4,
        "mesh": {"shape": [WORKERS, DEVICES]}}}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        result = cluster.ctl("plan", "-f", f.name, "--live", "--output",
                             "json")
    finally:
        os.unlink(f.name)
    lib.check(result.code == 0, "plan -f: %r" % (result,))
    return {row["name"]: float(row.get("predicted_seconds",
                                       row.get("predictedSeconds", 0)))
            for row in result.json().get("alternatives", [])}


def shown(cluster):
    result = cluster.ctl("calibrate", "--show", "--output", "json")
    lib.check(result.code == 0, "calibrate --show: %r" % (result,))
    return result.json()["calibration"]


def run():
    with lib.LocalCluster(workers=WORKERS, devices=DEVICES) as cluster:
        result = cluster.ctl("calibrate", "--show")
        lib.check(result.code == 0 and "no calibration stored" in result.out,
                  "--show before any calibration: %r" % (result,))
        result = cluster.ctl("calibrate", "--points", "1")
        lib.check(result.code != 0 and "calibrate.points" in result.err,
                  "a bad --points was not refused by name: %r" % (result,))
        before = moe_plan(cluster)

        start = time.time()
        # Sizes up to 8 MiB: a fit needs times that grow with the size,
        # well above this shared machine's noise. A fit whose points are
        # too noisy (beta <= 0) is left out by design; under a full test
        # run's load that happened once in a while, so a second
        # calibration may supply what the first left out.
        for attempt in (1, 2):
            result = cluster.ctl("calibrate", "--min-size", "64KiB",
                                 "--max-size", "8MiB", "--points", "3",
                                 "--repeat", "3", timeout=150)
            lib.check(result.code == 0, "calibrate: %r" % (result,))
            lib.check("SUCCEEDED" in result.out,
                      "calibrate: %r" % (result.out,))
            missing = [(op, links) for op in OPS
                       for links in ("intra_host", "inter_host")
                       if not any(op in line and links in line
                                  for line in result.out.splitlines())]
            if not missing:
                break
            lib.log("attempt %d left out %s (too noisy); calibrating again"
                    % (attempt, missing))
        lib.check(not missing, "no row for %s in:\n%s" % (missing,
                                                           result.out))
        lib.log("calibrated in %.1f s:\n%s" % (time.time() - start,
                                                result.out))

        fits = shown(cluster)
        lib.check(len(fits) == 2 * len(OPS), "--show lists %d fits: %s" %
                  (len(fits), fits))
        for fit in fits:
            lib.check(fit["beta_seconds_per_byte"] > 0 and
                      fit["model_beta_seconds_per_byte"] > 0 and
                      fit["alpha_seconds"] >= 0 and fit["ranks"] == 2 and
                      fit["job_id"].startswith("job-"),
                      "implausible fit: %s" % fit)
        after = moe_plan(cluster)
        lib.check(set(after) == set(before) and after != before,
                  "the plan ignores the calibration: %s -> %s" %
                  (before, after))
        lib.log("moe predictions before %s, after %s" % (before, after))

        cluster.kill("controller")
        cluster.restart("controller")
        deadline = time.time() + 30
        while True:
            result = cluster.ctl("calibrate", "--show", "--output", "json")
            if result.code == 0:
                break
            lib.check(time.time() < deadline,
                      "controller not back: %r" % (result,))
            time.sleep(0.2)
        lib.check(result.json()["calibration"] == fits,
                  "the calibration changed across a restart: %s -> %s" %
                  (fits, result.json()["calibration"]))
        lib.log("PASS: 8 fits stored, used by the planner, kept across a "
                "restart")


if __name__ == "__main__":
    lib.main(run, limit_seconds=170)
