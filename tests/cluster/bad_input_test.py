#!/usr/bin/env python3
"""(g) Bad input through the real meshctl against a live 2 x 2 cluster: each
case gives exactly one line on stderr naming the flag (or what is wrong),
nothing on stdout and the documented exit code (2 bad input, 3 controller
unreachable, 1 failure), and the controller keeps serving throughout.

Also the local-cluster bookkeeping: how meshctl finds the controller
(--dir, MESHCAST_HOME, MESHCAST_CONTROLLER), `up` refusing a directory
whose cluster runs, job files, the live dry-run plan, the human tables, and
the job history surviving `down` and a new `up` on the same directory.
"""

import os
import socket
import tempfile

import cluster_lib as lib


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expect_one_line(result, code, *needles, what=""):
    lines = result.err.splitlines()
    lib.check(result.code == code,
              "%s: exit %d, expected %d: %r" % (what, result.code, code,
                                                result))
    lib.check(len(lines) == 1, "%s: %d stderr lines: %r" %
              (what, len(lines), result))
    lib.check(result.out == "", "%s: stdout not empty: %r" % (what, result))
    for needle in needles:
        lib.check(needle in lines[0], "%s: %r not in %r" %
                  (what, needle, lines[0]))


BASE = {"--shape": "16x16x16", "--dtype": "int32", "--src-mesh": "1x2",
        "--src-spec": "S1RR", "--dst-mesh": "1x2", "--dst-spec": "RS1R"}


def submit_args(**changes):
    flags = dict(BASE)
    for key, value in changes.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            flags.pop(flag, None)
        else:
            flags[flag] = value
    args = ["submit", "reshard"]
    for flag, value in flags.items():
        args += [flag, value]
    return args


def bad_submissions(cluster):
    cases = [
        ("unknown spec token", submit_args(src_spec="S0XR"), 2,
         ["--src-spec", "unknown token 'X'"]),
        ("spec rank", submit_args(dst_spec="S1R"), 2,
         ["--dst-spec", "spec S1R has 2"]),
        ("spec axis beyond the mesh", submit_args(src_mesh="2", src_spec="RS1R"),
         2, ["--src-spec", "mesh axis 1"]),
        ("mesh with more devices per host than the cluster",
         submit_args(dst_mesh="1x4"), 2, ["--dst-mesh", "1x4"]),
        ("meshes needing more hosts than the cluster",
         submit_args(src_mesh="2x2"), 2, ["2x2", "hosts"]),
        ("pinned mesh outside the cluster", submit_args(dst_mesh="1x2@5"), 2,
         ["--dst-mesh", "1x2@5"]),
        ("device outside the cluster",
         submit_args(dst_mesh=None) + ["--dst-devices", "0,99",
                                       "--dst-shape", "1x2"], 2,
         ["--dst-devices", "99"]),
        ("unknown dtype", submit_args(dtype="int33"), 2,
         ["--dtype", "int33", "float32"]),
        ("unknown strategy", submit_args() + ["--strategy", "fastest"], 2,
         ["--strategy", "fastest", "meshcast"]),
        ("bad shape", submit_args(shape="16x0x16"), 2, ["--shape"]),
        # 16 TiB of int32: more than any worker reported (host memory).
        ("tensor larger than the workers' memory",
         submit_args(shape="65536x65536x1024"), 2,
         ["the job's tiles need", "which reported", "of memory"]),
        ("live plan of a tensor larger than the workers' memory",
         ["plan", "--live"] + submit_args(shape="65536x65536x1024")[2:], 2,
         ["the job's tiles need", "which reported", "of memory"]),
        ("missing spec", submit_args(dst_spec=None), 2,
         ["--dst-spec: required"]),
        ("unknown flag", submit_args() + ["--colour", "red"], 2,
         ["unknown flag --colour"]),
        ("unknown job kind", ["submit", "allreduce"], 2,
         ["unknown job kind 'allreduce'"]),
        ("unknown command", ["sumbit"], 2, ["unknown command 'sumbit'"]),
        ("unknown job id: get", ["get", "job-999999"], 2, ["job-999999"]),
        ("unknown job id: watch", ["watch", "job-999999"], 2, ["job-999999"]),
        ("unknown job id: cancel", ["cancel", "job-999999"], 2,
         ["job-999999"]),
        ("missing job id", ["get"], 2, ["missing job ID"]),
        ("bad output", ["list", "--output", "xml"], 2,
         ["--output", "table, wide, json, yaml"]),
        ("plan: offline flag with --live",
         ["plan", "--live", "--cluster", "5x4"] + submit_args()[2:], 2,
         ["--cluster: not used with --live"]),
    ]
    for what, args, code, needles in cases:
        expect_one_line(cluster.ctl(*args), code, *needles, what=what)
    lib.log("%d bad submissions rejected with one line" % len(cases))


def unreachable_and_addresses(cluster):
    dead = "127.0.0.1:%d" % closed_port()
    for args in (["list"], ["cluster"], ["get", "j"], ["watch", "j"],
                 ["cancel", "j"], submit_args(),
                 ["plan", "--live"] + submit_args()[2:]):
        result = lib.meshctl(*args, "--controller", dead,
                             "--connect-timeout", "1", timeout=20)
        expect_one_line(result, 3, "cannot reach the controller at " + dead,
                        what="unreachable " + args[0])
    expect_one_line(lib.meshctl("list", "--controller", "localhost"), 2,
                    "--controller", "host:port", what="malformed address")
    # The environment and the cluster directory find the controller.
    address = cluster.info["controller"]
    for env in (dict(cluster.client_env(), MESHCAST_CONTROLLER=address),
                {"MESHCAST_HOME": cluster.cluster_dir}):
        result = lib.meshctl("list", env=env)
        lib.check(result.code == 0, "list with %s: %r" % (env, result))
    # --dir beats a stale MESHCAST_CONTROLLER.
    result = lib.meshctl("list", "--dir", cluster.cluster_dir,
                         env={"MESHCAST_CONTROLLER": dead})
    lib.check(result.code == 0, "--dir over the environment: %r" % result)


def job_files(cluster):
    with tempfile.TemporaryDirectory() as tmp:
        good = os.path.join(tmp, "job.yaml")
        with open(good, "w") as f:
            f.write("name: from-yaml\n"
                    "reshard:\n"
                    "  shape: [16, 16, 16]\n"
                    "  dtype: bfloat16\n"
                    "  src_mesh: {shape: [1, 2], devices: [0, 1]}\n"
                    "  src_spec: S1RR\n"
                    "  dst_mesh: 1x2\n"
                    "  dst_spec: RRS1\n"
                    "  strategy: broadcast\n")
        job = cluster.submit_wait(["-f", good, "--strategy", "meshcast"])
        lib.check_job_succeeded(
            job, lib.expected_elements([16, 16, 16], [1, 2], "RRS1"),
            "job from a YAML file")
        lib.check(job["name"] == "from-yaml" and
                  job["plan"]["strategy"] == "meshcast" and
                  job["plan"]["src_devices"] == [0, 1],
                  "job file values / flag override: %s" % job)
        as_json = os.path.join(tmp, "job.json")
        with open(as_json, "w") as f:
            f.write('{"reshard": {"shape": "16x16x16", "dtype": "int8", '
                    '"src_mesh": "1x2", "src_spec": "S1RR", '
                    '"dst_mesh": "1x2", "dst_spec": "RS1R"}}')
        job = cluster.submit_wait(["-f", as_json])
        lib.check_job_succeeded(
            job, lib.expected_elements([16, 16, 16], [1, 2], "RS1R"),
            "job from a JSON file")
        bad = os.path.join(tmp, "bad.yaml")
        with open(bad, "w") as f:
            f.write("reshard:\n  shape: 4x4\n  src_mesh: 1x2\n  sharding: S0\n")
        expect_one_line(cluster.ctl("submit", "-f", bad), 2,
                        "reshard.sharding: unknown key", what="bad job file")
        expect_one_line(cluster.ctl("submit", "-f", tmp + "/missing.yaml"), 2,
                        "cannot read job file", what="missing job file")


def views(cluster):
    plan = cluster.ctl("plan", "--live", *submit_args()[2:], "--output",
                       "json")
    lib.check(plan.code == 0, "plan --live: %r" % plan)
    plan = plan.json()
    lib.check(len(plan["strategies"]) == 5 and plan["transfers"] and
              plan["topology"]["num_hosts"] == 2,
              "plan --live JSON: %s" % plan)
    table = cluster.ctl("plan", "--live", *submit_args()[2:])
    lib.check(table.code == 0 and "live dry run" in table.out and
              "* " in table.out, "plan --live table: %r" % table)
    text = cluster.ctl("cluster").out
    lib.check("2 (2 ready, 0 busy, 0 lost)" in text and "worker-1" in text,
              "cluster table: %r" % text)
    # Each worker measured its host at start; the controller plans with
    # the slowest one's figures (no --host-copy-gbps given, device rates
    # auto).
    info = cluster.ctl("cluster", "--output", "json").json()
    copies = [w.get("probed_host_copy_bytes_per_second", 0)
              for w in info["workers"]]
    flops = [w.get("probed_device_flops", 0) for w in info["workers"]]
    lib.check(all(c > 1e8 for c in copies) and all(f > 1e7 for f in flops),
              "probed rates: copy %s, flops %s" % (copies, flops))
    topology = info["topology"]
    lib.check(topology.get("host_copy_bandwidth_bytes_per_second") ==
              min(copies) and
              topology.get("device_flops") == min(flops),
              "topology %s does not take the slowest probe (copy %s, flops "
              "%s)" % (topology, copies, flops))
    wide = cluster.ctl("cluster", "--output", "wide").out
    lib.check("HOST COPY" in wide and "GFLOP/s" in wide,
              "cluster -o wide: %r" % wide)
    listing = cluster.ctl("list").out
    lib.check(listing.startswith("ID") and "SUCCEEDED" in listing,
              "list table: %r" % listing)
    first = cluster.ctl("list", "--output", "json").json()["jobs"][-1]["id"]
    detail = cluster.ctl("get", first).out
    lib.check("state:      SUCCEEDED" in detail and "verified" in detail,
              "get: %r" % detail)


def up_down_history(cluster):
    # A second `up` on a directory whose cluster runs is refused.
    result = lib.meshctl("up", "--dir", cluster.cluster_dir, "--bin-dir",
                         cluster.bin_dir, "--workers", "1")
    expect_one_line(result, 1, "already running", what="second up")
    jobs = cluster.ctl("list", "--output", "json").json()["jobs"]
    down = cluster.ctl("down")
    lib.check(down.code == 0 and "stopped" in down.out, "down: %r" % down)
    lib.check(not os.path.exists(os.path.join(cluster.cluster_dir,
                                              "cluster.json")),
              "cluster.json left behind")
    for p in cluster.info["processes"]:
        lib.check(not lib.process_running(p["pid"]),
                  "%s still runs after down" % p["name"])
    expect_one_line(cluster.ctl("down"), 1, "no local cluster",
                    what="down twice")
    # Up again on the same directory: the history is there.
    result = lib.meshctl("up", "--dir", cluster.cluster_dir, "--bin-dir",
                         cluster.bin_dir, "--workers", "2",
                         "--devices-per-worker", "2")
    lib.check(result.code == 0 and "export MESHCAST_CONTROLLER=" in result.out,
              "second up: %r" % result)
    cluster.reload()
    again = cluster.ctl("list", "--output", "json").json()["jobs"]
    lib.check([j["id"] for j in again] == [j["id"] for j in jobs],
              "history after down/up: %s vs %s" % (again, jobs))


def run():
    with lib.LocalCluster(workers=2, devices=2) as cluster:
        job = cluster.submit_wait(submit_args()[1:])
        lib.check_job_succeeded(
            job, lib.expected_elements([16, 16, 16], [1, 2], "RS1R"),
            "first job")
        bad_submissions(cluster)
        unreachable_and_addresses(cluster)
        job_files(cluster)
        views(cluster)
        # Every daemon kept serving through all of it.
        cluster.check_alive()
        job = cluster.submit_wait(submit_args()[1:])
        lib.check_job_succeeded(
            job, lib.expected_elements([16, 16, 16], [1, 2], "RS1R"),
            "job after the bad input")
        up_down_history(cluster)


if __name__ == "__main__":
    lib.main(run, limit_seconds=110)
