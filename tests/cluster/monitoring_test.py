#!/usr/bin/env python3
"""`meshctl up --monitoring` end to end (issue 4): the real meshctl starts a
controller and two workers (`--devices cpu:2`) with their metrics on
127.0.0.1 and a real Prometheus server (Debian package `prometheus`,
/usr/bin/prometheus) scraping them. The test checks

  - what `up` prints: every daemon's metrics endpoint, Prometheus's URL and
    how to point Grafana at it; what it records in cluster.json (the
    Prometheus process, each daemon's metrics address) and the
    prometheus.yml it wrote;
  - that Prometheus is ready with every target up as soon as `up` returns
    (`up == 1` for the controller and both workers, with the job names and
    `worker` labels the dashboards use) and loaded the repository's alert
    rules;
  - that a job submitted with `submit --wait` shows up in Prometheus as
    meshcast_controller_jobs_finished_total{state="succeeded"} > 0 and as
    bytes received by the destination worker; `cluster` and `get` work;
  - that `meshctl down` stops every process, Prometheus included.

Bounded: the script stops itself after 80 s (CTest's limit is 90 s).
Exit 77 (skipped) when /usr/bin/prometheus is missing.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import cluster_lib as lib

PROMETHEUS = "/usr/bin/prometheus"
SKIP = 77
JOB = ["reshard", "--shape", "32x32x16", "--dtype", "int32",
       "--src-mesh", "1x2", "--src-spec", "S1RR",
       "--dst-mesh", "1x2", "--dst-spec", "RS1R", "--name", "monitored"]


def http_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read().decode("utf-8"))


def query(base, expr):
    reply = http_json(base + "/api/v1/query?query=" + urllib.parse.quote(expr))
    lib.check(reply.get("status") == "success", "query %s: %r" % (expr, reply))
    return reply["data"]["result"]


def wait_for_query(base, expr, want, timeout):
    """The result of `expr` once it has `want` series (scrapes run every
    second)."""
    deadline = time.time() + timeout
    while True:
        result = query(base, expr)
        if len(result) == want:
            return result
        lib.check(time.time() < deadline,
                  "%s: %d series after %d s, expected %d: %r" %
                  (expr, len(result), timeout, want, result))
        time.sleep(0.25)


def check_up_output(cluster):
    text = cluster.up_text
    info = cluster.info
    for p in info["processes"]:
        if p["role"] in ("controller", "worker"):
            lib.check(p.get("metrics", "").startswith("127.0.0.1:"),
                      "%s has no metrics address in cluster.json: %r" %
                      (p["name"], p))
            lib.check("http://%s/metrics" % p["metrics"] in text,
                      "up does not print %s's metrics endpoint:\n%s" %
                      (p["name"], text))
    prometheus = [p for p in info["processes"] if p["role"] == "prometheus"]
    lib.check(len(prometheus) == 1, "cluster.json records %d Prometheus "
              "processes" % len(prometheus))
    lib.check(prometheus[0]["binary"] == PROMETHEUS, "Prometheus binary %r" %
              prometheus[0]["binary"])
    base = info.get("prometheus", "")
    lib.check(base.startswith("http://127.0.0.1:"),
              "cluster.json prometheus URL %r" % base)
    for needle in ("prometheus  " + base, "URL %s, uid prometheus" % base,
                   "dashboards/*.json", "meshctl down"):
        lib.check(needle in text, "%r not in up's output:\n%s" % (needle, text))
    lib.check(info["devices"] == "cpu:2" and info["devices_per_worker"] == 2,
              "devices in cluster.json: %r / %r" %
              (info.get("devices"), info.get("devices_per_worker")))
    config_path = os.path.join(cluster.cluster_dir, "prometheus",
                               "prometheus.yml")
    with open(config_path) as f:
        config = f.read()
    for needle in ('job_name: "meshcast-controller"',
                   'job_name: "meshcast-worker"',
                   'labels: {worker: "worker-1"}', "scrape_interval: 1s"):
        lib.check(needle in config, "%r not in %s:\n%s" %
                  (needle, config_path, config))
    return base, prometheus[0]


def check_targets(base, cluster):
    # `up` returned only once every target was up: no waiting here.
    up = query(base, "up")
    lib.check(len(up) == 3, "expected 3 scrape targets, got %r" % up)
    seen = set()
    metrics = {p["metrics"]: p["name"] for p in cluster.info["processes"]
               if p.get("metrics")}
    for series in up:
        labels = series["metric"]
        lib.check(series["value"][1] == "1", "target down: %r" % series)
        name = metrics.get(labels["instance"])
        lib.check(name is not None, "unknown target %r" % labels)
        if name == "controller":
            lib.check(labels["job"] == "meshcast-controller" and
                      "worker" not in labels, "controller labels %r" % labels)
        else:
            lib.check(labels["job"] == "meshcast-worker" and
                      labels.get("worker") == name,
                      "worker labels %r for %s" % (labels, name))
        seen.add(name)
    lib.check(seen == {"controller", "worker-0", "worker-1"},
              "targets %r" % sorted(seen))
    groups = http_json(base + "/api/v1/rules")["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    files = {g["file"] for g in groups}
    lib.check(rules, "Prometheus loaded no alert rules")
    lib.check(all(f.endswith(".yml") and "/deploy/prometheus/" in f
                  for f in files), "rule files %r" % files)
    lib.check(all(r.get("health") in ("ok", "unknown") for r in rules),
              "unhealthy rules: %r" % [r for r in rules
                                       if r.get("health") not in
                                       ("ok", "unknown")])
    lib.log("Prometheus at", base, "scrapes", sorted(seen), "with",
            len(rules), "rules")


def test():
    with lib.LocalCluster(workers=2, devices="cpu:2",
                          up_args=["--monitoring"], output="table") as cluster:
        base, prometheus = check_up_output(cluster)
        check_targets(base, cluster)

        job = cluster.submit_wait(JOB, timeout=60)
        lib.check_job_succeeded(job, lib.expected_elements(
            [32, 32, 16], [1, 2], "RS1R"), "monitored job")
        lib.check(cluster.get(job["id"])["state"] == "SUCCEEDED",
                  "get does not show the job succeeded")
        workers = cluster.cluster()["workers"]
        lib.check(len(workers) == 2, "cluster shows %d workers" % len(workers))

        succeeded = wait_for_query(
            base, 'meshcast_controller_jobs_finished_total{state="succeeded"}'
            ' > 0', 1, timeout=20)
        lib.check(float(succeeded[0]["value"][1]) >= 1,
                  "succeeded jobs %r" % succeeded)
        received = wait_for_query(
            base, 'sum by (worker) (meshcast_worker_bytes_received_total'
            '{link="inter"}) > 0', 1, timeout=20)
        lib.log("Prometheus saw the job: succeeded", succeeded[0]["value"][1],
                "; inter-worker bytes received by",
                received[0]["metric"].get("worker"))
        all_up = query(base, "up == 1")
        lib.check(len(all_up) == 3, "not every target up after the job: %r" %
                  all_up)

        down = cluster.ctl("down", "--grace", "10", timeout=60)
        lib.check(down.code == 0, "meshctl down: %r" % down)
        lib.check("and Prometheus" in down.out, "down output %r" % down.out)
        alive = [p["name"] for p in cluster.info["processes"]
                 if lib.process_running(p["pid"])]
        lib.check(not alive, "still running after down: %r" % alive)
        lib.check(not lib.process_running(prometheus["pid"]),
                  "Prometheus still running")
        try:
            urllib.request.urlopen(base + "/-/ready", timeout=2)
            lib.check(False, "Prometheus still answers at %s" % base)
        except (urllib.error.URLError, OSError):
            pass
        lib.log("meshctl down stopped all %d processes" %
                len(cluster.info["processes"]))
        # Already down: nothing left for the context's own `meshctl down`.
        cluster.info = None


if __name__ == "__main__":
    if not os.access(PROMETHEUS, os.X_OK):
        print("SKIP: no %s (Debian package `prometheus`, "
              "scripts/install-deps.sh)" % PROMETHEUS)
        sys.exit(SKIP)
    lib.main(test, 80)
