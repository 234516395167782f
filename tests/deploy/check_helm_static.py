#!/usr/bin/env python3
"""Static checks of the Helm chart that need no helm binary.

Always runs (helm itself is not in Debian; check_helm.py renders the chart
where helm can be had): Chart.yaml and values.yaml parse and have the fields
Helm needs; values.schema.json parses and declares every key of values.yaml;
every template's actions are balanced (if/range/with/define ... end); every
.Values path a template reads exists in values.yaml; every included template
is defined; every file read with .Files.Get/.Files.Glob exists in the chart.
"""

import fnmatch
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import REPO, Checker, need_yaml, rel  # noqa: E402

CHART = os.path.join(REPO, "deploy", "helm", "meshcast")
ACTION_RE = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}", re.S)
OPENERS = ("if", "range", "with", "define", "block")


def check_balanced(c, path, text):
    stack = []
    for m in ACTION_RE.finditer(text):
        action = m.group(1)
        if action.startswith("/*"):
            continue
        word = re.split(r"[\s(]", action, 1)[0]
        line = text.count("\n", 0, m.start()) + 1
        if word in OPENERS:
            stack.append((word, line))
        elif word == "end":
            if not c.check(bool(stack), f"{rel(path)}:{line}: `end` without an opening action"):
                return
            stack.pop()
        elif word == "else":
            c.check(bool(stack) and stack[-1][0] in ("if", "with", "range"),
                    f"{rel(path)}:{line}: `else` outside if/with/range")
    c.check(not stack, f"{rel(path)}: unclosed {', '.join(f'{w} (line {l})' for w, l in stack)}")


def path_exists(values, dotted):
    node = values
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return True  # below a list or scalar value: free-form
        if part not in node:
            return False
        node = node[part]
    return True


def schema_declares(schema, values, where, c):
    props = schema.get("properties", {})
    for key, value in values.items():
        sub = props.get(key)
        if sub is None:
            c.check(schema.get("additionalProperties", True) is not False,
                    f"values.schema.json does not declare {where}{key}")
            continue
        if "$ref" in sub:
            continue
        if isinstance(value, dict) and sub.get("properties"):
            schema_declares(sub, value, f"{where}{key}.", c)


def main():
    yaml = need_yaml()
    c = Checker()
    with open(os.path.join(CHART, "Chart.yaml")) as f:
        chart = yaml.safe_load(f)
    c.check(chart.get("apiVersion") == "v2", "Chart.yaml apiVersion v2")
    c.check(chart.get("name") == "meshcast", "Chart.yaml name meshcast")
    c.check(re.fullmatch(r"\d+\.\d+\.\d+(-[\w.]+)?", str(chart.get("version", ""))) is not None,
            "Chart.yaml version is SemVer")
    c.check(bool(chart.get("appVersion")), "Chart.yaml appVersion")
    with open(os.path.join(CHART, "values.yaml")) as f:
        values = yaml.safe_load(f)
    for key in ("controller", "worker", "monitoring"):
        c.check(isinstance(values.get(key), dict), f"values.yaml has {key}")
    for toggle in ("serviceMonitor", "prometheusRule", "dashboards"):
        c.check(isinstance(values["monitoring"].get(toggle, {}).get("enabled"), bool),
                f"values.yaml monitoring.{toggle}.enabled toggle")
    with open(os.path.join(CHART, "values.schema.json")) as f:
        schema = json.load(f)
    schema_declares(schema, values, "", c)
    devices = schema["properties"]["worker"]["properties"]["devices"]["pattern"]
    for ok in ("cuda", "cuda:0,1", "cpu:4"):
        c.check(re.search(devices, ok) is not None, f"schema accepts worker.devices={ok}")
    for bad in ("gpu", "cpu:", "cuda:a"):
        c.check(re.search(devices, bad) is None, f"schema rejects worker.devices={bad}")

    files = [os.path.relpath(p, CHART) for p in glob.glob(os.path.join(CHART, "**", "*"), recursive=True)
             if os.path.isfile(p)]
    templates = sorted(glob.glob(os.path.join(CHART, "templates", "*")))
    defined = set()
    texts = {}
    for path in templates:
        with open(path) as f:
            texts[path] = f.read()
        defined |= set(re.findall(r'\{\{-?\s*define\s+"([^"]+)"', texts[path]))
    for path, text in texts.items():
        check_balanced(c, path, text)
        for dotted in set(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", text)):
            c.check(path_exists(values, dotted.rstrip(".")), f"{rel(path)}: .Values.{dotted} not in values.yaml")
        for name in set(re.findall(r'(?:include|template)\s+"([^"]+)"', text)):
            c.check(name in defined, f"{rel(path)}: template {name!r} is not defined")
        for name in set(re.findall(r'\.Files\.Get\s+"([^"]+)"', text)):
            c.check(name in files, f"{rel(path)}: .Files.Get {name!r}: no such file in the chart")
        for pattern in set(re.findall(r'\.Files\.Glob\s+"([^"]+)"', text)):
            c.check(any(fnmatch.fnmatch(f, pattern) for f in files),
                    f"{rel(path)}: .Files.Glob {pattern!r} matches nothing")
    c.check(any("kind: DaemonSet" in t for t in texts.values()) and
            any("kind: ServiceMonitor" in t for t in texts.values()) and
            any("kind: PrometheusRule" in t for t in texts.values()),
            "templates for the worker DaemonSet, ServiceMonitor and PrometheusRule")
    c.finish()


if __name__ == "__main__":
    main()
