#!/usr/bin/env python3
"""Generates meshcast's Grafana dashboards (dashboards/*.json).

The JSON files are what Grafana loads (provisioning, the Kubernetes ConfigMap
and the Helm chart); this script is their source, so that every panel uses the
same data source variable, the same `instance`/`worker` filters and a
consistent layout. Edit this file, then run

    python3 dashboards/generate.py            # rewrite the JSON files
    python3 dashboards/generate.py --check    # exit 1 if they are stale
    python3 deploy/sync_generated.py          # copy them into the Helm chart

Metric names come from docs/metrics.md; tests/deploy checks that every query
parses (promtool) and names only documented metrics.
"""

import argparse
import json
import os
import sys

DASHBOARD_DIR = os.path.dirname(os.path.abspath(__file__))
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# Label filters shared by the panels. Controller metrics have no `worker`
# label; `worker=~".*"` would still match them, but the filter is kept to the
# metrics that carry it so the queries read clearly.
CTRL = 'instance=~"$instance"'
WORKER = 'instance=~"$instance", worker=~"$worker"'


def last_step_bandwidth(by, selector):
    """The last-step bandwidth gauge, kept only where a step finished within
    the rate window: a gauge holds its last value forever, so an idle cluster
    would otherwise show the bandwidth of a step long gone."""
    return (f"max by ({by}) (meshcast_worker_achieved_bandwidth_bytes_per_second{{{selector}}}) "
            f"and on ({by}) "
            f"(sum by ({by}) (increase(meshcast_worker_step_duration_seconds_count{{{selector}}}"
            f"[$__rate_interval])) > 0)")


def measured_over_predicted(by, selector, func, window):
    """Measured over predicted data-plane seconds summed over the jobs of the
    window: bytes-weighted, as the MeshcastBandwidthBelowPrediction alert."""
    return (f"sum by ({by}) ({func}(meshcast_controller_dataplane_measured_seconds_total{{{selector}}}[{window}])) / "
            f"sum by ({by}) ({func}(meshcast_controller_dataplane_predicted_seconds_total{{{selector}}}[{window}]))")


class Layout:
    """Places panels left to right on Grafana's 24-column grid."""

    def __init__(self):
        self.y = 0
        self.x = 0
        self.row_height = 0
        self.next_id = 1

    def new_id(self):
        self.next_id += 1
        return self.next_id - 1

    def place(self, w, h):
        if self.x + w > 24:
            self.y += self.row_height
            self.x = 0
            self.row_height = 0
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_height = max(self.row_height, h)
        return pos

    def row(self, title):
        if self.x:
            self.y += self.row_height
        self.x = 0
        self.row_height = 0
        panel = {
            "type": "row",
            "id": self.new_id(),
            "title": title,
            "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
            "panels": [],
        }
        self.y += 1
        return panel


def target(expr, legend="", ref="A", instant=False, fmt=None):
    t = {
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend or "__auto",
        "refId": ref,
        "range": not instant,
        "instant": instant,
    }
    if fmt:
        t["format"] = fmt
    return t


def targets(*specs):
    """specs: (expr, legend) pairs; refIds A, B, C... in order."""
    return [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(specs)]


def thresholds(*steps):
    """steps: (value or None for the base, color)."""
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


def panel(layout, kind, title, description, tgts, unit="short", w=8, h=8,
          options=None, custom=None, th=None, decimals=None, min_value=None,
          overrides=None):
    defaults = {"unit": unit}
    if th:
        defaults["thresholds"] = th
    if decimals is not None:
        defaults["decimals"] = decimals
    if min_value is not None:
        defaults["min"] = min_value
    if custom:
        defaults["custom"] = custom
    p = {
        "type": kind,
        "id": layout.new_id(),
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": layout.place(w, h),
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": options or {},
        "targets": tgts,
    }
    return p


def timeseries(layout, title, description, tgts, unit="short", w=8, h=8, **kw):
    options = {
        "legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                   "calcs": ["lastNotNull", "max"]},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    custom = kw.pop("custom", None) or {"drawStyle": "line", "lineWidth": 1,
                                         "fillOpacity": 10, "showPoints": "never",
                                         "spanNulls": True}
    return panel(layout, "timeseries", title, description, tgts, unit, w, h,
                 options=options, custom=custom, **kw)


def stat(layout, title, description, tgts, unit="short", w=6, h=5, **kw):
    options = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "value", "graphMode": "area", "justifyMode": "auto",
        "orientation": "auto", "textMode": "value_and_name",
    }
    return panel(layout, "stat", title, description, tgts, unit, w, h, options=options, **kw)


def bargauge(layout, title, description, tgts, unit="short", w=8, h=8, **kw):
    options = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True,
    }
    return panel(layout, "bargauge", title, description, tgts, unit, w, h, options=options, **kw)


def table(layout, title, description, tgts, w=24, h=6, **kw):
    options = {"showHeader": True, "cellHeight": "sm"}
    p = panel(layout, "table", title, description, tgts, "short", w, h, options=options, **kw)
    p["transformations"] = [
        {"id": "labelsToFields", "options": {}},
        {"id": "organize", "options": {"excludeByName": {"Time": True, "__name__": True}}},
    ]
    return p


def heatmap(layout, title, description, tgt, w=12, h=8):
    options = {
        "calculate": False,
        "yAxis": {"unit": "short", "axisPlacement": "left"},
        "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
        "cellGap": 1,
        "tooltip": {"show": True, "yHistogram": True},
        "legend": {"show": True},
    }
    return panel(layout, "heatmap", title, description, [tgt], "short", w, h, options=options)


def quantiles(metric, by, filters, qs=(0.5, 0.9, 0.99), legend_prefix=""):
    """histogram_quantile targets for each q, grouped by `by` plus le."""
    out = []
    for q in qs:
        expr = (f"histogram_quantile({q}, sum by ({by}, le) "
                f"(rate({metric}_bucket{{{filters}}}[$__rate_interval])))")
        labels = " ".join("{{%s}}" % label.strip() for label in by.split(","))
        out.append((expr, f"{legend_prefix}{labels} p{int(q * 100)}"))
    return out


def or_zero(expr, fallback):
    """`expr`, or the same series shape at 0 when nothing matched.

    Error counters only have series once an error happened; the fallback
    (same grouping over all outcomes, times 0) keeps the panel showing 0
    rather than "No data" on a healthy cluster.
    """
    return f"({expr}) or ({fallback} * 0)"


def variable_datasource():
    return {
        "type": "datasource", "name": "datasource", "label": "Data source",
        "query": "prometheus", "current": {"text": "Prometheus", "value": "prometheus"},
        "hide": 0, "refresh": 1, "regex": "", "options": [], "includeAll": False, "multi": False,
    }


def variable_query(name, label, query, description):
    return {
        "type": "query", "name": name, "label": label, "description": description,
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "includeAll": True, "allValue": ".*", "multi": True,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [], "refresh": 2, "regex": "", "sort": 1, "hide": 0,
    }


def common_variables():
    return [
        variable_datasource(),
        variable_query("instance", "Instance", "label_values(meshcast_build_info, instance)",
                       "Scrape target (host:metrics-port) of a controller or worker."),
        variable_query("worker", "Worker",
                       'label_values(meshcast_build_info{component="worker", instance=~"$instance"}, worker)',
                       "Worker name: the `worker` target label, equal to the worker's --name."),
    ]


def dashboard(uid, title, description, tags, panels, variables):
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["meshcast"] + tags,
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard"}]},
        "links": [{"title": "meshcast dashboards", "type": "dashboards", "tags": ["meshcast"],
                   "asDropdown": True, "includeVars": True, "keepTime": True}],
        "templating": {"list": variables},
        "panels": panels,
    }


def overview():
    L = Layout()
    p = [L.row("Cluster")]
    p.append(stat(L, "Workers by state",
                  "Registered workers by state (ready, busy, lost), as the controller sees them. "
                  "A lost worker missed its heartbeat lease (alert MeshcastWorkerLost).",
                  targets((f"sum by (state) (meshcast_controller_workers{{{CTRL}}})", "{{state}}"))))
    p.append(stat(L, "Devices by state",
                  "Devices of live workers: free (allocatable to queued jobs) or busy (held by a running job).",
                  targets((f"sum by (state) (meshcast_controller_devices{{{CTRL}}})", "{{state}}"))))
    p.append(stat(L, "Queue depth",
                  "Jobs waiting for devices. Growing for long is alert MeshcastQueueGrowing.",
                  targets((f"sum(meshcast_controller_queue_depth{{{CTRL}}})", "queued")),
                  th=thresholds((None, "green"), (5, "orange"), (20, "red"))))
    p.append(stat(L, "Scrape targets up",
                  "meshcast targets Prometheus scrapes successfully, per scrape job (controller, workers).",
                  targets((f'sum by (job) (up{{job=~"meshcast.*", {CTRL}}})', "{{job}}"))))

    p.append(L.row("Jobs"))
    p.append(timeseries(L, "Jobs by state",
                        "Jobs the controller knows, by state (queued, planning, running, succeeded, failed, cancelled).",
                        targets((f"sum by (state) (meshcast_controller_jobs{{{CTRL}}})", "{{state}}"))))
    p.append(timeseries(L, "Queue depth",
                        "Jobs waiting for devices over time.",
                        targets((f"sum(meshcast_controller_queue_depth{{{CTRL}}})", "queued"))))
    p.append(timeseries(L, "Jobs ended per second by state",
                        "Rate of jobs reaching a final state (succeeded, failed, cancelled).",
                        targets((f"sum by (state) (rate(meshcast_controller_jobs_finished_total{{{CTRL}}}[$__rate_interval]))",
                                 "{{state}}")), unit="ops"))

    p.append(L.row("Failures and errors"))
    failed = f'sum by (type) (rate(meshcast_controller_jobs_finished_total{{{CTRL}, state="failed"}}[$__rate_interval]))'
    ended = f"sum by (type) (rate(meshcast_controller_jobs_finished_total{{{CTRL}}}[$__rate_interval]))"
    p.append(timeseries(L, "Job failures per second by type",
                        "Failed jobs per second, by job type (0 when none failed). "
                        "Alert MeshcastJobFailures fires above 10% of ended jobs over 15 minutes.",
                        targets((or_zero(failed, ended), "{{type}} failed")), unit="ops"))
    p.append(timeseries(L, "Job failure ratio",
                        "Failed jobs over all ended jobs (failed + succeeded + cancelled), by type.",
                        targets((f"({or_zero(failed, ended)}) / ({ended})", "{{type}}")), unit="percentunit",
                        min_value=0, th=thresholds((None, "green"), (0.1, "red"))))
    rpc_err = f'sum by (method) (rate(meshcast_controller_rpcs_total{{{CTRL}, code!="OK"}}[$__rate_interval]))'
    rpc_all = f"sum by (method) (rate(meshcast_controller_rpcs_total{{{CTRL}}}[$__rate_interval]))"
    p.append(timeseries(L, "RPC errors per second by method",
                        "Controller RPCs that ended with a gRPC status other than OK, by method (0 when none).",
                        targets((or_zero(rpc_err, rpc_all), "{{method}}")), unit="reqps"))
    p.append(timeseries(L, "RPCs per second by method",
                        "All RPCs the controller served (from meshctl, frameworks and workers), by method.",
                        targets((rpc_all, "{{method}}")), unit="reqps"))
    p.append(timeseries(L, "Worker programs by result",
                        "Programs the workers ran per second, by result (ok, failed, aborted).",
                        targets((f"sum by (worker, result) (rate(meshcast_worker_tasks_total{{{WORKER}}}[$__rate_interval]))",
                                 "{{worker}} {{result}}")), unit="ops"))
    p.append(table(L, "RPCs in the time range by method and status code",
                   "Count of controller RPCs in the selected time range, per method and gRPC status code. "
                   "Non-OK codes are the errors.",
                   [target(f"sum by (method, code) (increase(meshcast_controller_rpcs_total{{{CTRL}}}[$__range]))",
                           "", "A", instant=True, fmt="table")], w=8, h=8))

    p.append(L.row("Components"))
    p.append(table(L, "Build info",
                   "Every meshcast process scraped: component (controller or worker), version, instance, worker.",
                   [target(f"meshcast_build_info{{{CTRL}}}", "", "A", instant=True, fmt="table")]))
    return dashboard(
        "meshcast-overview", "meshcast / Cluster overview",
        "Workers, devices, jobs, queue, failures and RPC errors of a meshcast cluster "
        "(controller and worker metrics, docs/metrics.md). Variables: instance (scrape target) "
        "and worker (the worker's --name).",
        ["overview"], p, common_variables())


def communication():
    L = Layout()
    p = [L.row("Throughput")]
    sent = f"rate(meshcast_worker_bytes_sent_total{{{WORKER}}}[$__rate_interval])"
    recv = f"rate(meshcast_worker_bytes_received_total{{{WORKER}}}[$__rate_interval])"
    p.append(timeseries(L, "Bytes sent per second by link and backend",
                        "Send throughput summed over the selected workers, by link (intra: within a node, "
                        "inter: between nodes) and backend (local copy, gloo, nccl).",
                        targets((f"sum by (link, backend) ({sent})", "{{link}} {{backend}}")), unit="Bps"))
    p.append(timeseries(L, "Bytes received per second by link and backend",
                        "Receive throughput summed over the selected workers, by link and backend.",
                        targets((f"sum by (link, backend) ({recv})", "{{link}} {{backend}}")), unit="Bps"))
    p.append(timeseries(L, "Bytes sent per second by worker and link",
                        "Send throughput of each worker: an idle or slow worker stands out here.",
                        targets((f"sum by (worker, link) ({sent})", "{{worker}} {{link}}")), unit="Bps"))

    p.append(L.row("Latency"))
    steps = "meshcast_worker_step_duration_seconds"
    hops = "meshcast_worker_transfer_duration_seconds"
    p.append(timeseries(L, "Step duration percentiles by op",
                        "p50, p90 and p99 of one plan step, start to end (broadcast, send_recv, ...), "
                        "from the workers' step histograms.",
                        targets(*quantiles(steps, "op", WORKER)), unit="s", w=12))
    p.append(timeseries(L, "Transfer (hop) duration percentiles by op and link",
                        "p50 and p99 of one hop of a step (one sender to one receiver), by op and link.",
                        targets(*quantiles(hops, "op, link", WORKER, qs=(0.5, 0.99))), unit="s", w=12))
    p.append(timeseries(L, "Achieved bandwidth of the last step by op",
                        "Bytes / seconds of the last finished step of each op, best worker. Blank while no "
                        "step of that op finished in the rate window: the gauge keeps its last value when "
                        "the cluster is idle, which would read as a live figure.",
                        targets((f"{last_step_bandwidth('op', WORKER)}", "{{op}}")), unit="Bps", w=12))
    p.append(timeseries(L, "Mean step duration by op",
                        "Average step duration over the rate window: sum of durations over count.",
                        targets((f"sum by (op) (rate({steps}_sum{{{WORKER}}}[$__rate_interval])) / "
                                 f"sum by (op) (rate({steps}_count{{{WORKER}}}[$__rate_interval]))", "{{op}}")),
                        unit="s", w=12))

    p.append(L.row("Measured vs predicted"))
    ratio = "meshcast_controller_measured_over_predicted_ratio"
    p.append(timeseries(L, "Measured over predicted time",
                        "Measured data-plane time over the planner simulator's prediction, by job type. "
                        "\"total\": all measured seconds over all predicted seconds (bytes-weighted: a large job "
                        "counts more than a tiny latency-bound one); p90: of the per-job ratios. 1 means the cost "
                        "model is exact; above 1 the cluster is slower than predicted. Alert "
                        "MeshcastBandwidthBelowPrediction fires when the 30-minute total exceeds 2.",
                        targets((measured_over_predicted("type", CTRL, "rate", "$__rate_interval"), "{{type}} total"),
                                *quantiles(ratio, "type", CTRL, qs=(0.9,))),
                        th=thresholds((None, "green"), (2, "red")), w=12,
                        custom={"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                                "showPoints": "auto", "spanNulls": True,
                                "thresholdsStyle": {"mode": "line"}}))
    p.append(heatmap(L, "Measured over predicted distribution",
                     "Histogram of measured/predicted per job over time (count per bucket).",
                     target(f"sum by (le) (increase({ratio}_bucket{{{CTRL}}}[$__rate_interval]))",
                            "{{le}}", "A", fmt="heatmap")))

    p.append(L.row("Verification"))
    fails = "meshcast_worker_verification_failures_total"
    p.append(stat(L, "Verification failures in the time range",
                  "Destination elements that did not match the expected data, over the selected range. "
                  "Anything above 0 is data corruption (alert MeshcastVerificationFailures).",
                  targets((f"sum(increase({fails}{{{WORKER}}}[$__range]))", "mismatching elements")),
                  th=thresholds((None, "green"), (1, "red")), w=6, h=8))
    p.append(timeseries(L, "Verification failures per second by worker",
                        "Mismatching destination elements per second, by worker.",
                        targets((f"sum by (worker) (rate({fails}{{{WORKER}}}[$__rate_interval]))", "{{worker}}")),
                        w=9))
    p.append(timeseries(L, "Verified elements per second by worker",
                        "Destination elements checked per second, by worker.",
                        targets((f"sum by (worker) (rate(meshcast_worker_verified_elements_total{{{WORKER}}}"
                                 f"[$__rate_interval]))", "{{worker}}")), w=9))

    p.append(L.row("Worker resources"))
    p.append(timeseries(L, "Running steps by worker",
                        "Plan steps in flight on each worker.",
                        targets((f"sum by (worker) (meshcast_worker_running_steps{{{WORKER}}})", "{{worker}}")),
                        w=12))
    p.append(timeseries(L, "Buffer memory by worker and device",
                        "Memory held by meshcast buffers on each device (local device index).",
                        targets((f"sum by (worker, device) (meshcast_worker_device_memory_bytes{{{WORKER}}})",
                                 "{{worker}} dev {{device}}")), unit="bytes", w=12))
    return dashboard(
        "meshcast-communication", "meshcast / Communication",
        "Data-plane throughput by link and backend, step and hop latency percentiles by op, "
        "measured vs predicted time, verification, and worker resources.",
        ["communication"], p, common_variables())


def jobs():
    L = Layout()
    variables = common_variables() + [
        variable_query("type", "Job type", "label_values(meshcast_controller_jobs, type)",
                       "Job type (reshard, ...)."),
        variable_query("state", "Final state",
                       "label_values(meshcast_controller_jobs_finished_total, state)",
                       "Final job state: succeeded, failed or cancelled."),
        variable_query("op", "Step op", "label_values(meshcast_worker_step_duration_seconds_count, op)",
                       "Plan step operation (broadcast, send_recv, ...)."),
    ]
    jf = f'{CTRL}, type=~"$type"'
    jfs = f'{CTRL}, type=~"$type", state=~"$state"'
    wop = f'{WORKER}, op=~"$op"'
    p = [L.row("Jobs: planning and duration")]
    p.append(timeseries(L, "Planning time percentiles by type",
                        "Time the controller spent planning a job (p50, p99), by job type.",
                        targets(*quantiles("meshcast_controller_planning_seconds", "type", jf, qs=(0.5, 0.99))),
                        unit="s"))
    p.append(timeseries(L, "Job duration percentiles by final state",
                        "Submit-to-end time of jobs (p50, p90), by final state.",
                        targets(*quantiles("meshcast_controller_job_duration_seconds", "state", jfs, qs=(0.5, 0.9))),
                        unit="s"))
    p.append(bargauge(L, "Jobs ended in the time range by state",
                      "Jobs of the selected types that reached each final state in the selected time range.",
                      targets((f"sum by (state) (increase(meshcast_controller_jobs_finished_total{{{jfs}}}[$__range]))",
                               "{{state}}")), decimals=0))
    jd = "meshcast_controller_job_duration_seconds"
    p.append(stat(L, "Mean job duration in the time range by state",
                  "Average submit-to-end time of the jobs that ended in the selected range.",
                  targets((f"sum by (state) (increase({jd}_sum{{{jfs}}}[$__range])) / "
                           f"sum by (state) (increase({jd}_count{{{jfs}}}[$__range]))", "{{state}}")),
                  unit="s", w=8, h=6))
    pl = "meshcast_controller_planning_seconds"
    p.append(stat(L, "Mean planning time in the time range",
                  "Average planning time of the jobs planned in the selected range, by type.",
                  targets((f"sum by (type) (increase({pl}_sum{{{jf}}}[$__range])) / "
                           f"sum by (type) (increase({pl}_count{{{jf}}}[$__range]))", "{{type}}")),
                  unit="s", w=8, h=6))
    p.append(stat(L, "Measured over predicted in the time range",
                  "Measured over predicted data-plane time of the jobs in the selected range, by type: total "
                  "measured seconds over total predicted seconds (bytes-weighted, as the alert).",
                  targets((measured_over_predicted("type", jf, "increase", "$__range"), "{{type}}")),
                  decimals=2, th=thresholds((None, "green"), (1.5, "orange"), (2, "red")), w=8, h=6))

    p.append(L.row("Steps"))
    sd = "meshcast_worker_step_duration_seconds"
    p.append(timeseries(L, "Step duration percentiles by op",
                        "p50 and p99 of one plan step, for the selected ops and workers.",
                        targets(*quantiles(sd, "op", wop, qs=(0.5, 0.99))), unit="s", w=12))
    p.append(timeseries(L, "Mean step duration by op and worker",
                        "Average step duration per worker: a straggler worker shows a higher line.",
                        targets((f"sum by (op, worker) (rate({sd}_sum{{{wop}}}[$__rate_interval])) / "
                                 f"sum by (op, worker) (rate({sd}_count{{{wop}}}[$__rate_interval]))",
                                 "{{worker}} {{op}}")), unit="s", w=12))
    p.append(timeseries(L, "Steps per second by op",
                        "Plan steps finished per second, by op.",
                        targets((f"sum by (op) (rate({sd}_count{{{wop}}}[$__rate_interval]))", "{{op}}")),
                        unit="ops", w=12))
    p.append(timeseries(L, "Hop duration p90 by op and link",
                        "p90 of one hop of a step, by op and link (intra vs inter node).",
                        targets(*quantiles("meshcast_worker_transfer_duration_seconds", "op, link", wop,
                                           qs=(0.9,))), unit="s", w=12))

    p.append(L.row("Bandwidth"))
    p.append(timeseries(L, "Achieved bandwidth by op and worker",
                        "Bytes / seconds of the last finished step of each op, per worker; blank while that "
                        "worker finished no step of that op in the rate window (idle).",
                        targets((last_step_bandwidth("op, worker", wop), "{{worker}} {{op}}")), unit="Bps", w=12))
    p.append(bargauge(L, "Bytes sent in the time range by link and backend",
                      "Bytes the selected workers sent in the selected time range.",
                      targets((f"sum by (link, backend) (increase(meshcast_worker_bytes_sent_total{{{WORKER}}}[$__range]))",
                               "{{link}} {{backend}}")), unit="bytes", w=6))
    p.append(bargauge(L, "Worker programs in the time range by result",
                      "Programs the selected workers ran in the selected range, by result.",
                      targets((f"sum by (result) (increase(meshcast_worker_tasks_total{{{WORKER}}}[$__range]))",
                               "{{result}}")), decimals=0, w=6))
    return dashboard(
        "meshcast-jobs", "meshcast / Job drill-down",
        "Drill into jobs by type, final state, step op, worker and time range. Job ids are not metric "
        "labels (they would make label sets unbounded), so one job is isolated by its time window: "
        "take its start and end from `meshctl get JOB`, set the dashboard time range to it, and "
        "filter by type, state, op and worker. Panels named \"in the time range\" aggregate over the "
        "whole selected range.",
        ["jobs"], p, variables)


DASHBOARDS = {
    "meshcast-overview.json": overview,
    "meshcast-communication.json": communication,
    "meshcast-jobs.json": jobs,
}


def render(build):
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a dashboard file differs from what this script generates")
    parser.add_argument("--out-dir", default=DASHBOARD_DIR, help="where to write the JSON files")
    args = parser.parse_args()
    stale = []
    for name, build in DASHBOARDS.items():
        path = os.path.join(args.out_dir, name)
        text = render(build)
        current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if current == text:
            continue
        if args.check:
            stale.append(path)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"wrote {path}")
    if stale:
        print("stale (run python3 dashboards/generate.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
