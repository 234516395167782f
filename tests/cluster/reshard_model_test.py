#!/usr/bin/env python3
"""`reshard_model` jobs end to end: a small model's weights moved from a
tensor-parallel training mesh (1 x 2, host 0) to two inference replicas
(1 x 2 on hosts 1 and 2) of a local cluster of 3 workers x 2 CPU devices,
submitted as the YAML users write, with every strategy and auto.

Every job must SUCCEED with 0 mismatches, verify at least every element of
every tensor on every replica, and report the kind's figures; `meshctl
plan -f` must list the strategies (auto's pick marked); replicas of
different shapes must be refused at submit, naming the field. The same
model read from a safetensors file's header (tiny, written here) must move
and verify as the listed one does.
"""

import json
import os
import struct
import tempfile

import cluster_lib as lib

WORKERS, DEVICES = 3, 2
# name, shape, training layout, inference layout
TENSORS = [("embed", (512, 64), "S1,R", "S0,R"),
           ("wq", (64, 64), "R,S1", "R,S1"),
           ("wo", (64, 64), "S1,R", "R,R"),
           ("w1", (64, 256), "R,S1", "S1,R"),
           ("w2", (256, 64), "S1,R", "R,S1"),
           ("norm", (64,), "R", "R")]
REPLICAS = 2
METRICS = ["movbw_bytes_per_second", "lower_bound_ratio", "model_bytes",
           "replicas"]


def job_file(strategy, replica_meshes=("1x2", "1x2"), per_host=0):
    lines = ["name: weights-%s" % strategy, "verify: full", "reshard_model:",
             "  src_mesh: \"1x2\"",
             "  dst_meshes: [%s]" % ", ".join('"%s"' % m
                                              for m in replica_meshes),
             "  strategy: %s" % strategy]
    if per_host:
        lines.append("  max_transfers_per_host: %d" % per_host)
    lines.append("  tensors:")
    for name, shape, src, dst in TENSORS:
        lines.append("    - {name: %s, shape: \"%s\", dtype: float32, "
                     "src_spec: \"%s\", dst_spec: \"%s\"}" %
                     (name, "x".join(str(e) for e in shape), src, dst))
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        return f.name


def elements(shape):
    n = 1
    for e in shape:
        n *= e
    return n


def safetensors_job_file(folder):
    """TENSORS as a float32 safetensors file (header, then zeros) in
    `folder`, and a job file beside it taking the tensors from its header:
    one rule per 2-D tensor, the default for the norm."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _, _ in TENSORS:
        size = 4 * elements(shape)
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(offset))
    lines = ["name: weights-safetensors", "verify: full", "reshard_model:",
             "  src_mesh: \"1x2\"", "  dst_meshes: [\"1x2\", \"1x2\"]",
             "  safetensors:", "    path: model.safetensors", "    rules:"]
    for name, shape, src, dst in TENSORS:
        if len(shape) > 1:
            lines.append("      - {match: \"^%s$\", src_spec: \"%s\", "
                         "dst_spec: \"%s\"}" % (name, src, dst))
    lines.append("    default: {src_spec: \"R\", dst_spec: \"R\"}")
    path = os.path.join(folder, "weights.yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def most_steps_at_once(result):
    """The most steps one worker ran at once, by the steps' own start and
    end times as the workers measured them."""
    events = {}
    for step in result.get("steps", []):
        events.setdefault(step["worker"], []).extend(
            [(step["start_seconds"], 1), (step["end_seconds"], -1)])
    lib.check(events, "the result lists no steps")
    most = 0
    for worker_events in events.values():
        running = 0
        for _, change in sorted(worker_events):  # ends first at a tie
            running += change
            most = max(most, running)
    return most


def run_job(cluster, strategy, path=None, per_host=0):
    """Submits `path` (default: the listed TENSORS with `strategy`, at most
    `per_host` transfers per host at once when set) and checks the
    result."""
    listed = path is None
    path = job_file(strategy, per_host=per_host) if listed else path
    try:
        result = cluster.ctl("submit", "-f", path, "--wait", "--output",
                             "json", timeout=120)
    finally:
        if listed:
            os.unlink(path)
    job = result.json()
    lib.check(job.get("state") == "SUCCEEDED" and result.code == 0,
              "%s: state %s (exit %d): %s" % (strategy, job.get("state"),
                                              result.code, job.get("message")))
    res = job.get("result", {})
    lib.check(res.get("mismatches") == 0,
              "%s: %s mismatches" % (strategy, res.get("mismatches")))
    least = REPLICAS * sum(elements(shape) for _, shape, _, _ in TENSORS)
    lib.check(int(res.get("elements_verified", 0)) >= least,
              "%s: verified %s elements, fewer than %d" %
              (strategy, res.get("elements_verified"), least))
    metrics = res.get("metrics", {})
    for name in METRICS:
        lib.check(name in metrics, "%s: metric %s missing: %s" %
                  (strategy, name, sorted(metrics)))
    lib.check(metrics["replicas"] == REPLICAS and metrics["model_bytes"] ==
              4 * sum(elements(s) for _, s, _, _ in TENSORS),
              "%s: metrics %s" % (strategy, metrics))
    ran = job.get("plan", {}).get("strategy", "?")
    if strategy != "auto":
        lib.check(ran == strategy, "%s: ran %s" % (strategy, ran))
    most = most_steps_at_once(res)
    if per_host:
        lib.check(most <= per_host, "%s, %d per host: a worker ran %d steps "
                  "at once" % (strategy, per_host, most))
        strategy = "%s/%d per host" % (strategy, per_host)
    lib.log("%-16s ok: ran %-16s %.4f s, %d elements verified, at most %d "
            "steps at once on a worker" %
            (strategy if listed else "safetensors", ran,
             float(res.get("seconds", 0)),
             int(res.get("elements_verified", 0)), most))


def check_plan(cluster):
    path = job_file("auto")
    try:
        result = cluster.ctl("plan", "-f", path, "--live", "--output", "json")
    finally:
        os.unlink(path)
    lib.check(result.code == 0, "plan -f: %r" % (result,))
    rows = result.json().get("alternatives", [])
    chosen = [row for row in rows if row.get("chosen")]
    lib.check(len(rows) == 5 and len(chosen) == 1,
              "plan lists %s" % [(r.get("name"), r.get("chosen"))
                                 for r in rows])
    lib.log("plan: auto picks %s" % chosen[0].get("name"))


def check_refusal(cluster):
    path = job_file("auto", replica_meshes=("1x2", "2x1"))
    try:
        result = cluster.ctl("submit", "-f", path)
    finally:
        os.unlink(path)
    lib.check(result.code != 0 and "reshard_model.dst_meshes[1]" in
              result.out + result.err,
              "unlike replicas were not refused by name: %r" % (result,))


def run():
    with lib.LocalCluster(workers=WORKERS, devices=DEVICES) as cluster:
        check_plan(cluster)
        check_refusal(cluster)
        for strategy in ("send_recv", "local_allgather", "broadcast",
                         "broadcast_lb", "meshcast", "auto"):
            run_job(cluster, strategy)
        # Each host's transfers in one chain, then in two.
        for per_host in (1, 2):
            run_job(cluster, "meshcast", per_host=per_host)
        # The same model read from a safetensors header.
        with tempfile.TemporaryDirectory() as folder:
            run_job(cluster, "auto", safetensors_job_file(folder))
        lib.log("9 reshard_model jobs verified on %d workers x %d devices" %
                (WORKERS, DEVICES))


if __name__ == "__main__":
    lib.main(run, limit_seconds=170)
