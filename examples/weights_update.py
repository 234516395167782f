#!/usr/bin/env python3
"""A weights update as a reinforcement-learning loop does it after every
training step, from Python, on a local cluster: the training side holds a
model's weights in its layout (2 pipeline stages x tensor parallel 2 on
the 4 devices of host 0: each stage holds its own layers), meshcast moves
them into the inference replicas' own memory (2 replicas x tensor parallel
2 on host 1), and this script checks every element it receives against
what was sent.

    meshctl up --workers 2 --devices-per-worker 4 --dir /tmp/mc
    python3 examples/weights_update.py --dir /tmp/mc

Every tile lives in a file under /dev/shm that this process maps; it is
lent to the worker of its host (meshcast.buffers) under the name
"train/TENSOR" (sources) or "infer/TENSOR" (destinations) for its device.
Which box of which tensor each device holds comes from the plan meshcast
makes for the job (meshcast.buffers.tiles), so nothing here re-implements
its layouts. Exit code 0 when every tensor arrived intact on every replica.
"""

import argparse
import array
import os
import sys
import tempfile
import time

import meshcast
from meshcast import buffers
from meshcast.v1 import job_pb2

# name, shape, layout on its pipeline stage's row of the training mesh
# (2x2: a stage is tensor parallel over 2), layout on one replica (1x2),
# stage (None: from the "layers.N." in the name, layer 0 on stage 0, layer
# 1 on stage 1)
MODEL = [
    ("embed", [512, 64], "S0,R", "S0,R", 0),
    ("layers.0.wq", [64, 64], "R,S0", "R,S1", None),
    ("layers.0.wo", [64, 64], "S0,R", "S1,R", None),
    ("layers.1.w1", [64, 256], "R,S0", "R,S1", None),
    ("layers.1.w2", [256, 64], "S0,R", "R,R", None),
    ("final_norm", [64], "R", "R", 1),
]


def value(tensor, index):
    """The weight at a tensor's row-major element `index`: exact in
    float32, different for every tensor and element."""
    return float((tensor * 7919 + index) % 65536) * 0.25 - 4096.0


def elements(box, shape):
    """Row-major global indices of a box, in the box's row-major order."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    indices = [0]
    for d, (begin, end) in enumerate(box):
        indices = [i + c * strides[d] for i in indices
                   for c in range(begin, end)]
    return indices


def spec(src_devices, replica_devices):
    return {
        "name": "weights-update",
        # The workers checksum every tile and the controller compares the
        # replicas' with the training side's; this script also checks
        # every element it receives itself.
        "verify": "VERIFY_MODE_CHECKSUM",
        "reshard_model": {
            # Row s of the training mesh holds pipeline stage s.
            "src_mesh": {"shape": [2, len(src_devices) // 2],
                         "devices": src_devices},
            "src_pipeline": True,
            "dst_meshes": [{"shape": [1, len(d)], "devices": d}
                           for d in replica_devices],
            "tensors": [dict({"name": n, "shape": s,
                              "dtype": "DTYPE_FLOAT32",
                              "src_spec": {"text": a},
                              "dst_spec": {"text": b}},
                             **({} if stage is None else {"stage": stage}))
                        for n, s, a, b, stage in MODEL],
            "strategy": "meshcast",
            "src_buffer_prefix": "train/",
            "dst_buffer_prefix": "infer/",
        },
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=os.environ.get("MESHCAST_HOME",
                                                        ".meshcast"),
                        help="the local cluster's directory (meshctl up --dir)")
    parser.add_argument("--shm", default="/dev/shm",
                        help="where the tile files go (shared memory)")
    args = parser.parse_args()

    client = meshcast.Client.local(args.dir)
    cluster = client.cluster()
    per_host = cluster.topology.devices_per_host
    if cluster.topology.num_hosts < 2 or per_host < 4:
        sys.exit("needs 2 workers x 4 devices (meshctl up --workers 2 "
                 "--devices-per-worker 4); this cluster has %d x %d" %
                 (cluster.topology.num_hosts, per_host))
    worker_of_host = {w.host_index: w.name for w in cluster.workers}
    local = buffers.local_workers(args.dir)
    src_devices = list(range(4))                       # host 0: PP2 x TP2
    replicas = [[per_host, per_host + 1],              # host 1: 2 x TP2
                [per_host + 2, per_host + 3]]
    job_spec = spec(src_devices, replicas)

    # Where every tile goes: the plan of this very job (meshes are given
    # as devices, so the plan's tiles are the job's).
    plan = client.plan(job_spec).plan
    tiles = buffers.tiles(plan)
    workdir = tempfile.mkdtemp(prefix="meshcast-weights-", dir=args.shm)
    shared = []
    for n, tile in enumerate(tiles):
        name, shape = MODEL[tile["tensor"]][0], MODEL[tile["tensor"]][1]
        host, device = divmod(tile["device"], per_host)
        path = os.path.join(workdir, "%s.%s.%d" % (tile["role"], name,
                                                   tile["device"]))
        shm = buffers.SharedTile.create(path, tile["size"])
        if tile["role"] == "source":
            values = array.array("f", (value(tile["tensor"], i) for i in
                                       elements(tile["box"], shape)))
            shm.view()[:] = values.tobytes()
        prefix = "train/" if tile["role"] == "source" else "infer/"
        local[worker_of_host[host]].register(prefix + name, device, tile=shm)
        shared.append((tile, shm, local[worker_of_host[host]], prefix + name,
                       device))
    sent = sum(t["size"] for t in tiles if t["role"] == "source")
    print("lent %d tiles (%d source bytes) to %d workers" %
          (len(tiles), sent, len(local)))

    start = time.monotonic()
    job = client.run(job_spec, timeout=120)
    seconds = time.monotonic() - start
    if job.state != job_pb2.JOB_STATE_SUCCEEDED:
        sys.exit("job %s: %s" % (job.id, job.message))

    checked = bad = 0
    for tile, shm, worker, name, device in shared:
        if tile["role"] == "destination":
            got = array.array("f")
            got.frombytes(bytes(shm.view()))
            shape = MODEL[tile["tensor"]][1]
            for k, i in enumerate(elements(tile["box"], shape)):
                checked += 1
                if got[k] != value(tile["tensor"], i):
                    if bad < 5:
                        print("MISMATCH %s device %d element %d: %r != %r" %
                              (name, tile["device"], i, got[k],
                               value(tile["tensor"], i)))
                    bad += 1
        worker.unregister(name, device)
        shm.close()
    os.rmdir(workdir)
    received = sum(t["size"] for t in tiles if t["role"] == "destination")
    print("meshcast: %s" % job.message)
    print("moved %d tensors to %d replicas in %.3f s (job %s); checked "
          "%d elements (%d bytes) in the replicas' memory: %d mismatches" %
          (len(MODEL), len(replicas), seconds, job.id, checked, received,
           bad))
    return 1 if bad or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
