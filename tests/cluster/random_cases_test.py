#!/usr/bin/env python3
"""(b) Random resharding cases and (c) concurrent jobs, on a local cluster of
4 workers x 4 CPU devices.

(b) Seeded random problems (MESHCAST_TEST_SEED, default fixed; printed):
tensor rank 1-3 with uneven extents (including extents smaller than the
number of shards, so some tiles are empty), every dtype, 1-D and 2-D meshes
placed by the controller (on disjoint hosts or overlapping with
--allow-overlap) or pinned to explicit device lists (possibly sharing
devices), specs with R / S0 / S1 / S01 / S10. Each problem runs with every
strategy and must SUCCEED with 0 mismatches and exactly the expected number
of verified elements.

(c) Two jobs on disjoint devices run at the same time (their running
intervals overlap) while a third one that needs the first one's devices
waits in the queue and starts only after it ended. `meshctl watch` follows
one of them to the end.
"""

import json
import math
import os
import random

import cluster_lib as lib

HOSTS, DEVICES = 4, 4


def random_spec(rng, rank, mesh_rank):
    dims = [[] for _ in range(rank)]
    for axis in range(mesh_rank):
        if rng.random() < 0.7:
            dims[rng.randrange(rank)].append(axis)
    for d in dims:
        rng.shuffle(d)  # S10 as well as S01
    return "".join("S" + "".join(map(str, d)) if d else "R" for d in dims)


def random_case(rng):
    rank = rng.randint(1, 3)
    while True:
        shape = [rng.choice([1, 2, 3, 5, 7, 11, 13, 17, 24, 31, 37, 64, 100,
                             129]) for _ in range(rank)]
        if math.prod(shape) <= (1 << 20):
            break
    dtype = rng.choice(sorted(lib.DTYPE_BYTES))
    kind = rng.choice(["disjoint", "overlap", "devices"])
    extra = []
    if kind == "devices":
        meshes = []
        for side in ("src", "dst"):
            count = rng.choice([1, 2, 3, 4, 6, 8])
            devices = rng.sample(range(HOSTS * DEVICES), count)
            rows = rng.choice([r for r in (1, 2, 3, 4) if count % r == 0])
            mesh_shape = [rows, count // rows]
            extra += ["--%s-devices" % side, ",".join(map(str, devices)),
                      "--%s-shape" % side, "x".join(map(str, mesh_shape))]
            meshes.append((None, mesh_shape))
    else:
        if kind == "disjoint":
            src_hosts = rng.randint(1, HOSTS - 1)
            dst_hosts = rng.randint(1, HOSTS - src_hosts)
        else:
            src_hosts = rng.randint(1, HOSTS)
            dst_hosts = rng.randint(1, HOSTS)
            extra.append("--allow-overlap")
        meshes = []
        for hosts in (src_hosts, dst_hosts):
            per_host = rng.randint(1, DEVICES)
            if hosts == 1 and rng.random() < 0.5:
                meshes.append((str(per_host), [per_host]))  # a 1-D mesh
            else:
                meshes.append(("%dx%d" % (hosts, per_host),
                               [hosts, per_host]))
    (src_text, src_shape), (dst_text, dst_shape) = meshes
    src_spec = random_spec(rng, rank, len(src_shape))
    dst_spec = random_spec(rng, rank, len(dst_shape))
    args = ["reshard", "--shape", "x".join(map(str, shape)), "--dtype", dtype,
            "--src-spec", src_spec, "--dst-spec", dst_spec] + extra
    if src_text:
        args += ["--src-mesh", src_text]
    if dst_text:
        args += ["--dst-mesh", dst_text]
    expected = lib.expected_elements(shape, dst_shape, dst_spec)
    description = "%s %s %s %s -> %s %s (%s)" % (
        "x".join(map(str, shape)), dtype, src_text or src_shape, src_spec,
        dst_text or dst_shape, dst_spec, kind)
    return args, expected, description


def random_cases(cluster, seed):
    rng = random.Random(seed)
    tasks = []
    for i in range(10):
        args, expected, description = random_case(rng)
        lib.log("case %d: %s, %d destination elements" %
                (i, description, expected))
        for strategy in lib.STRATEGIES:
            def task(args=args + ["--strategy", strategy], expected=expected,
                     what="seed %d case %d %s: %s" % (seed, i, strategy,
                                                      description)):
                job = cluster.submit_wait(args)
                # Overlapping layouts may already hold everything.
                lib.check_job_succeeded(job, expected, what,
                                        moves_bytes=False)
            tasks.append(task)
    lib.run_parallel(tasks, parallelism=3)
    lib.log("%d random jobs succeeded and verified" % len(tasks))


def concurrent_jobs(cluster):
    # 64 MiB each, pinned: job A on hosts 0 -> 1, job B on hosts 2 -> 3, job
    # C on job A's devices again.
    big = ["reshard", "--shape", "16x1024x1024", "--dtype", "float32",
           "--src-spec", "S1RR", "--dst-spec", "RS1R"]
    a = cluster.submit(big + ["--src-mesh", "1x4@0", "--dst-mesh", "1x4@1",
                              "--name", "A"])
    b = cluster.submit(big + ["--src-mesh", "1x4@2", "--dst-mesh", "1x4@3",
                              "--name", "B"])
    c = cluster.submit(big + ["--src-mesh", "1x4@0", "--dst-mesh", "1x4@1",
                              "--name", "C"])
    # C needs A's devices: it waits in the queue while A plans or runs.
    c_now = cluster.get(c)
    a_now = cluster.get(a)
    if a_now["state"] not in lib.FINAL_STATES:
        lib.check(c_now["state"] == "QUEUED",
                  "job C is %s while A is %s" % (c_now["state"],
                                                 a_now["state"]))
    # watch follows C until it ends.
    watch = cluster.ctl("watch", c, "--output", "json", timeout=120)
    lib.check(watch.code == 0, "watch %s: %r" % (c, watch))
    events = [json.loads(line) for line in watch.out.splitlines()]
    lib.check(events[-1]["state"] == "SUCCEEDED",
              "watch ended with %s" % events[-1])
    # A watch that starts before C has finished sees it run; on a loaded
    # machine meshctl may start only after C's few hundred milliseconds,
    # and then there is only the final state to see.
    if events[0].get("state") not in lib.FINAL_STATES:
        lib.check(any(e.get("state") == "RUNNING" for e in events),
                  "watch never saw RUNNING: %s" % events)
    jobs = {name: cluster.wait_for(job_id, lib.FINAL_STATES, timeout=120)
            for name, job_id in (("A", a), ("B", b), ("C", c))}
    expected = lib.expected_elements([16, 1024, 1024], [1, 4], "RS1R")
    for name, job in jobs.items():
        lib.check_job_succeeded(job, expected, "concurrent job " + name)
    A, B, C = jobs["A"], jobs["B"], jobs["C"]
    lib.log("A ran %.3f..%.3f, B %.3f..%.3f, C %.3f..%.3f" % (
        A["started_unix"], A["finished_unix"], B["started_unix"],
        B["finished_unix"], C["started_unix"], C["finished_unix"]))
    # Disjoint devices: B does not wait for A. On a loaded machine meshctl
    # may submit B only when A is nearly done (A takes a few hundred
    # milliseconds), so the overlap is required when B came in the first
    # half of A's run.
    if B["created_unix"] < (A["started_unix"] + A["finished_unix"]) / 2:
        lib.check(max(A["started_unix"], B["started_unix"]) <
                  min(A["finished_unix"], B["finished_unix"]),
                  "jobs A and B on disjoint devices did not run at the same "
                  "time")
    lib.check(C["started_unix"] >= A["finished_unix"],
              "job C started before job A, which holds its devices, ended")

    # Human-readable watch of a finished job: its final line, exit 0.
    text = cluster.ctl("watch", a)
    lib.check(text.code == 0 and "SUCCEEDED" in text.out,
              "watch of a finished job: %r" % text)


def run():
    seed = int(os.environ.get("MESHCAST_TEST_SEED", "20240611"))
    lib.log("seed", seed, "(set MESHCAST_TEST_SEED to vary)")
    with lib.LocalCluster(workers=HOSTS, devices=DEVICES) as cluster:
        random_cases(cluster, seed)
        concurrent_jobs(cluster)


if __name__ == "__main__":
    lib.main(run, limit_seconds=170)
