#!/usr/bin/env python3
"""`collective` jobs end to end: every collective op through
`meshctl submit collective --wait` on a local cluster of 4 workers x 2 CPU
devices, on a mesh inside one host pair and on one spanning all four
workers, in float32 and int32. (`tp_overlap` jobs, a GEMM feeding a
collective, have their own test: tp_overlap_test.py.)

Every job must SUCCEED with 0 mismatches and verify exactly the destination
elements computed here from the op's definition (nccl-tests sizes, element
counts rounded down to a multiple of the ranks where nccl-tests rounds), and
report algbw and busbw with busbw = algbw x nccl-tests' factor.
"""

import math

import cluster_lib as lib

OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]


def expected_destination_elements(op, ranks, size_bytes, dtype):
    """Elements the destination buffers hold, summed over ranks."""
    count = size_bytes // lib.DTYPE_BYTES[dtype]
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        count -= count % ranks
    return {
        "all_reduce": ranks * count,       # the whole output on every rank
        "all_gather": ranks * count,       # the whole tensor on every rank
        "reduce_scatter": count,           # one chunk per rank
        "all_to_all": ranks * count,       # a full receive buffer per rank
        "broadcast": (ranks - 1) * count,  # every rank but the root
    }[op]


def bus_factor(op, ranks):
    if op == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    if op == "broadcast":
        return 1.0
    return (ranks - 1) / ranks


def check_metrics(job, op, ranks, what):
    metrics = job.get("result", {}).get("metrics", {})
    for name in ("algbw_bytes_per_second", "busbw_bytes_per_second",
                 "busbw_bound_bytes_per_second"):
        lib.check(metrics.get(name, 0) > 0, "%s: metric %s missing or 0: %s"
                  % (what, name, metrics))
    lib.check(math.isclose(metrics["busbw_bytes_per_second"],
                           metrics["algbw_bytes_per_second"] *
                           bus_factor(op, ranks), rel_tol=1e-9),
              "%s: busbw %s is not algbw x factor" % (what, metrics))


def run_collectives(cluster):
    # (mesh, ranks): 1x2 stays in one worker, 4x2 spans all four.
    meshes = [("1x2", 2), ("2x2", 4), ("4x2", 8)]
    tasks = []
    for op in OPS:
        for mesh, ranks in meshes:
            for dtype, size in (("float32", 1 << 20), ("int32", 1000 * 4 + 12)):
                args = ["collective", "--op", op, "--mesh", mesh,
                        "--bytes", str(size), "--dtype", dtype,
                        "--iterations", "2",
                        "--name", "%s-%s-%s" % (op, mesh, dtype)]

                def task(args=args, op=op, ranks=ranks, size=size, dtype=dtype,
                         what="%s %s %s %dB" % (op, mesh, dtype, size)):
                    job = cluster.submit_wait(args)
                    expected = expected_destination_elements(op, ranks, size,
                                                             dtype)
                    lib.check_job_succeeded(job, expected, what)
                    check_metrics(job, op, ranks, what)
                    return job
                tasks.append(task)
    jobs = lib.run_parallel(tasks, parallelism=3)
    lib.log("%d collective jobs succeeded and verified" % len(jobs))


def run():
    with lib.LocalCluster(workers=4, devices=2) as cluster:
        run_collectives(cluster)


if __name__ == "__main__":
    lib.main(run, limit_seconds=230)
