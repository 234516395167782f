#!/usr/bin/env python3
"""Every dashboard query returns data from a real Prometheus (offline version).

Starts tests/deploy/fake_exporter.py (every documented metric, one controller
and two workers), a real Prometheus server (Debian package `prometheus`)
scraping it every second with the meshcast alert rules loaded, waits for a
few scrapes, then runs panel_queries.py against the Prometheus HTTP API: every
panel query and every variable query must return data. Also checks that
Prometheus loaded the alert rules without errors, and that panel_queries.py
does fail on a query for a metric that does not exist.

Exit 77 (skipped) only when the prometheus binary is missing.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import fake_exporter  # noqa: E402
import panel_queries  # noqa: E402

SKIP = 77
DEADLINE_S = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def main():
    prometheus = shutil.which("prometheus")
    if not prometheus:
        print("SKIP: no prometheus binary (Debian package `prometheus`, scripts/install-deps.sh)")
        return SKIP
    exporter = fake_exporter.start("127.0.0.1", 0)
    target = f"127.0.0.1:{exporter.server_port}"
    work = tempfile.mkdtemp(prefix="meshcast-dash-")
    port = free_port()
    rules = os.path.join(REPO, "deploy", "prometheus", "rules", "meshcast-alerts.yml")
    config = os.path.join(work, "prometheus.yml")
    with open(config, "w") as f:
        f.write(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [{json.dumps(rules)}]
scrape_configs:
  - job_name: meshcast-controller
    metrics_path: /controller
    static_configs: [{{targets: ["{target}"]}}]
  - job_name: meshcast-worker-0
    metrics_path: /worker/worker-0
    static_configs: [{{targets: ["{target}"], labels: {{worker: worker-0}}}}]
  - job_name: meshcast-worker-1
    metrics_path: /worker/worker-1
    static_configs: [{{targets: ["{target}"], labels: {{worker: worker-1}}}}]
""")
    log = open(os.path.join(work, "prometheus.log"), "w")
    proc = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={work}/data",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    failures = []
    try:
        start = time.time()
        # Wait for at least 6 scrapes of every target, so that rate() over
        # the 10s windows below has several samples.
        while True:
            if proc.poll() is not None:
                print(open(log.name).read())
                print("FAIL: prometheus exited")
                return 1
            if time.time() - start > DEADLINE_S:
                print(open(log.name).read())
                print("FAIL: prometheus did not collect 6 scrapes in time")
                return 1
            try:
                r = get_json(base + "/api/v1/query?query=" +
                             urllib.parse.quote('count_over_time(up{job=~"meshcast.*"}[1m]) >= 6'))
                if len(r["data"]["result"]) == 3:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.5)

        rc = panel_queries.main([base, "--rate-interval", "10s", "--interval", "5s", "--range", "1m"])
        if rc != 0:
            failures.append("panel queries returned no data or errors (see FAIL lines above)")
        rc = panel_queries.main([base, "--query-range", "30", "--step", "2", "--rate-interval", "10s",
                                 "--range", "1m"])
        if rc != 0:
            failures.append("panel queries over a range returned no data or errors")

        groups = get_json(base + "/api/v1/rules")["data"]["groups"]
        loaded = {r["name"]: r for g in groups for r in g["rules"]}
        for name in ("MeshcastControllerDown", "MeshcastWorkerLost", "MeshcastJobFailures",
                     "MeshcastVerificationFailures", "MeshcastBandwidthBelowPrediction",
                     "MeshcastQueueGrowing"):
            rule = loaded.get(name)
            if not rule:
                failures.append(f"alert {name} not loaded by prometheus")
            elif rule.get("health") not in ("ok", "unknown"):
                failures.append(f"alert {name}: health {rule.get('health')}: {rule.get('lastError')}")
        print(f"prometheus loaded {len(loaded)} rules")

        # The checker itself must be able to fail: a dashboard with a query
        # for an undocumented metric returns no data.
        bogus = os.path.join(work, "bogus.json")
        with open(bogus, "w") as f:
            json.dump({"uid": "bogus", "templating": {"list": []}, "panels": [
                {"id": 1, "type": "timeseries", "title": "bogus",
                 "targets": [{"refId": "A", "expr": "rate(meshcast_no_such_metric_total[1m])"}]}]}, f)
        if panel_queries.main([base, "--dashboards", bogus]) == 0:
            failures.append("panel_queries.py passed a query for a metric that does not exist")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        exporter.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    print("OK" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
