#!/usr/bin/env python3
"""Authentication and authorization on a real cluster under TLS and tokens
(docs/security.md): `meshctl up` turns both on by default, a normal job runs
end to end, and each attack is refused:

- a fake worker without a CA-signed certificate cannot register;
- a CA-signed worker cannot register or heartbeat under another worker's
  name (hijack), and a user's token cannot call worker RPCs;
- RunTask / AbortTask sent straight to a worker by anyone but the controller
  are refused (no client certificate: no handshake; a worker's certificate:
  PERMISSION_DENIED);
- a user cannot see, list or cancel another user's job (NOT_FOUND, as for a
  job that does not exist) nor call GetCluster, while the admin can;
- a missing or wrong token is UNAUTHENTICATED, plaintext does not connect;
- the daemons refuse to start without TLS flags or --insecure, and a tokens
  file readable by others.

The attacker is build/security/security_probe (one RPC with the credentials
given; python here has no gRPC module).
"""

import os
import subprocess
import tempfile

import cluster_lib as lib

PROBE = os.environ.get("MESHCAST_SECURITY_PROBE", "")

OK, NOT_FOUND, PERMISSION_DENIED, UNAVAILABLE, UNAUTHENTICATED = 0, 5, 7, 14, 16

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdefgh"
ADMIN = "admin-token-0123456789abcdef"

JOB = ["reshard", "--shape", "16x16x16", "--dtype", "int32",
       "--src-mesh", "1x2", "--src-spec", "S1RR",
       "--dst-mesh", "1x2", "--dst-spec", "RS1R"]


def write_private(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def seed_tokens(cluster_dir):
    """An admin and two users, in the files `up` keeps when present."""
    tls = os.path.join(cluster_dir, "tls")
    os.makedirs(tls, mode=0o700)
    write_private(os.path.join(tls, "admin.token"), ADMIN + "\n")
    write_private(os.path.join(tls, "tokens"),
                  "# test principals\n%s admin admin\n%s alice user\n"
                  "%s bob user\n" % (ADMIN, ALICE, BOB))
    write_private(os.path.join(tls, "alice.token"), ALICE + "\n")
    write_private(os.path.join(tls, "bob.token"), BOB + "\n")
    write_private(os.path.join(tls, "wrong.token"),
                  "wrong-token-0123456789abcdef\n")


class Probe:
    def __init__(self, cluster):
        self.tls = os.path.join(cluster.cluster_dir, "tls")
        self.controller = cluster.info["controller"]

    def file(self, name):
        return os.path.join(self.tls, name)

    def call(self, target, method, ca=True, cert=None, token=None, name="",
             job="", ca_file=None, server_name=""):
        args = [PROBE, "--target=" + target, "--method=" + method]
        if ca:
            args.append("--tls_ca=" + (ca_file or self.file("ca.crt")))
        if cert:
            args += ["--tls_cert=" + cert + ".crt", "--tls_key=" + cert + ".key"]
        if token:
            args.append("--token_file=" + self.file(token + ".token"))
        if name:
            args.append("--name=" + name)
        if job:
            args.append("--job=" + job)
        if server_name:
            args.append("--server_name=" + server_name)
        proc = subprocess.run(args, capture_output=True, text=True, timeout=30)
        lib.check(proc.returncode == 0 and proc.stdout.startswith("code="),
                  "probe %s failed: %r %r" % (method, proc.stdout, proc.stderr))
        code, _, message = proc.stdout.strip().partition(" ")
        return int(code[len("code="):]), message

    def expect(self, code, what, *args, **kwargs):
        got, message = self.call(*args, **kwargs)
        lib.check(got == code, "%s: gRPC code %d (%s), expected %d" %
                  (what, got, message, code))
        lib.log("refused as expected" if code != OK else "allowed", "-", what,
                "(code %d)" % got)
        return message


def end_to_end_job(cluster):
    job = cluster.submit_wait(JOB)
    lib.check(job["state"] == "SUCCEEDED", "job under TLS: %r" % job)
    lib.check(job.get("owner") == "admin",
              "the admin's job is owned by admin: %r" % job.get("owner"))
    lib.log("a verified job ran end to end under TLS + tokens")


def fake_and_hijacked_workers(cluster, probe):
    with tempfile.TemporaryDirectory() as rogue:
        subprocess.run([PROBE, "--rogue_dir=" + rogue, "--cn=worker-0"],
                       check=True, timeout=30)
        # A certificate of another CA: the TLS handshake fails.
        probe.expect(UNAVAILABLE, "fake worker with a self-made CA",
                     probe.controller, "RegisterWorker",
                     cert=os.path.join(rogue, "worker-0"), name="worker-0")
    probe.expect(UNAUTHENTICATED, "fake worker without a certificate",
                 probe.controller, "RegisterWorker", name="worker-9")
    probe.expect(PERMISSION_DENIED, "worker-0 registering as worker-1",
                 probe.controller, "RegisterWorker",
                 cert=probe.file("worker-0"), name="worker-1")
    probe.expect(PERMISSION_DENIED, "worker-0 heartbeating as worker-1",
                 probe.controller, "Heartbeat", cert=probe.file("worker-0"),
                 name="worker-1")
    probe.expect(PERMISSION_DENIED, "a user's token registering a worker",
                 probe.controller, "RegisterWorker", token="alice",
                 name="worker-7")
    probe.expect(PERMISSION_DENIED, "a worker calling a client RPC",
                 probe.controller, "ListJobs", cert=probe.file("worker-0"))
    # Its own name is fine (and changes nothing: same worker).
    probe.expect(OK, "worker-1 heartbeating as itself", probe.controller,
                 "Heartbeat", cert=probe.file("worker-1"), name="worker-1")
    names = sorted(w["name"] for w in cluster.cluster()["workers"])
    lib.check(names == ["worker-0", "worker-1"],
              "only the real workers are registered: %r" % names)


def direct_run_task(cluster, probe):
    workers = {w["name"]: w for w in cluster.cluster()["workers"]}
    address = workers["worker-0"]["address"]
    for method in ("RunTask", "AbortTask", "GetStatus"):
        # Without a client certificate the worker's TLS refuses the call.
        probe.expect(UNAVAILABLE, "%s without a client certificate" % method,
                     address, method, token="admin", server_name="worker-0")
        # Another worker's certificate is signed by the CA but is not the
        # controller's.
        probe.expect(PERMISSION_DENIED, "%s from worker-1's certificate" %
                     method, address, method, cert=probe.file("worker-1"),
                     server_name="worker-0")
    probe.expect(UNAVAILABLE, "RunTask in plaintext", address, "RunTask",
                 ca=False)


def tokens_and_ownership(cluster, probe):
    probe.expect(UNAUTHENTICATED, "no token", probe.controller, "ListJobs")
    probe.expect(UNAUTHENTICATED, "a wrong token", probe.controller,
                 "ListJobs", token="wrong")
    probe.expect(UNAVAILABLE, "plaintext client", probe.controller,
                 "ListJobs", ca=False)
    result = lib.meshctl("list", "--controller", probe.controller, "--tls_ca",
                         probe.file("ca.crt"), "--token_file",
                         probe.file("wrong.token"))
    lib.check(result.code != 0 and "bearer token" in result.err,
              "meshctl with a wrong token: %r" % result)

    def as_user(user, *args):
        return lib.meshctl(*args, "--controller", probe.controller,
                           "--tls_ca", probe.file("ca.crt"), "--token_file",
                           probe.file(user + ".token"))

    submitted = as_user("alice", "submit", *JOB, "--output", "json")
    lib.check(submitted.code == 0, "alice submits: %r" % submitted)
    job_id = submitted.json()["id"]
    mine = as_user("alice", "get", job_id, "--output", "json")
    lib.check(mine.code == 0 and mine.json().get("owner") == "alice",
              "alice sees her job: %r" % mine)
    # Bob: exactly what a job that does not exist gets.
    missing = as_user("bob", "get", "no-such-job")
    for args in (["get", job_id], ["cancel", job_id], ["watch", job_id]):
        result = as_user("bob", *args)
        lib.check(result.code == missing.code and "not found" in result.err,
                  "bob %s alice's job: %r" % (args[0], result))
    probe.expect(NOT_FOUND, "bob's GetJob of alice's job", probe.controller,
                 "GetJob", token="bob", job=job_id)
    probe.expect(NOT_FOUND, "bob's CancelJob of alice's job",
                 probe.controller, "CancelJob", token="bob", job=job_id)
    listed = as_user("bob", "list", "--output", "json")
    lib.check(listed.code == 0 and job_id not in listed.out,
              "bob's list hides alice's job: %r" % listed)
    probe.expect(PERMISSION_DENIED, "a user's GetCluster", probe.controller,
                 "GetCluster", token="bob")
    # The admin sees it and may cancel it (or finds it already finished).
    seen = cluster.get(job_id)
    lib.check(seen.get("owner") == "alice", "admin sees the owner: %r" % seen)
    cancel = cluster.ctl("cancel", job_id)
    lib.check(cancel.code == 0 or "not found" not in cancel.err,
              "admin cancels alice's job: %r" % cancel)
    final = cluster.wait_for(job_id, ("SUCCEEDED", "CANCELLED", "FAILED"))
    lib.check(final["state"] in ("SUCCEEDED", "CANCELLED"),
              "alice's job ended: %r" % final["state"])
    listed = as_user("alice", "list", "--output", "json")
    lib.check(listed.code == 0 and job_id in listed.out,
              "alice lists her job: %r" % listed)
    lib.log("users see only their own jobs; the admin sees every job")


def daemons_refuse_unsafe_starts(cluster, probe):
    with tempfile.TemporaryDirectory() as tmp:
        plain = subprocess.run(
            [lib.CONTROLLER_BIN, "--listen=127.0.0.1:0",
             "--db=" + os.path.join(tmp, "a.db")],
            capture_output=True, text=True, timeout=30)
        lib.check(plain.returncode == 2 and "--tls_cert" in plain.stderr and
                  "--insecure" in plain.stderr,
                  "controller without TLS or --insecure: %r" % (plain,))
        worker = subprocess.run(
            [lib.WORKER_BIN, "--controller=" + probe.controller,
             "--name=w9"], capture_output=True, text=True, timeout=30)
        lib.check(worker.returncode == 2 and "--tls_ca" in worker.stderr,
                  "worker without TLS or --insecure: %r" % (worker,))
        tokens = os.path.join(tmp, "tokens")
        with open(tokens, "w") as f:
            f.write(ADMIN + " admin admin\n")
        os.chmod(tokens, 0o644)
        open_tokens = subprocess.run(
            [lib.CONTROLLER_BIN, "--listen=127.0.0.1:0",
             "--db=" + os.path.join(tmp, "b.db"),
             "--tls_cert=" + probe.file("controller.crt"),
             "--tls_key=" + probe.file("controller.key"),
             "--tls_ca=" + probe.file("ca.crt"), "--tokens_file=" + tokens],
            capture_output=True, text=True, timeout=30)
        lib.check(open_tokens.returncode != 0 and
                  "chmod 600" in open_tokens.stderr,
                  "controller with a world-readable tokens file: %r" %
                  (open_tokens,))
    lib.log("daemons refuse plaintext without --insecure and open token files")


def test():
    if not PROBE or not os.access(PROBE, os.X_OK):
        raise lib.TestFailure("MESHCAST_SECURITY_PROBE is not set to the "
                              "security_probe binary: %r" % PROBE)
    with lib.LocalCluster(workers=2, devices=2,
                          prepare=seed_tokens) as cluster:
        security = cluster.info.get("security", {})
        lib.check(security.get("insecure") is False,
                  "meshctl up turns TLS on by default: %r" % security)
        probe = Probe(cluster)
        end_to_end_job(cluster)
        fake_and_hijacked_workers(cluster, probe)
        direct_run_task(cluster, probe)
        tokens_and_ownership(cluster, probe)
        daemons_refuse_unsafe_starts(cluster, probe)
        # Nothing above took a worker down or lost it.
        states = {w["name"]: w["state"] for w in cluster.cluster()["workers"]}
        lib.check(all(s in ("ready", "busy", "STATE_READY", "STATE_BUSY")
                      for s in states.values()),
                  "workers healthy at the end: %r" % states)


if __name__ == "__main__":
    lib.main(test, 170)
