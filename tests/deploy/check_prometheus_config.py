#!/usr/bin/env python3
"""deploy/prometheus/prometheus.yml: promtool check config, and it fits the stack.

promtool checks the file as written, and a copy whose rule_files point at the
repository's rules directory (inside the container they live at
/etc/prometheus/rules), so that the rule files the stack loads are checked
too. Then: every scrape target is a compose service with the metrics port its
command line sets, and every worker target carries the `worker` label that
equals that worker's --name. deploy/prometheus/prometheus-tls.yml (scraping
daemons behind --metrics_web_config) passes promtool too, with its CA and
password files present, and scrapes both jobs over https with basic auth,
verifying the metrics certificate's server name.
"""

import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import REPO, Checker, need_yaml, rel, run, skip  # noqa: E402

CONFIG = os.path.join(REPO, "deploy", "prometheus", "prometheus.yml")
TLS_CONFIG = os.path.join(REPO, "deploy", "prometheus", "prometheus-tls.yml")
COMPOSE = os.path.join(REPO, "deploy", "docker", "docker-compose.yml")


def flag(command, name):
    for arg in command or []:
        m = re.match(rf"--{name}=(.*)", arg)
        if m:
            return m.group(1)
    return None


def check_tls_config(c, promtool, yaml):
    with open(TLS_CONFIG) as f:
        config = yaml.safe_load(f)
    jobs = {j["job_name"]: j for j in config.get("scrape_configs", [])}
    for name in ("meshcast-controller", "meshcast-worker"):
        job = jobs.get(name, {})
        c.check(job.get("scheme") == "https" and job.get("tls_config", {}).get("server_name") == "meshcast-metrics"
                and job.get("tls_config", {}).get("ca_file") and job.get("basic_auth", {}).get("password_file"),
                f"{rel(TLS_CONFIG)}: {name} scrapes https, verifies meshcast-metrics, sends basic auth")
    work = tempfile.mkdtemp(prefix="meshcast-promtls-")
    try:
        # promtool checks that the referenced files exist: point them at real ones.
        for job in config["scrape_configs"]:
            for section, key in (("tls_config", "ca_file"), ("basic_auth", "password_file")):
                path = os.path.join(work, os.path.basename(job[section][key]))
                open(path, "a").close()
                job[section][key] = path
        path = os.path.join(work, "prometheus-tls.yml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        r = run([promtool, "check", "config", path])
        print(r.stdout + r.stderr, end="")
        c.check(r.returncode == 0 and "SUCCESS" in r.stdout, f"promtool check config {rel(TLS_CONFIG)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


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

    check_tls_config(c, promtool, yaml)

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
