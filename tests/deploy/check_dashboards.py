#!/usr/bin/env python3
"""Grafana dashboards and provisioning: structure, queries, metric names.

- every dashboard JSON parses, has schemaVersion ~39, a unique uid, the
  `datasource`, `instance` and `worker` variables, and panels with unique ids,
  non-overlapping grid positions, descriptions and PromQL targets on the
  `${datasource}` data source;
- every variable is used, every worker-metric query filters on $instance and
  $worker, every controller-metric query on $instance;
- each dashboard covers what it is for (required metrics per dashboard);
- every query parses: written as recording rules by panel_queries.py
  --rules-out and checked with `promtool check rules`;
- every meshcast metric a dashboard or alert rule names is documented in
  docs/metrics.md, and the fake exporter serves exactly the documented ones;
- provisioning files: the Prometheus data source has uid "prometheus", the
  dashboard provider's path is where compose mounts dashboards/, and the
  kustomize ConfigMap generator lists every dashboard file;
- the last-step bandwidth panels go blank when the cluster is idle: each
  query is run by `promtool test rules` on a worker whose steps stop, and
  must return data while steps finish and nothing 30 minutes later (the
  former plain gauge query is run too and must fail that test);
- measured-over-predicted panels are bytes-weighted (sums of seconds), never
  the unweighted mean of per-job ratios (_ratio_sum / _ratio_count).
"""

import glob
import json
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import REPO, Checker, need_yaml, rel, run, skip  # noqa: E402
import fake_exporter  # noqa: E402
import panel_queries  # noqa: E402

DASHBOARDS = sorted(glob.glob(os.path.join(REPO, "dashboards", "*.json")))
PANEL_TYPES = {"row", "timeseries", "stat", "bargauge", "table", "heatmap", "gauge", "text"}
REQUIRED_METRICS = {
    "meshcast-overview": [
        "meshcast_controller_workers", "meshcast_controller_devices", "meshcast_controller_jobs",
        "meshcast_controller_queue_depth", 'state="failed"', 'code!="OK"'],
    "meshcast-communication": [
        "rate(meshcast_worker_bytes_sent_total", "by (link, backend)",
        "histogram_quantile(0.99, sum by (op, le) (rate(meshcast_worker_step_duration_seconds_bucket",
        "meshcast_controller_measured_over_predicted_ratio", "meshcast_worker_verification_failures_total"],
    "meshcast-jobs": [
        "meshcast_worker_step_duration_seconds_bucket", "meshcast_worker_achieved_bandwidth_bytes_per_second",
        "meshcast_controller_planning_seconds_bucket", "meshcast_controller_job_duration_seconds_bucket"],
}
METRIC_RE = re.compile(r"\bmeshcast_[a-z0-9_]+")


def base_metric(name):
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and not name.endswith("_total"):
            return name[: -len(suffix)]
    return name


def documented_metrics():
    with open(os.path.join(REPO, "docs", "metrics.md")) as f:
        return set(re.findall(r"^\|\s*`(meshcast_[a-z0-9_]+)`", f.read(), re.M))


def overlaps(a, b):
    return not (a["x"] + a["w"] <= b["x"] or b["x"] + b["w"] <= a["x"] or
                a["y"] + a["h"] <= b["y"] or b["y"] + b["h"] <= a["y"])


def check_dashboard(c, path, uids):
    name = rel(path)
    try:
        with open(path) as f:
            dash = json.load(f)
    except ValueError as e:
        c.fail(f"{name}: invalid JSON: {e}")
        return None
    uid = dash.get("uid")
    c.check(uid and uid not in uids, f"{name}: missing or duplicate uid {uid!r}")
    uids.add(uid)
    c.check(36 <= dash.get("schemaVersion", 0) <= 41, f"{name}: schemaVersion {dash.get('schemaVersion')}")
    c.check(bool(dash.get("title")) and bool(dash.get("description")), f"{name}: title and description")
    variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource", {})
    c.check(ds.get("type") == "datasource" and ds.get("query") == "prometheus",
            f"{name}: variable `datasource` of type datasource, query prometheus")
    for var in ("instance", "worker"):
        v = variables.get(var, {})
        q = v.get("query", {})
        q = q.get("query") if isinstance(q, dict) else q
        c.check(v.get("type") == "query" and (q or "").startswith("label_values("),
                f"{name}: variable `{var}` must be a label_values query")
        c.check(v.get("datasource", {}).get("uid") == "${datasource}", f"{name}: variable {var} data source")

    panels = list(panel_queries.iter_panels(dash.get("panels", [])))
    ids = [p.get("id") for p in panels]
    c.check(len(ids) == len(set(ids)) and None not in ids, f"{name}: panel ids must be unique")
    placed = []
    all_exprs = []
    for p in panels:
        where = f"{name}: panel {p.get('id')} {p.get('title')!r}"
        c.check(p.get("type") in PANEL_TYPES, f"{where}: unknown panel type {p.get('type')}")
        g = p.get("gridPos", {})
        ok = all(isinstance(g.get(k), int) for k in "xywh") and g["x"] >= 0 and g["w"] > 0 \
            and g["x"] + g["w"] <= 24 and g["h"] > 0
        c.check(ok, f"{where}: gridPos {g} outside the 24-column grid")
        if ok:
            for other_id, other in placed:
                c.check(not overlaps(g, other), f"{where}: overlaps panel {other_id}")
            placed.append((p.get("id"), g))
        if p.get("type") == "row":
            continue
        c.check(bool(p.get("description")), f"{where}: no description")
        c.check(p.get("datasource", {}).get("uid") == "${datasource}", f"{where}: data source must be ${{datasource}}")
        targets = p.get("targets", [])
        c.check(bool(targets), f"{where}: no targets")
        refs = [t.get("refId") for t in targets]
        c.check(len(refs) == len(set(refs)) and None not in refs, f"{where}: refIds must be unique")
        for t in targets:
            expr = t.get("expr", "")
            all_exprs.append(expr)
            c.check(t.get("datasource", {}).get("uid") == "${datasource}", f"{where}: target data source")
            metrics = set(METRIC_RE.findall(expr))
            if any(m.startswith("meshcast_worker_") for m in metrics):
                c.check('worker=~"$worker"' in expr and 'instance=~"$instance"' in expr,
                        f"{where}: worker metrics must filter on $instance and $worker: {expr}")
            if metrics or "up{" in expr:
                c.check('instance=~"$instance"' in expr, f"{where}: query must filter on $instance: {expr}")
    used_text = "\n".join(all_exprs + [json.dumps(v.get("query")) for v in variables.values()])
    for var in variables:
        if var != "datasource":
            c.check(f"${var}" in used_text, f"{name}: variable {var} is never used")
    for needle in REQUIRED_METRICS.get(uid, []):
        c.check(needle in "\n".join(all_exprs), f"{name}: no panel query contains {needle!r}")
    return dash, all_exprs


IDLE_TEST = """
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'meshcast_worker_achieved_bandwidth_bytes_per_second{instance="w0:9402", worker="w0", op="broadcast"}'
        values: '1e9x60'
      # Steps finish for 10 minutes, then the cluster is idle.
      - series: 'meshcast_worker_step_duration_seconds_count{instance="w0:9402", worker="w0", op="broadcast"}'
        values: '0+3x10 30x50'
    promql_expr_test:
      - expr: count(panel:idle)
        eval_time: 8m
        exp_samples: [{labels: '{}', value: 1}]
      - expr: count(panel:idle)
        eval_time: 40m
        exp_samples: []
"""


def idle_test(promtool, work, expr, show_failure=True):
    """Runs IDLE_TEST on `expr`; True when it passes (data while busy, none when idle)."""
    with open(os.path.join(work, "rules.yml"), "w") as f:
        f.write("groups: [{name: idle, rules: [{record: 'panel:idle', expr: %s}]}]\n" % json.dumps(expr))
    with open(os.path.join(work, "idle.test.yml"), "w") as f:
        f.write(IDLE_TEST)
    r = run([promtool, "test", "rules", os.path.join(work, "idle.test.yml")], timeout=60)
    if r.returncode != 0 and show_failure:
        print((r.stdout + r.stderr)[-600:])
    return r.returncode == 0


def check_idle_and_weighting(c, promtool):
    queries, problems = panel_queries.extract(DASHBOARDS, {}, {"__rate_interval": "5m", "__interval": "1m",
                                                               "__range": "1h"})
    c.check(not problems, f"panel queries: {problems}")
    bandwidth = [q for q in queries if "meshcast_worker_achieved_bandwidth_bytes_per_second" in q.expr]
    c.check(len(bandwidth) >= 2, f"the last-step bandwidth panels: found {len(bandwidth)}")
    work = tempfile.mkdtemp(prefix="meshcast-idle-")
    try:
        for q in bandwidth:
            c.check(idle_test(promtool, work, q.expr), f"{q.name()}: must show data while steps finish and "
                                                       f"go blank when idle: {q.raw}")
        # The check can fail: the plain gauge holds its last value when idle.
        c.check(not idle_test(promtool, work, "max by (op) (meshcast_worker_achieved_bandwidth_bytes_per_second)",
                                 show_failure=False),
                "the idle test passes the former gauge-only query")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratio = [q for q in queries if "measured_over_predicted" in q.expr or "dataplane_" in q.expr]
    for q in ratio:
        c.check("measured_over_predicted_ratio_count" not in q.expr,
                f"{q.name()}: an unweighted mean of per-job ratios (use the dataplane seconds counters): {q.raw}")
    weighted = [q for q in ratio if "dataplane_measured_seconds_total" in q.expr
                and "dataplane_predicted_seconds_total" in q.expr]
    c.check({q.dashboard for q in weighted} >= {"meshcast-communication", "meshcast-jobs"},
            "measured over predicted panels use the bytes-weighted seconds counters on both dashboards")


def main():
    promtool = shutil.which("promtool")
    if not promtool:
        skip("no promtool (Debian package prometheus, scripts/install-deps.sh)")
    yaml = need_yaml()
    c = Checker()
    c.check(len(DASHBOARDS) >= 3, f"expected the three dashboards, found {len(DASHBOARDS)}")
    uids = set()
    exprs = []
    for path in DASHBOARDS:
        result = check_dashboard(c, path, uids)
        if result:
            exprs += result[1]
    c.check(set(REQUIRED_METRICS) <= uids, f"dashboards {sorted(REQUIRED_METRICS)} must exist")
    jobs = json.load(open(os.path.join(REPO, "dashboards", "meshcast-jobs.json")))
    c.check("not metric labels" in jobs.get("description", ""),
            "the job drill-down description must explain that job ids are not labels")

    # Every query parses (promtool has no `check expr`: recording rules do).
    work = tempfile.mkdtemp(prefix="meshcast-dash-")
    try:
        rules = os.path.join(work, "panel-queries.yml")
        rc = panel_queries.main(["--rules-out", rules])
        c.check(rc == 0, "panel_queries.py could not extract every query (unknown variables?)")
        r = run([promtool, "check", "rules", rules])
        print(r.stdout + r.stderr, end="")
        c.check(r.returncode == 0, "promtool rejects a panel query (see above)")
        # ... and the check can fail: a broken query is rejected.
        with open(os.path.join(work, "broken.yml"), "w") as f:
            f.write('groups: [{name: x, rules: [{record: "panel:x", expr: "sum by (op (rate(x[1m]))"}]}]\n')
        r = run([promtool, "check", "rules", os.path.join(work, "broken.yml")])
        c.check(r.returncode != 0, "promtool accepted a malformed query")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    check_idle_and_weighting(c, promtool)

    # Metric names: documented, and the fake exporter serves the documented set.
    documented = documented_metrics()
    c.check(len(documented) >= 20, f"docs/metrics.md lists only {len(documented)} metrics")
    with open(os.path.join(REPO, "deploy", "prometheus", "rules", "meshcast-alerts.yml")) as f:
        rule_exprs = [r["expr"] for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
    for expr in exprs + rule_exprs:
        for m in METRIC_RE.findall(expr):
            c.check(base_metric(m) in documented, f"metric {m} is not documented in docs/metrics.md")
    served = fake_exporter.documented_names()
    c.check(served == documented,
            f"tests/deploy/fake_exporter.py must serve exactly docs/metrics.md's metrics: "
            f"missing {sorted(documented - served)}, extra {sorted(served - documented)}")

    # Provisioning.
    prov = os.path.join(REPO, "dashboards", "provisioning")
    with open(os.path.join(prov, "datasources", "prometheus.yaml")) as f:
        dss = yaml.safe_load(f)["datasources"]
    c.check(any(d.get("uid") == "prometheus" and d.get("type") == "prometheus" for d in dss),
            "provisioned data source with uid prometheus, type prometheus")
    with open(os.path.join(prov, "dashboards", "meshcast.yaml")) as f:
        providers = yaml.safe_load(f)["providers"]
    with open(os.path.join(REPO, "deploy", "docker", "docker-compose.yml")) as f:
        grafana = yaml.safe_load(f)["services"]["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    for p in providers:
        path = p.get("options", {}).get("path")
        c.check(os.path.normpath(mounts.get(path, "")) == "../../dashboards",
                f"dashboard provider path {path} must be where compose mounts dashboards/")
    c.check(mounts.get("/etc/grafana/provisioning/datasources") == "../../dashboards/provisioning/datasources",
            "compose mounts the data source provisioning")
    c.check("MESHCAST_PROMETHEUS_URL" in grafana.get("environment", {}),
            "compose sets MESHCAST_PROMETHEUS_URL for the provisioned data source")
    with open(os.path.join(REPO, "dashboards", "kustomization.yaml")) as f:
        kust = yaml.safe_load(f)
    listed = {fn for g in kust["configMapGenerator"] for fn in g["files"]}
    c.check(listed == {os.path.basename(p) for p in DASHBOARDS},
            f"dashboards/kustomization.yaml must list every dashboard: {sorted(listed)}")
    c.finish()


if __name__ == "__main__":
    main()
