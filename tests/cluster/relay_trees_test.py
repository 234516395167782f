#!/usr/bin/env python3
"""Relay trees end to end: on a local cluster of 5 workers x 2 CPU devices
that the planner sees as hosts behind 1 Gbit/s NICs with a 300 us transfer
set-up, the meshcast plan of a broadcast from one device to the 8 devices
of 4 other hosts is one relay tree per remote host (CommGroup.parents, with
their own chunk size), and the job moves it through the real workers and
verifies every destination element. The other strategies' chains of the
same broadcast run beside it as a check.
"""

import cluster_lib as lib

SHAPE = [2048, 1024]  # int32: 8 MiB
SOURCE, DEST = "1x1@0", "4x2@1"


def reshard_args(strategy):
    return ["--shape", "x".join(map(str, SHAPE)), "--dtype", "int32",
            "--src-mesh", SOURCE, "--src-spec", "RR", "--dst-mesh", DEST,
            "--dst-spec", "RR", "--strategy", strategy]


def submit_args(strategy):
    return (["reshard"] + reshard_args(strategy) +
            ["--name", "tree-" + strategy.replace("_", "-")])


def check_tree_plan(cluster):
    plan = cluster.ctl("plan", "--live", *reshard_args("meshcast"),
                       "--output", "json")
    lib.check(plan.code == 0, "plan --live: %r" % plan)
    plan = plan.json()
    transfers = plan["transfers"]
    lib.check(len(transfers) == 4,
              "expected one tree per remote host, got %d transfers: %s" %
              (len(transfers), transfers))
    hosts_fed = set()
    for t in transfers:
        lib.check(t["src_device"] == 0 and len(t["dst_devices"]) == 8 and
                  len(t.get("parents", [])) == 8,
                  "not a tree over the 8 receivers: %s" % t)
        lib.check(0 < t.get("chunk_bytes", 0) < (1 << 20),
                  "a tree without its own chunk size: %s" % t)
        # Position 1 (the forwarder) hangs from the sender; every other
        # receiver from a receiver.
        lib.check(t["parents"][0] == 0 and
                  all(p >= 1 for p in t["parents"][1:]),
                  "parents %s" % t["parents"])
        hosts_fed.add(t["dst_devices"][0] // 2)
    lib.check(hosts_fed == {1, 2, 3, 4},
              "forwarders on hosts %s" % sorted(hosts_fed))
    ratio = plan["predicted_seconds"] / plan["lower_bound_seconds"]
    lib.check(ratio < 1.05, "trees predicted at %.3fx the bound" % ratio)
    lib.log("plan: 4 relay trees, %.3fx the bound" % ratio)


def run():
    up_args = ["--inter-gbps", "1",
               "--controller-flags", "--transfer-setup-us=300"]
    with lib.LocalCluster(workers=5, devices=2, up_args=up_args) as cluster:
        check_tree_plan(cluster)
        expected = lib.expected_elements(SHAPE, [4, 2], "RR")
        for strategy in ("meshcast", "broadcast", "send_recv"):
            job = cluster.submit_wait(submit_args(strategy))
            lib.check_job_succeeded(job, expected, strategy)
            lib.check(job["plan"]["strategy"] == strategy,
                      "%s ran %s" % (strategy, job["plan"]["strategy"]))
        lib.log("trees and chains moved and verified %d elements each" %
                expected)


if __name__ == "__main__":
    lib.main(run, limit_seconds=80)
