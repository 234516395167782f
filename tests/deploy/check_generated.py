#!/usr/bin/env python3
"""Generated files are up to date with their sources.

dashboards/*.json must equal what dashboards/generate.py writes, and the
derived copies (deploy/k8s/base/prometheusrule.yaml, the Helm chart's files/)
must equal what deploy/sync_generated.py writes. Also checks the PrometheusRule
carries exactly the rules of deploy/prometheus/rules/meshcast-alerts.yml.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import REPO, Checker, need_yaml, run  # noqa: E402


def main():
    yaml = need_yaml()
    c = Checker()
    for script in ("dashboards/generate.py", "deploy/sync_generated.py"):
        r = run([sys.executable, os.path.join(REPO, script), "--check"])
        print(r.stdout + r.stderr, end="")
        c.check(r.returncode == 0, f"{script} --check: generated files are stale; run python3 {script}")
    with open(os.path.join(REPO, "deploy", "prometheus", "rules", "meshcast-alerts.yml")) as f:
        rules = yaml.safe_load(f)
    with open(os.path.join(REPO, "deploy", "k8s", "base", "prometheusrule.yaml")) as f:
        pr = yaml.safe_load(f)
    c.check(pr.get("kind") == "PrometheusRule" and pr.get("spec") == rules,
            "deploy/k8s/base/prometheusrule.yaml spec must equal the rule file")
    c.finish()


if __name__ == "__main__":
    main()
