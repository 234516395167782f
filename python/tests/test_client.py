"""meshcast.Client against a real local cluster: `meshctl up` (TLS and an
admin token, its defaults) with 2 workers x 2 CPU devices, reached with
Client.local(dir). Every call of the client, and jobs checked against what
the controller itself reports: a reshard from a DTensor layout to another,
verified element by element by the workers; a collective with its busbw;
a bad spec refused naming the field; a cancelled job.

Needs MESHCTL, MESHCAST_CONTROLLER_BIN and MESHCAST_WORKER_BIN (the
build's binaries); skipped without them."""

import os
import shutil
import subprocess
import tempfile
import unittest

import meshcast
from meshcast.v1 import job_pb2

MESHCTL = os.environ.get("MESHCTL")
CONTROLLER = os.environ.get("MESHCAST_CONTROLLER_BIN")
WORKER = os.environ.get("MESHCAST_WORKER_BIN")


@unittest.skipUnless(MESHCTL and CONTROLLER and WORKER,
                     "MESHCTL, MESHCAST_CONTROLLER_BIN, MESHCAST_WORKER_BIN "
                     "not set")
class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="meshcast-python-test-")
        bin_dir = os.path.join(cls.tmp, "bin")
        os.makedirs(bin_dir)
        os.symlink(CONTROLLER, os.path.join(bin_dir, "meshcast-controller"))
        os.symlink(WORKER, os.path.join(bin_dir, "meshcast-worker"))
        cls.dir = os.path.join(cls.tmp, "cluster")
        subprocess.run([MESHCTL, "up", "--dir", cls.dir, "--bin-dir", bin_dir,
                        "--workers", "2", "--devices-per-worker", "2",
                        "--output", "json"], check=True, timeout=60,
                       stdout=subprocess.DEVNULL)
        cls.client = meshcast.Client.local(cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        subprocess.run([MESHCTL, "down", "--dir", cls.dir], timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_cluster(self):
        cluster = self.client.cluster()
        self.assertEqual(cluster.topology.num_hosts, 2)
        self.assertEqual(cluster.topology.devices_per_host, 2)
        self.assertEqual(sorted(w.name for w in cluster.workers),
                         ["worker-0", "worker-1"])

    def test_reshard_from_dtensor_layouts(self):
        class Shard:
            def __init__(self, dim):
                self.dim = dim

        class Replicate:
            pass

        src = meshcast.dtensor_spec([Replicate(), Shard(0)], ndim=2)
        dst = meshcast.dtensor_spec([Shard(1), Replicate()], ndim=2)
        self.assertEqual((src, dst), ("S1,R", "R,S0"))
        spec = meshcast.reshard_spec(
            [64, 32], meshcast.mesh_of_shape([1, 2], [0, 1]), src,
            meshcast.mesh_of_shape([2, 1], [0, 2]), dst, name="py-reshard")
        plan = self.client.plan(spec)
        self.assertGreater(plan.plan.predicted_seconds, 0)
        self.assertTrue(any(row.chosen for row in plan.rows))
        submitted = self.client.submit(spec)
        self.assertEqual(submitted.spec.name, "py-reshard")
        events = list(self.client.watch(submitted.id, timeout=60))
        self.assertIn(events[-1].state, meshcast.FINAL_STATES)
        job = self.client.wait(submitted.id, timeout=60)
        self.assertEqual(job.state, job_pb2.JOB_STATE_SUCCEEDED, job.message)
        self.assertEqual(job.result.mismatches, 0)
        # Each destination device holds its half of the columns, once.
        self.assertEqual(job.result.elements_verified, 64 * 32)
        self.assertIn(submitted.id, [j.id for j in self.client.list()])
        self.assertEqual(self.client.get(submitted.id).state,
                         job_pb2.JOB_STATE_SUCCEEDED)

    def test_collective_reports_busbw(self):
        job = self.client.run({"name": "py-allreduce", "collective": {
            "op": "all_reduce", "mesh": {"shape": [2, 2]}, "size": "1MiB"}},
            timeout=60)
        self.assertEqual(job.state, job_pb2.JOB_STATE_SUCCEEDED, job.message)
        self.assertGreater(job.result.metrics["busbw_bytes_per_second"], 0)

    def test_a_bad_spec_names_the_field(self):
        with self.assertRaises(meshcast.Error) as raised:
            self.client.submit({"collective": {
                "op": "all_sum", "mesh": {"shape": [2, 2]}, "size": "1MiB"}})
        self.assertEqual(raised.exception.code, "INVALID_ARGUMENT")
        self.assertIn("collective.op", raised.exception.message)
        with self.assertRaisesRegex(ValueError, "spec:"):
            self.client.submit({"no_such_kind": {}})
        with self.assertRaises(meshcast.Error) as raised:
            self.client.get("job-999999")
        self.assertEqual(raised.exception.code, "NOT_FOUND")

    def test_cancel(self):
        # Long enough to be caught queued or running (a second or more),
        # and small enough to run: the worker's memory check counts the
        # staging of every iteration that could run at once (16 MiB each
        # here); 64 MiB x 200 needed 50 GiB, so the job failed at once
        # unless the cancel got there first.
        job = self.client.submit({"collective": {
            "op": "all_reduce", "mesh": {"shape": [2, 2]}, "size": "4MiB",
            "iterations": 250}})
        try:
            self.client.cancel(job.id)
        except meshcast.Error as e:
            ended = self.client.get(job.id)
            self.fail("cancel: %s; the job had ended %s: %s" % (
                e, job_pb2.JobState.Name(ended.state), ended.message))
        final = self.client.wait(job.id, timeout=60)
        self.assertEqual(final.state, job_pb2.JOB_STATE_CANCELLED,
                         final.message)


if __name__ == "__main__":
    unittest.main()
