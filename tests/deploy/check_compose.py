#!/usr/bin/env python3
"""deploy/docker/docker-compose.yml parses and describes a working stack.

No Docker engine here, so the checks are static: the file is YAML with
services controller, two CPU workers, prometheus and grafana; every build
context and Dockerfile exists; every bind-mounted host path exists; workers
point --controller at the controller service's gRPC port, use CPU devices,
distinct names and data addresses equal to their hostnames; published ports
are unique and bound to 127.0.0.1; named volumes are declared; every
daemon either gets TLS files or an explicit --insecure that the file's
comments explain (the daemons refuse to start with neither).
`docker compose config` also runs when a compose plugin is installed.
"""

import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import REPO, Checker, load_yaml_docs, run  # noqa: E402

COMPOSE_DIR = os.path.join(REPO, "deploy", "docker")
COMPOSE = os.path.join(COMPOSE_DIR, "docker-compose.yml")


def flag(command, name):
    for arg in command or []:
        m = re.match(rf"--{name}=(.*)", arg)
        if m:
            return m.group(1)
    return None


def main():
    c = Checker()
    with open(COMPOSE) as f:
        docs = load_yaml_docs(f.read())
    c.check(len(docs) == 1, "one YAML document")
    compose = docs[0]
    services = compose.get("services", {})
    for name in ("controller", "prometheus", "grafana"):
        c.check(name in services, f"service {name}")
    workers = {n: s for n, s in services.items() if flag(s.get("command"), "controller")}
    c.check(len(workers) == 2, f"two worker services, found {sorted(workers)}")

    ctrl = services.get("controller", {})
    listen = flag(ctrl.get("command"), "listen") or ""
    c.check(listen.startswith("0.0.0.0:"), "controller --listen binds all interfaces")
    c.check(bool(flag(ctrl.get("command"), "db")), "controller --db")
    text = open(COMPOSE).read()
    for n in ["controller"] + sorted(workers):
        cmd = services.get(n, {}).get("command") or []
        tls = all(flag(cmd, f) for f in ("tls_cert", "tls_key", "tls_ca"))
        c.check(tls != ("--insecure" in cmd), f"{n}: TLS files or an explicit --insecure, not both or neither")
        if "--insecure" in cmd:
            c.check("--insecure" in text.split("services:")[0] and "127.0.0.1" in text.split("services:")[0],
                    f"{n}: the file's header explains why the stack runs --insecure")
    names, addresses = set(), set()
    for n, s in workers.items():
        cmd = s.get("command")
        c.check(flag(cmd, "controller") == f"controller:{listen.rsplit(':', 1)[-1]}",
                f"{n}: --controller must be the controller service's gRPC port")
        c.check((flag(cmd, "devices") or "").startswith("cpu:"), f"{n}: CPU devices")
        c.check(flag(cmd, "name") not in names, f"{n}: duplicate --name")
        names.add(flag(cmd, "name"))
        c.check(flag(cmd, "data-address") == s.get("hostname"), f"{n}: --data-address equals its hostname")
        addresses.add(flag(cmd, "data-address"))
        c.check(bool(flag(cmd, "metrics-port")), f"{n}: --metrics-port")
        c.check("controller" in s.get("depends_on", []), f"{n}: depends on controller")
        args = s.get("build", {}).get("args", {})
        c.check(args.get("MESHCAST_CUDA") == "OFF", f"{n}: builds the CPU worker image")

    published = []
    for n, s in services.items():
        build = s.get("build")
        if build:
            context = os.path.normpath(os.path.join(COMPOSE_DIR, build.get("context", ".")))
            c.check(os.path.isdir(context), f"{n}: build context {context} missing")
            dockerfile = os.path.join(context, build.get("dockerfile", "Dockerfile"))
            c.check(os.path.isfile(dockerfile), f"{n}: Dockerfile {dockerfile} missing")
        c.check(bool(s.get("image")), f"{n}: image name")
        for v in s.get("volumes", []):
            source = v.split(":")[0]
            if source.startswith((".", "/")):
                c.check(os.path.exists(os.path.normpath(os.path.join(COMPOSE_DIR, source))),
                        f"{n}: bind mount source {source} does not exist")
            else:
                c.check(source in (compose.get("volumes") or {}), f"{n}: named volume {source} not declared")
        for p in s.get("ports", []):
            c.check(str(p).startswith("127.0.0.1:"), f"{n}: port {p} should bind 127.0.0.1 only")
            published.append(str(p).split(":")[-2])
    c.check(len(published) == len(set(published)), f"published host ports must be unique: {published}")

    docker = shutil.which("docker")
    if docker and run([docker, "compose", "version"], timeout=20).returncode == 0:
        r = run([docker, "compose", "-f", COMPOSE, "config", "--quiet"], timeout=60)
        c.check(r.returncode == 0, f"docker compose config: {r.stderr.strip()}")
    else:
        print("note: no docker compose plugin here; static checks only")
    c.finish()


if __name__ == "__main__":
    main()
