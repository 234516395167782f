#!/usr/bin/env python3
"""The daemons accept the command lines the Helm chart renders, and a worker
started that way registers with the controller (TLS on and off).

Renders the chart with one worker node (`worker-a`), takes the controller's
and the worker's args, and runs the real binaries with them on 127.0.0.1:
$(POD_IP) becomes 127.0.0.1, $(NODE_NAME) worker-a, $(MESHCAST_CONTROLLER)
the controller's address; ports become 0 (free ports); the Secret mount
directories become temporary directories holding what the Secrets would
(tls.crt, tls.key, ca.crt from a throw-away CA made with openssl: the
controller's certificate CN meshcast-controller OU controller, the worker's
CN worker-a OU worker; the tokens file mode 0600, as the init container
installs it); --devices=cuda becomes cpu:2 (no GPU needed). Passes when
`meshctl cluster` (with the CA and an admin token, or --insecure) lists
worker-a as ready. Every process is stopped at the end; bounded in time.

  check_rendered_daemons.py CONTROLLER WORKER MESHCTL
"""

import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import REPO, Checker, find_tool, load_yaml_docs, run, skip, tools_status  # noqa: E402

CHART = os.path.join(REPO, "deploy", "helm", "meshcast")
NODE = "worker-a"


def openssl_ca(openssl, d):
    def sh(*args):
        r = run([openssl] + list(args), timeout=30, cwd=d)
        if r.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args)}: {r.stderr}")
    sh("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key")
    sh("req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=meshcast test CA", "-days", "1", "-out", "ca.crt")
    for name, ou, san in (("meshcast-controller", "controller", "DNS:meshcast-controller,DNS:localhost,IP:127.0.0.1"),
                          (NODE, "worker", f"DNS:{NODE},IP:127.0.0.1")):
        sh("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key")
        sh("req", "-new", "-key", f"{name}.key", "-subj", f"/OU={ou}/CN={name}", "-out", f"{name}.csr")
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n")
        sh("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
           "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.crt")


def secret_dir(d, ca_dir, name, component):
    """A directory laid out like the mounted kubernetes.io/tls Secret."""
    path = os.path.join(d, f"{component}-tls")
    os.makedirs(path, exist_ok=True)
    shutil.copy(os.path.join(ca_dir, f"{name}.crt"), os.path.join(path, "tls.crt"))
    shutil.copy(os.path.join(ca_dir, f"{name}.key"), os.path.join(path, "tls.key"))
    shutil.copy(os.path.join(ca_dir, "ca.crt"), os.path.join(path, "ca.crt"))
    return path


def localize(args, d, component, controller_address):
    out = []
    for a in args:
        a = a.replace("$(POD_IP)", "127.0.0.1").replace("$(NODE_NAME)", NODE)
        a = a.replace("$(MESHCAST_CONTROLLER)", controller_address or "")
        a = a.replace("/etc/meshcast/tls/", os.path.join(d, f"{component}-tls") + "/")
        a = a.replace("/etc/meshcast/tokens/", os.path.join(d, "tokens") + "/")
        a = re.sub(r"^--listen=(.*):\d+$", r"--listen=\1:0", a)
        a = re.sub(r"^--metrics-port=\d+$", "--metrics-port=0", a)
        a = re.sub(r"^--db=.*$", f"--db={os.path.join(d, 'controller.db')}", a)
        a = "--devices=cpu:2" if a.startswith("--devices=cuda") else a
        out.append(a)
    return out


def wait_for(pattern, path, proc, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        text = open(path).read() if os.path.exists(path) else ""
        m = re.search(pattern, text)
        if m:
            return m
        if proc.poll() is not None:
            return None
        time.sleep(0.1)
    return None


def scenario(c, label, helm, binaries, openssl, tls):
    controller_bin, worker_bin, meshctl = binaries
    values = ["--set", f"worker.nodes={{{NODE}}}"] + ([] if tls else ["--set", "tls.enabled=false"])
    r = run([helm, "template", "mc", CHART] + values, timeout=60)
    if not c.check(r.returncode == 0, f"{label}: helm template: {r.stderr.strip()}"):
        return
    objs = load_yaml_docs(r.stdout)
    ctrl = next(o for o in objs if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    work = next(o for o in objs if o["kind"] == "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    d = tempfile.mkdtemp(prefix=f"meshcast-rendered-{label}-")
    procs = []
    try:
        client = ["--insecure"]
        if tls:
            ca_dir = os.path.join(d, "ca")
            os.makedirs(ca_dir)
            openssl_ca(openssl, ca_dir)
            secret_dir(d, ca_dir, "meshcast-controller", "controller")
            secret_dir(d, ca_dir, NODE, "worker")
            os.makedirs(os.path.join(d, "tokens"))
            token = secrets.token_urlsafe(24)
            for path, text in ((os.path.join(d, "tokens", "tokens"), f"{token} admin admin\n"),
                               (os.path.join(d, "admin.token"), token + "\n")):
                with open(path, "w") as f:
                    f.write(text)
                os.chmod(path, 0o600)
            client = ["--tls_ca", os.path.join(ca_dir, "ca.crt"), "--token_file", os.path.join(d, "admin.token")]
        clog = os.path.join(d, "controller.log")
        cargs = localize(ctrl["args"], d, "controller", None)
        print(f"{label}: meshcast-controller {' '.join(cargs)}")
        with open(clog, "w") as log:
            procs.append(subprocess.Popen([controller_bin] + cargs, stdout=log, stderr=subprocess.STDOUT))
        m = wait_for(r"listening on port (\d+)", clog, procs[-1], 20)
        if not c.check(m is not None, f"{label}: controller started with the rendered args: {open(clog).read()[-800:]}"):
            return
        address = f"localhost:{m.group(1)}"
        wlog = os.path.join(d, "worker.log")
        wargs = localize(work["args"], d, "worker", address)
        print(f"{label}: meshcast-worker {' '.join(wargs)}")
        with open(wlog, "w") as log:
            procs.append(subprocess.Popen([worker_bin] + wargs, stdout=log, stderr=subprocess.STDOUT))
        registered = wait_for(rf"registered as {NODE}\b", wlog, procs[-1], 20)
        c.check(registered is not None, f"{label}: worker registered with the rendered args: {open(wlog).read()[-800:]}")
        r = run([meshctl, "cluster", "--controller", address] + client, timeout=20)
        print(r.stdout + r.stderr, end="")
        c.check(r.returncode == 0 and re.search(rf"\b{NODE}\b.*\bready\b", r.stdout) is not None,
                f"{label}: meshctl cluster lists {NODE} ready")
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        sys.exit(2)
    helm = find_tool("helm")
    if not helm:
        status, why = tools_status()
        skip(f"no helm ({status}: {why})")
    openssl = shutil.which("openssl")
    if not openssl:
        skip("no openssl command to make test certificates")
    c = Checker()
    scenario(c, "tls", helm, sys.argv[1:], openssl, tls=True)
    scenario(c, "insecure", helm, sys.argv[1:], openssl, tls=False)
    c.finish()


if __name__ == "__main__":
    main()
