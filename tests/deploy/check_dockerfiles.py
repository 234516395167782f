#!/usr/bin/env python3
"""Dockerfiles parse and build from what the repository has (static checks).

A small Dockerfile parser (line continuations, comments, parser directives)
checks: every instruction is a known one; build arguments used in FROM are
declared before the first FROM; COPY/ADD sources exist in the build context
(the repository root) or name an earlier stage with --from; the build stage
runs scripts/install-deps.sh and scripts/build.sh; the runtime stage is the
intended base (debian:bookworm-slim; an NVIDIA CUDA runtime image) with an
ENTRYPOINT of the right daemon, non-root USER, EXPOSEd ports, and a
HEALTHCHECK running deploy/docker/healthcheck.sh on the gRPC port. Then
deploy/docker/stage-runtime.sh runs for real on a copy of a system binary: it
must stage it and list the Debian packages of its libraries, and fail on a
missing binary; and healthcheck.sh runs against a real listening socket
(healthy), the same port closed (unhealthy) and a command line without a
fixed port (unhealthy).
"""

import glob
import json
import os
import re
import shutil
import socket
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import REPO, Checker, rel, run  # noqa: E402

DOCKER = os.path.join(REPO, "deploy", "docker")
INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
                "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "MAINTAINER"}


def parse(path):
    """Returns [(line number, INSTRUCTION, arguments)]; raises on syntax errors."""
    out = []
    pending, start = "", 0
    with open(path) as f:
        lines = f.read().split("\n")
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((start, word.upper(), rest.strip()))
    if pending:
        raise ValueError(f"{rel(path)}: file ends inside a continued line")
    return out


def check_dockerfile(c, path, entrypoint, runtime_base_re):
    name = rel(path)
    try:
        instrs = parse(path)
    except ValueError as e:
        c.fail(str(e))
        return
    global_args, stages = {}, []
    for line, word, rest in instrs:
        c.check(word in INSTRUCTIONS, f"{name}:{line}: unknown instruction {word}")
        if word == "ARG" and not stages:
            key, _, default = rest.partition("=")
            global_args[key] = default
        if word == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?$", rest, re.I)
            if not c.check(m is not None, f"{name}:{line}: FROM syntax"):
                continue
            image = m.group(1)
            for var in re.findall(r"\$\{?(\w+)\}?", image):
                c.check(var in global_args, f"{name}:{line}: FROM uses undeclared ARG {var}")
            resolved = image
            for _ in range(3):  # defaults may refer to earlier args
                resolved = re.sub(r"\$\{?(\w+)\}?", lambda mm: global_args.get(mm.group(1), ""), resolved)
            stages.append({"name": m.group(2), "image": resolved, "instrs": []})
        elif stages:
            stages[-1]["instrs"].append((line, word, rest))
    if not c.check(len(stages) >= 2, f"{name}: a build stage and a runtime stage"):
        return
    stage_names = {s["name"] for s in stages if s["name"]}
    for s in stages:
        for line, word, rest in s["instrs"]:
            if word not in ("COPY", "ADD"):
                continue
            args = rest.split()
            from_stage = next((a.split("=", 1)[1] for a in args if a.startswith("--from=")), None)
            paths = [a for a in args if not a.startswith("--")]
            if rest.startswith("["):
                paths = json.loads(rest)
            if not c.check(len(paths) >= 2, f"{name}:{line}: {word} needs a source and a destination"):
                continue
            if from_stage:
                c.check(from_stage in stage_names, f"{name}:{line}: --from={from_stage} is no earlier stage")
                continue
            for src in paths[:-1]:
                c.check(bool(glob.glob(os.path.join(REPO, src))),
                        f"{name}:{line}: {word} source {src} not in the build context (repo root)")
    build_runs = " ".join(rest for _, w, rest in stages[0]["instrs"] if w == "RUN")
    c.check("scripts/install-deps.sh" in build_runs, f"{name}: build stage runs scripts/install-deps.sh")
    c.check("scripts/build.sh" in build_runs, f"{name}: build stage runs scripts/build.sh")
    c.check("deploy/docker/stage-runtime.sh" in build_runs, f"{name}: build stage stages the runtime")
    runtime = stages[-1]
    c.check(re.match(runtime_base_re, runtime["image"]) is not None,
            f"{name}: runtime base {runtime['image']} should match {runtime_base_re}")
    words = {w: rest for _, w, rest in runtime["instrs"]}
    c.check(json.loads(words.get("ENTRYPOINT", "[]")) == [entrypoint], f"{name}: ENTRYPOINT [{entrypoint}]")
    c.check(words.get("USER", "root") not in ("root", "0"), f"{name}: runs as a non-root USER")
    c.check(bool(words.get("EXPOSE")), f"{name}: EXPOSEs its ports")
    health = words.get("HEALTHCHECK", "")
    grpc_port = (words.get("EXPOSE") or "0").split()[0]
    cmd = json.loads(health.split("CMD", 1)[1]) if "CMD" in health else []
    c.check(cmd == ["/usr/local/bin/meshcast-healthcheck", grpc_port],
            f"{name}: HEALTHCHECK runs meshcast-healthcheck on the gRPC port {grpc_port} ({health})")
    c.check(any(w == "COPY" and "deploy/docker/healthcheck.sh" in r and "/usr/local/bin/meshcast-healthcheck" in r
                for _, w, r in runtime["instrs"]), f"{name}: the runtime stage installs healthcheck.sh")
    c.check(not any(w == "RUN" and "install-deps.sh" in r for _, w, r in runtime["instrs"]),
            f"{name}: the runtime stage must not install build dependencies")
    ignore = path + ".dockerignore"
    if c.check(os.path.exists(ignore), f"{name}: {rel(ignore)} keeps build trees out of the context"):
        c.check("build-*" in open(ignore).read().split(), f"{rel(ignore)}: excludes build-*")


def check_stage_runtime(c):
    script = os.path.join(DOCKER, "stage-runtime.sh")
    binary = shutil.which("sqlite3") or "/bin/ls"
    work = tempfile.mkdtemp(prefix="meshcast-stage-")
    try:
        build = os.path.join(work, "build", "sub")
        os.makedirs(build)
        shutil.copy(binary, os.path.join(build, "meshcast-fake"))
        dest = os.path.join(work, "out")
        r = run(["bash", script, os.path.join(work, "build"), dest, "meshcast-fake"], timeout=60)
        print(r.stdout + r.stderr, end="")
        c.check(r.returncode == 0, "stage-runtime.sh stages a binary")
        c.check(os.access(os.path.join(dest, "bin", "meshcast-fake"), os.X_OK), "staged binary is executable")
        pkgs = open(os.path.join(dest, "runtime-packages.txt")).read().split() \
            if os.path.exists(os.path.join(dest, "runtime-packages.txt")) else []
        c.check("libc6" in pkgs, f"runtime packages include libc6: {pkgs}")
        owners = run(["dpkg-query", "-S", os.path.realpath(binary)]).stdout
        if "sqlite3" in binary and "sqlite3" in owners:
            c.check("libsqlite3-0" in pkgs, f"sqlite3's libsqlite3-0 is listed: {pkgs}")
        r = run(["bash", script, os.path.join(work, "build"), dest, "meshcast-missing"], timeout=60)
        c.check(r.returncode != 0 and "not found" in r.stderr, "stage-runtime.sh fails on a missing binary")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_healthcheck_script(c):
    script = os.path.join(DOCKER, "healthcheck.sh")
    work = tempfile.mkdtemp(prefix="meshcast-health-")
    try:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        cmdline = os.path.join(work, "cmdline")

        def health(args, default="1"):
            with open(cmdline, "wb") as f:
                f.write(b"".join(a.encode() + b"\0" for a in args))
            env = dict(os.environ, MESHCAST_HEALTH_CMDLINE=cmdline)
            return run(["bash", script, default], timeout=20, env=env)

        r = health(["meshcast-worker", f"--listen=0.0.0.0:{port}", "--insecure"])
        c.check(r.returncode == 0, f"healthcheck: a listening --listen=0.0.0.0:{port} is healthy ({r.stderr.strip()})")
        r = health(["meshcast-controller", "--listen", f"127.0.0.1:{port}"])
        c.check(r.returncode == 0, f"healthcheck: `--listen ADDR` (two words) is understood ({r.stderr.strip()})")
        r = health(["meshcast-controller"], default=str(port))
        c.check(r.returncode == 0, "healthcheck: without --listen it checks the default port")
        listener.close()
        r = health(["meshcast-worker", f"--listen=127.0.0.1:{port}"])
        c.check(r.returncode != 0 and "nothing accepts" in r.stderr, "healthcheck: a closed port is unhealthy")
        r = health(["meshcast-worker", "--listen=127.0.0.1:0"])
        c.check(r.returncode != 0 and "no fixed port" in r.stderr, "healthcheck: port 0 cannot be checked")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    c = Checker()
    check_healthcheck_script(c)
    check_dockerfile(c, os.path.join(DOCKER, "Dockerfile.controller"), "meshcast-controller",
                     r"^debian:bookworm-slim$")
    check_dockerfile(c, os.path.join(DOCKER, "Dockerfile.worker"), "meshcast-worker",
                     r"^nvidia/cuda:13\.\d+\.\d+-runtime-ubuntu24\.04$")
    check_stage_runtime(c)
    c.finish()


if __name__ == "__main__":
    main()
