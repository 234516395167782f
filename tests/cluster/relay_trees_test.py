#!/usr/bin/env python3
"""Relay trees end to end: on a local cluster of 5 workers x 2 CPU devices
that the planner sees as hosts behind 1 Gbit/s NICs with a 300 us transfer
set-up, the meshcast plan of a broadcast of 8 MiB from one device to the 8
devices of 4 other hosts is one relay tree per remote host
(CommGroup.parents, with their own chunk size); on 7 workers x 1 device,
the same broadcast to 6 other hosts is two binary relay trees over the
hosts, each with half of it. The jobs move them through the real workers
and verify every destination element. The other strategies' chains of the
first broadcast run beside it as a check.
"""

import cluster_lib as lib

SHAPE = [2048, 1024]  # int32: 8 MiB
SOURCE, DEST = "1x1@0", "4x2@1"
BINARY_DEST = "6x1@1"  # on 7 workers x 1 device


def reshard_args(strategy, dest=DEST):
    return ["--shape", "x".join(map(str, SHAPE)), "--dtype", "int32",
            "--src-mesh", SOURCE, "--src-spec", "RR", "--dst-mesh", dest,
            "--dst-spec", "RR", "--strategy", strategy]


def submit_args(strategy, dest=DEST, name=None):
    return (["reshard"] + reshard_args(strategy, dest) +
            ["--name", name or "tree-" + strategy.replace("_", "-")])


def check_binary_tree_plan(cluster):
    """Two trees, each half of the tensor; every remote host entered once
    per tree, no device forwarding to more than two other hosts, and the
    hosts that forward in one tree are leaves of the other."""
    plan = cluster.ctl("plan", "--live", *reshard_args("meshcast", BINARY_DEST),
                       "--output", "json")
    lib.check(plan.code == 0, "plan --live: %r" % plan)
    plan = plan.json()
    transfers = plan["transfers"]
    lib.check(len(transfers) == 2,
              "expected two binary trees, got %d transfers" % len(transfers))
    forwarders = []
    for t in transfers:
        dsts, parents = t["dst_devices"], t.get("parents", [])
        lib.check(t["src_device"] == 0 and len(dsts) == 6 and
                  len(parents) == 6, "not a tree over the 6 receivers: %s" % t)
        lib.check(t["bytes"] == (4 << 20), "not half of it: %s" % t)
        children, entered = {}, {}
        for k, parent in enumerate(parents):
            frm = 0 if parent == 0 else dsts[parent - 1]
            if frm != dsts[k]:  # one device per host: every hop crosses
                entered[dsts[k]] = entered.get(dsts[k], 0) + 1
                if parent > 0:
                    children[frm] = children.get(frm, 0) + 1
        lib.check(entered == {h: 1 for h in range(1, 7)},
                  "hosts entered %s times" % entered)
        lib.check(all(c <= 2 for c in children.values()),
                  "a device forwards to %s hosts" % children)
        forwarders.append(set(children))
    lib.check(not (forwarders[0] & forwarders[1]),
              "hosts forward in both trees: %s" % forwarders)
    ratio = plan["predicted_seconds"] / plan["lower_bound_seconds"]
    lib.log("plan: 2 binary relay trees, %.3fx the bound" % ratio)


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
    with lib.LocalCluster(workers=7, devices=1, up_args=up_args) as cluster:
        check_binary_tree_plan(cluster)
        expected = lib.expected_elements(SHAPE, [6, 1], "RR")
        job = cluster.submit_wait(submit_args("meshcast", BINARY_DEST,
                                              "binary-trees"))
        lib.check_job_succeeded(job, expected, "binary trees")
        lib.log("binary trees moved and verified %d elements" % expected)


if __name__ == "__main__":
    lib.main(run, limit_seconds=80)
