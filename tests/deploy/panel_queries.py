#!/usr/bin/env python3
"""Extracts every Grafana panel query of the meshcast dashboards and checks it.

Each panel target's PromQL (and each `label_values` variable query) is taken
from the dashboard JSON, its template variables filled in ($instance,
$worker, ... -> ".*" unless --var says otherwise; $__rate_interval,
$__interval and $__range -> fixed durations), and then

  panel_queries.py --list                      prints them;
  panel_queries.py --rules-out FILE            writes them as recording rules, so
                                               `promtool check rules FILE` parses
                                               every query (promtool 2.42 has no
                                               `check expr`);
  panel_queries.py http://HOST:9090            evaluates them through the
                                               Prometheus HTTP API and fails when a
                                               query errors or returns no data
                                               (the live dashboard test).

Exit status: 0 when every query passed, 1 when one failed, 2 on bad usage.
Only the Python standard library is used.
"""

import argparse
import glob
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_DASHBOARDS = sorted(glob.glob(os.path.join(REPO_ROOT, "dashboards", "*.json")))

# $name, ${name}, ${name:format} and [[name]] (Grafana's variable syntaxes).
VARIABLE_RE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
LABEL_VALUES_RE = re.compile(r"^\s*label_values\(\s*(?:(.*),\s*)?(\w+)\s*\)\s*$", re.S)


class Query:
    """One PromQL expression taken from a dashboard, variables filled in."""

    def __init__(self, dashboard, where, raw, expr, kind, label=None):
        self.dashboard = dashboard  # dashboard uid
        self.where = where          # "panel 3 'Title' target A" or "variable worker"
        self.raw = raw              # as written in the dashboard
        self.expr = expr            # variables substituted
        self.kind = kind            # "target" or "variable"
        self.label = label          # for label_values variables: the label

    def name(self):
        return f"{self.dashboard}: {self.where}"


def substitute(text, values, builtins):
    """Replaces Grafana variables; raises KeyError naming an unknown one."""
    def repl(match):
        name = match.group(1) or match.group(2) or match.group(3)
        if name in builtins:
            return builtins[name]
        if name in values:
            return values[name]
        raise KeyError(name)
    return VARIABLE_RE.sub(repl, text)


def iter_panels(panels):
    for panel in panels:
        yield panel
        # collapsed rows keep their panels inside
        yield from iter_panels(panel.get("panels", []))


def extract(paths, var_values, builtins):
    """Returns (queries, problems) for the dashboard files at paths."""
    queries, problems = [], []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            dash = json.load(f)
        uid = dash.get("uid") or os.path.basename(path)
        variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
        values = {}
        for name, var in variables.items():
            if var.get("type") == "datasource":
                continue
            values[name] = var_values.get(name, var.get("allValue") or ".*")
        for name, var in variables.items():
            if var.get("type") != "query":
                continue
            q = var.get("query")
            raw = q.get("query") if isinstance(q, dict) else q
            m = LABEL_VALUES_RE.match(raw or "")
            if not m:
                problems.append(f"{uid}: variable {name}: not a label_values() query: {raw!r}")
                continue
            selector = m.group(1) or "up"
            try:
                expr = substitute(selector, values, builtins)
            except KeyError as e:
                problems.append(f"{uid}: variable {name}: unknown variable ${e.args[0]}")
                continue
            queries.append(Query(uid, f"variable {name}", raw, expr, "variable", m.group(2)))
        for panel in iter_panels(dash.get("panels", [])):
            if panel.get("type") == "row":
                continue
            for t in panel.get("targets", []):
                raw = t.get("expr")
                where = f"panel {panel.get('id')} '{panel.get('title')}' target {t.get('refId')}"
                if not raw:
                    problems.append(f"{uid}: {where}: no expr")
                    continue
                try:
                    expr = substitute(raw, values, builtins)
                except KeyError as e:
                    problems.append(f"{uid}: {where}: unknown variable ${e.args[0]}")
                    continue
                queries.append(Query(uid, where, raw, expr, "target"))
    return queries, problems


def write_rules(queries, path):
    """Writes each query as a recording rule, for `promtool check rules`."""
    lines = ["# Generated by tests/deploy/panel_queries.py --rules-out; do not edit.", "groups:"]
    by_dashboard = {}
    for q in queries:
        by_dashboard.setdefault(q.dashboard, []).append(q)
    for uid, qs in by_dashboard.items():
        lines.append(f"  - name: {json.dumps(uid)}")
        lines.append("    rules:")
        for i, q in enumerate(qs):
            record = "panel:" + re.sub(r"[^a-zA-Z0-9_]", "_", uid) + f":{i}"
            lines.append(f"      - record: {record}")
            lines.append(f"        expr: {json.dumps(q.expr)}")
            lines.append(f"        labels: {{source: {json.dumps(q.where)}}}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def http_get_json(url, timeout):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        body = e.read().decode("utf-8", "replace")
        try:
            return json.loads(body)
        except ValueError:
            return {"status": "error", "error": f"HTTP {e.code}: {body[:200]}"}


def evaluate(base_url, q, range_seconds, step, timeout):
    """Returns (ok, message) for one query against the Prometheus HTTP API."""
    base = base_url.rstrip("/")
    if q.kind == "variable":
        fields = {"match[]": q.expr}
        if range_seconds:
            end = time.time()
            fields.update({"start": end - range_seconds, "end": end})
        params = urllib.parse.urlencode(fields)
        data = http_get_json(f"{base}/api/v1/label/{urllib.parse.quote(q.label)}/values?{params}", timeout)
        if data.get("status") != "success":
            return False, f"error: {data.get('error')}"
        values = data.get("data") or []
        return (bool(values), f"{len(values)} values: {', '.join(values[:5])}"
                if values else "no values")
    if range_seconds:
        end = time.time()
        params = urllib.parse.urlencode({"query": q.expr, "start": end - range_seconds, "end": end,
                                         "step": step})
        data = http_get_json(f"{base}/api/v1/query_range?{params}", timeout)
    else:
        params = urllib.parse.urlencode({"query": q.expr})
        data = http_get_json(f"{base}/api/v1/query?{params}", timeout)
    if data.get("status") != "success":
        return False, f"error: {data.get('errorType', '')} {data.get('error')}"
    result = data.get("data", {}).get("result") or []
    if not result:
        return False, "no data"
    return True, f"{len(result)} series"


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Extract the meshcast dashboards' panel queries; list them, write them as "
                    "promtool rules, or evaluate them against a Prometheus HTTP API URL.")
    parser.add_argument("prometheus_url", nargs="?",
                        help="Prometheus base URL (e.g. http://127.0.0.1:9090) to evaluate against")
    parser.add_argument("--dashboards", nargs="+", default=DEFAULT_DASHBOARDS,
                        help="dashboard JSON files (default: dashboards/*.json)")
    parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                        help="value of a dashboard variable (default: its allValue, i.e. '.*')")
    parser.add_argument("--rate-interval", default="1m", help="value of $__rate_interval (default 1m)")
    parser.add_argument("--interval", default="30s", help="value of $__interval (default 30s)")
    parser.add_argument("--range", default="1h", dest="range_value",
                        help="value of $__range (default 1h)")
    parser.add_argument("--query-range", type=int, default=0, metavar="SECONDS",
                        help="evaluate over the last SECONDS with query_range instead of an instant "
                             "query (a query passes when any point has data)")
    parser.add_argument("--step", default="5", help="query_range step in seconds (default 5)")
    parser.add_argument("--timeout", type=float, default=10, help="per-request timeout in seconds")
    parser.add_argument("--list", action="store_true", help="print every query and exit")
    parser.add_argument("--rules-out", metavar="FILE", help="write the queries as recording rules")
    parser.add_argument("--skip-variables", action="store_true",
                        help="do not evaluate the label_values variable queries")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    var_values = {}
    for item in args.var:
        if "=" not in item:
            print(f"--var must be NAME=VALUE, got {item!r}", file=sys.stderr)
            return 2
        name, value = item.split("=", 1)
        var_values[name] = value
    builtins = {
        "__rate_interval": args.rate_interval,
        "__interval": args.interval,
        "__range": args.range_value,
    }
    if not args.dashboards:
        print("no dashboard files given or found", file=sys.stderr)
        return 2
    queries, problems = extract(args.dashboards, var_values, builtins)
    for p in problems:
        print(f"FAIL {p}")
    if args.list:
        for q in queries:
            print(f"{q.name()}\n    {q.expr}")
    if args.rules_out:
        write_rules(queries, args.rules_out)
        print(f"wrote {len(queries)} queries to {args.rules_out}")
    if not args.prometheus_url:
        if not (args.list or args.rules_out):
            print("nothing to do: give a Prometheus URL, --list or --rules-out", file=sys.stderr)
            return 2
        return 1 if problems else 0
    failed = len(problems)
    passed = 0
    for q in queries:
        if q.kind == "variable" and args.skip_variables:
            continue
        try:
            ok, message = evaluate(args.prometheus_url, q, args.query_range, args.step, args.timeout)
        except (urllib.error.URLError, OSError, ValueError) as e:
            ok, message = False, f"request failed: {e}"
        print(f"{'PASS' if ok else 'FAIL'} {q.name()}: {message}")
        if not ok:
            print(f"     {q.expr}")
            failed += 1
        else:
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
