#!/usr/bin/env python3
"""deploy/prometheus/prometheus.yml: promtool check config, and it fits the stack.

promtool checks the file as written, and a copy whose rule_files point at the
repository's rules directory (inside the container they live at
/etc/prometheus/rules), so that the rule files the stack loads are checked
too. Then: every scrape target is a compose service with the metrics port its
command line sets, and every worker target carries the `worker` label that
equals that worker's --name.
"""

import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import REPO, Checker, need_yaml, rel, run, skip  # noqa: E402

CONFIG = os.path.join(REPO, "deploy", "prometheus", "prometheus.yml")
COMPOSE = os.path.join(REPO, "deploy", "docker", "docker-compose.yml")


def flag(command, name):
    for arg in command or []:
        m = re.match(rf"--{name}=(.*)", arg)
        if m:
            return m.group(1)
    return None


def main():
    promtool = shutil.which("promtool")
    if not promtool:
        skip("no promtool (Debian package prometheus, scripts/install-deps.sh)")
    yaml = need_yaml()
    c = Checker()
    r = run([promtool, "check", "config", "--syntax-only", CONFIG])
    print(r.stdout + r.stderr, end="")
    c.check(r.returncode == 0, f"promtool check config --syntax-only {rel(CONFIG)}")

    with open(CONFIG) as f:
        config = yaml.safe_load(f)
    c.check(config.get("rule_files") == ["/etc/prometheus/rules/*.yml"],
            "rule_files must load /etc/prometheus/rules/*.yml (where compose mounts the rules)")
    work = tempfile.mkdtemp(prefix="meshcast-promcfg-")
    try:
        local = dict(config)
        local["rule_files"] = [os.path.join(REPO, "deploy", "prometheus", "rules", "*.yml")]
        path = os.path.join(work, "prometheus.yml")
        with open(path, "w") as f:
            yaml.safe_dump(local, f)
        r = run([promtool, "check", "config", path])
        print(r.stdout + r.stderr, end="")
        c.check(r.returncode == 0 and "SUCCESS" in r.stdout,
                "promtool check config with the repository's rule files")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    with open(COMPOSE) as f:
        services = yaml.safe_load(f)["services"]
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    c.check({"meshcast-controller", "meshcast-worker"} <= set(jobs),
            "scrape jobs meshcast-controller and meshcast-worker (the alerts use these job names)")
    for job_name in ("meshcast-controller", "meshcast-worker"):
        for sc in jobs.get(job_name, {}).get("static_configs", []):
            for target in sc["targets"]:
                host, port = target.rsplit(":", 1)
                service = services.get(host)
                if not c.check(service is not None, f"{job_name} target {target}: no compose service {host}"):
                    continue
                c.check(flag(service.get("command"), "metrics-port") == port,
                        f"{job_name} target {target}: service {host} runs with a different --metrics-port")
                if job_name == "meshcast-worker":
                    c.check(sc.get("labels", {}).get("worker") == flag(service.get("command"), "name"),
                            f"target {target}: label worker must equal the worker's --name")
    worker_services = [n for n, s in services.items() if flag(s.get("command"), "controller")]
    scraped = {t.rsplit(":", 1)[0] for sc in jobs.get("meshcast-worker", {}).get("static_configs", [])
               for t in sc["targets"]}
    c.check(set(worker_services) == scraped,
            f"every compose worker is scraped: workers {sorted(worker_services)}, scraped {sorted(scraped)}")
    c.finish()


if __name__ == "__main__":
    main()
