#!/usr/bin/env python3
"""Alert rules: promtool check rules, promtool test rules, and mutations.

1. `promtool check rules` on deploy/prometheus/rules/meshcast-alerts.yml.
2. `promtool test rules` on deploy/prometheus/tests/meshcast-alerts.test.yml.
3. The unit tests must be able to fail: for each alert, a broken copy of the
   rules (threshold flipped, `for` stretched, metric renamed, the bandwidth
   ratio back to its old unweighted form, ...) must make `promtool test
   rules` fail. A mutation that survives means that alert's
   tests check nothing.
4. Every alert the task requires exists and has severity, summary and
   description.
"""

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import REPO, Checker, need_yaml, rel, run, skip  # noqa: E402

RULES = os.path.join(REPO, "deploy", "prometheus", "rules", "meshcast-alerts.yml")
TESTS = os.path.join(REPO, "deploy", "prometheus", "tests", "meshcast-alerts.test.yml")
REQUIRED_ALERTS = ["MeshcastWorkerLost", "MeshcastJobFailures", "MeshcastVerificationFailures",
                   "MeshcastBandwidthBelowPrediction", "MeshcastQueueGrowing"]

# (alert or record, old text in its expr/for, new text): each breaks one rule.
MUTATIONS = [
    ("MeshcastControllerDown", "== 0", "== 2"),
    ("MeshcastControllerDown", "for", "10m"),
    ("MeshcastWorkerLost", 'state="lost"', 'state="ready"'),
    ("MeshcastWorkerLost", "> 0", "> 5"),
    ("MeshcastJobFailures", "> 0.1", "> 0.9"),
    ("MeshcastJobFailures", "> 0.1", "> 0.01"),
    ("MeshcastJobFailures", 'state="failed"', 'state="succeeded"'),
    ("MeshcastVerificationFailures", "verification_failures_total", "verified_elements_total"),
    ("MeshcastVerificationFailures", "[10m]", "[30m]"),
    ("MeshcastBandwidthBelowPrediction", "> 2", "> 4"),
    ("MeshcastBandwidthBelowPrediction", "> 2", "> 1.1"),
    ("MeshcastBandwidthBelowPrediction", "for", "1h"),
    ("meshcast:dataplane_measured_over_predicted:ratio30m", "predicted_seconds_total[30m]",
     "measured_seconds_total[30m]"),
    # The old, unweighted form (mean of per-job ratios): the healthy cluster
    # of many tiny jobs must make it fail.
    ("meshcast:dataplane_measured_over_predicted:ratio30m", "expr",
     "sum by (type) (rate(meshcast_controller_measured_over_predicted_ratio_sum[30m])) / "
     "sum by (type) (rate(meshcast_controller_measured_over_predicted_ratio_count[30m]))"),
    ("MeshcastQueueGrowing", "deriv(meshcast_controller_queue_depth[15m]) > 0",
     "deriv(meshcast_controller_queue_depth[15m]) >= 0"),
    ("MeshcastQueueGrowing", "min_over_time", "max_over_time"),
    ("MeshcastQueueGrowing", "for", "40m"),
]


def mutate(doc, name, old, new):
    """Returns True if the rule `name` was changed in doc (in place)."""
    for group in doc["groups"]:
        for rule in group["rules"]:
            if rule.get("alert", rule.get("record")) != name:
                continue
            if old == "for":
                rule["for"] = new
                return True
            if old == "expr":
                rule["expr"] = new
                return True
            if old in rule["expr"]:
                rule["expr"] = rule["expr"].replace(old, new)
                return True
    return False


def main():
    promtool = shutil.which("promtool")
    if not promtool:
        skip("no promtool (Debian package prometheus, scripts/install-deps.sh)")
    yaml = need_yaml()
    c = Checker()

    r = run([promtool, "check", "rules", RULES])
    print(r.stdout + r.stderr, end="")
    c.check(r.returncode == 0, f"promtool check rules {rel(RULES)}")

    r = run([promtool, "test", "rules", TESTS], timeout=60)
    print(r.stdout + r.stderr, end="")
    c.check(r.returncode == 0, f"promtool test rules {rel(TESTS)}")

    with open(RULES) as f:
        original = yaml.safe_load(f)
    alerts = {rule["alert"]: rule for g in original["groups"] for rule in g["rules"] if "alert" in rule}
    for name in REQUIRED_ALERTS:
        rule = alerts.get(name)
        if not c.check(rule is not None, f"required alert {name} is missing"):
            continue
        c.check(rule.get("labels", {}).get("severity") in ("warning", "critical"),
                f"{name}: severity label must be warning or critical")
        for key in ("summary", "description"):
            c.check(bool(rule.get("annotations", {}).get(key)), f"{name}: annotation {key} missing")

    work = tempfile.mkdtemp(prefix="meshcast-rules-")
    try:
        os.makedirs(os.path.join(work, "rules"))
        os.makedirs(os.path.join(work, "tests"))
        shutil.copy(TESTS, os.path.join(work, "tests"))
        mutated_tests = os.path.join(work, "tests", os.path.basename(TESTS))
        # Control: the unmutated rules, re-serialized the same way, pass.
        with open(os.path.join(work, "rules", os.path.basename(RULES)), "w") as f:
            yaml.safe_dump(original, f, sort_keys=False)
        r = run([promtool, "test", "rules", mutated_tests], timeout=60)
        c.check(r.returncode == 0, "re-serialized unmutated rules fail their tests: " + r.stdout[-500:])
        for name, old, new in MUTATIONS:
            doc = yaml.safe_load(yaml.safe_dump(original))
            if not c.check(mutate(doc, name, old, new), f"mutation target not found: {name} {old!r}"):
                continue
            with open(os.path.join(work, "rules", os.path.basename(RULES)), "w") as f:
                yaml.safe_dump(doc, f, sort_keys=False)
            r = run([promtool, "test", "rules", mutated_tests], timeout=60)
            killed = r.returncode != 0 and "FAILED" in (r.stdout + r.stderr)
            print(f"mutation {name}: {old!r} -> {new!r}: {'caught' if killed else 'NOT caught'}")
            c.check(killed, f"promtool tests pass with a broken {name} ({old!r} -> {new!r})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c.finish()


if __name__ == "__main__":
    main()
