"""examples/weights_update.py on a real local cluster of 2 workers x 4 CPU
devices: a model's weights, written by the example into its own shared
memory in a training layout, move into the inference replicas' buffers,
which the example checks element by element (exit code 0 only when every
element of every tensor arrived on every replica). Also the user-buffer
calls themselves: a worker lists what is lent, refuses a file that is too
short, and refuses the calls over TCP.

Needs MESHCTL, MESHCAST_CONTROLLER_BIN and MESHCAST_WORKER_BIN; skipped
without them."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import meshcast
from meshcast import buffers
from meshcast.v1 import job_pb2

MESHCTL = os.environ.get("MESHCTL")
CONTROLLER = os.environ.get("MESHCAST_CONTROLLER_BIN")
WORKER = os.environ.get("MESHCAST_WORKER_BIN")
EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                       "..", "examples", "weights_update.py")


@unittest.skipUnless(MESHCTL and CONTROLLER and WORKER,
                     "MESHCTL, MESHCAST_CONTROLLER_BIN, MESHCAST_WORKER_BIN "
                     "not set")
class WeightsUpdateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="mc-weights-")
        bin_dir = os.path.join(cls.tmp, "bin")
        os.makedirs(bin_dir)
        os.symlink(CONTROLLER, os.path.join(bin_dir, "meshcast-controller"))
        os.symlink(WORKER, os.path.join(bin_dir, "meshcast-worker"))
        cls.dir = os.path.join(cls.tmp, "c")
        subprocess.run([MESHCTL, "up", "--dir", cls.dir, "--bin-dir", bin_dir,
                        "--workers", "2", "--devices-per-worker", "4",
                        # Plaintext, so that a TCP call reaches the
                        # worker's own check (with TLS, workers take only
                        # the controller's certificate).
                        "--insecure", "--output", "json"], check=True,
                       timeout=60, stderr=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL)

    @classmethod
    def tearDownClass(cls):
        subprocess.run([MESHCTL, "down", "--dir", cls.dir], timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_example_moves_and_checks_every_tensor(self):
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else self.tmp
        result = subprocess.run([sys.executable, EXAMPLE, "--dir", self.dir,
                                 "--shm", shm], capture_output=True,
                                text=True, timeout=150)
        self.assertEqual(result.returncode, 0,
                         "stdout:\n%s\nstderr:\n%s" % (result.stdout,
                                                       result.stderr))
        self.assertIn("0 mismatches", result.stdout)
        # meshcast's own check of the same data (verify: checksum).
        self.assertIn("checksums of every moved tensor agree", result.stdout)
        self.assertIn("to 2 replicas", result.stdout)
        # Every buffer was given back.
        for worker in buffers.local_workers(self.dir).values():
            self.assertEqual(worker.list(), [])

    def test_reshard_job_between_user_buffers(self):
        """One tensor, a `reshard` job: rows split over host 0's four
        devices to columns split over host 1's, in the user's memory."""
        import array
        client = meshcast.Client.local(self.dir)
        workers = buffers.local_workers(self.dir)
        shape = [8, 12]
        spec = {"reshard": {
            "tensor": {"shape": shape, "dtype": "DTYPE_INT32"},
            "src_mesh": {"shape": [1, 4], "devices": [0, 1, 2, 3]},
            "src_spec": {"text": "R,S1"},
            "dst_mesh": {"shape": [1, 4], "devices": [4, 5, 6, 7]},
            "dst_spec": {"text": "S1,R"},
            "src_buffer": "mine/in", "dst_buffer": "mine/out",
            "strategy": "meshcast"},
            "verify": "VERIFY_MODE_CHECKSUM"}
        tiles = buffers.tiles(client.plan(spec).plan)
        # Host indices follow the order the workers registered in.
        worker_of_host = {w.host_index: w.name
                          for w in client.cluster().workers}
        lent = []
        for tile in tiles:
            host, device = divmod(tile["device"], 4)
            shm = buffers.SharedTile.create(
                os.path.join(self.tmp, "r.%s.%d" % (tile["role"],
                                                    tile["device"])),
                tile["size"])
            (rows, cols) = tile["box"]
            if tile["role"] == "source":
                shm.view()[:] = array.array("i", (
                    1000 * r + c for r in range(*rows)
                    for c in range(*cols))).tobytes()
            name = "mine/in" if tile["role"] == "source" else "mine/out"
            worker = workers[worker_of_host[host]]
            worker.register(name, device, tile=shm)
            lent.append((tile, shm, worker, name, device))
        job = client.run(spec, timeout=60)
        self.assertEqual(job.state, job_pb2.JOB_STATE_SUCCEEDED, job.message)
        self.assertIn("checksums of every moved tensor agree", job.message)
        destinations = 0
        for tile, shm, worker, name, device in lent:
            if tile["role"] == "destination":
                destinations += 1
                got = array.array("i")
                got.frombytes(bytes(shm.view()))
                (rows, cols) = tile["box"]
                self.assertEqual(list(got), [1000 * r + c
                                             for r in range(*rows)
                                             for c in range(*cols)])
            worker.unregister(name, device)
            shm.close()
        self.assertEqual(destinations, 4)
        client.close()

    def test_reshard_job_between_numpy_arrays(self):
        """The same with numpy: float32 tiles made from slices of one array,
        results read through arrays over the destination tiles."""
        try:
            import numpy as np
        except ImportError:
            self.skipTest("numpy is not installed")
        whole = (np.arange(6 * 16, dtype=np.float32).reshape(6, 16) - 40) / 8
        received = self.reshard_between_user_buffers(
            "np", "DTYPE_FLOAT32", list(whole.shape),
            lambda path, box: buffers.SharedTile.from_array(path, whole[box]),
            lambda tile, shape: tile.as_array(np.float32, shape))
        for box, got in received:
            np.testing.assert_array_equal(got, whole[box])

    def test_reshard_job_between_torch_tensors(self):
        """And with torch, in bfloat16 as model weights are."""
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed")
        whole = torch.linspace(-2, 2, 6 * 16).reshape(6, 16).to(
            torch.bfloat16)
        received = self.reshard_between_user_buffers(
            "pt", "DTYPE_BFLOAT16", list(whole.shape),
            lambda path, box: buffers.SharedTile.from_tensor(path,
                                                             whole[box]),
            lambda tile, shape: tile.as_tensor(torch.bfloat16, shape))
        for box, got in received:
            self.assertTrue(torch.equal(got, whole[box]), box)

    def reshard_between_user_buffers(self, prefix, dtype, shape, make_source,
                                     read):
        """One tensor of `shape` from rows x columns split over hosts 0 and
        1 (2x2) to columns split over 1x4 (devices 2, 3, 6, 7), between
        user buffers: `make_source(path, box)` makes each source tile,
        `read(tile, shape)` reads a destination. Returns [(box, what
        read)] per destination, after the tiles are given back."""
        client = meshcast.Client.local(self.dir)
        workers = buffers.local_workers(self.dir)
        spec = {"reshard": {
            "tensor": {"shape": shape, "dtype": dtype},
            "src_mesh": {"shape": [2, 2], "devices": [0, 1, 4, 5]},
            "src_spec": {"text": "S0,S1"},
            "dst_mesh": {"shape": [1, 4], "devices": [2, 3, 6, 7]},
            "dst_spec": {"text": "R,S1"},
            "src_buffer": prefix + "/in", "dst_buffer": prefix + "/out",
            "strategy": "meshcast"},
            "verify": "VERIFY_MODE_CHECKSUM"}
        worker_of_host = {w.host_index: w.name
                          for w in client.cluster().workers}
        lent = []
        for tile in buffers.tiles(client.plan(spec).plan):
            host, device = divmod(tile["device"], 4)
            path = os.path.join(self.tmp, "%s.%s.%d" % (prefix, tile["role"],
                                                        tile["device"]))
            box = tuple(slice(b, e) for b, e in tile["box"])
            if tile["role"] == "source":
                shm, name = make_source(path, box), prefix + "/in"
            else:
                shm = buffers.SharedTile.create(path, tile["size"])
                name = prefix + "/out"
            worker = workers[worker_of_host[host]]
            worker.register(name, device, tile=shm)
            lent.append((tile, box, shm, worker, name, device))
        job = client.run(spec, timeout=60)
        self.assertEqual(job.state, job_pb2.JOB_STATE_SUCCEEDED, job.message)
        self.assertIn("checksums of every moved tensor agree", job.message)
        received = []
        for tile, box, shm, worker, name, device in lent:
            if tile["role"] == "destination":
                got = read(shm, [e - b for b, e in tile["box"]])
                received.append((box, got.clone() if hasattr(got, "clone")
                                 else got.copy()))
                del got
            worker.unregister(name, device)
            shm.close()
        self.assertEqual(len(received), 4)
        client.close()
        return received

    def test_register_list_and_refusals(self):
        workers = buffers.local_workers(self.dir)
        self.assertEqual(sorted(workers), ["worker-0", "worker-1"])
        worker = workers["worker-1"]
        tile = buffers.SharedTile.create(os.path.join(self.tmp, "t"), 64)
        try:
            worker.register("probe", 3, tile=tile)
            listed = worker.list()
            self.assertEqual([(b.name, b.device, b.size_bytes)
                              for b in listed], [("probe", 3, 64)])
            with self.assertRaises(meshcast.Error) as short:
                worker.register("big", 0, path=tile.path, size=65)
            self.assertEqual(short.exception.code, "INVALID_ARGUMENT")
            self.assertIn("less than size_bytes 65", short.exception.message)
            with self.assertRaises(meshcast.Error) as device:
                worker.register("x", 4, tile=tile)
            self.assertIn("this worker has 4 devices", device.exception.message)
            worker.unregister("probe", 3)
            self.assertEqual(worker.list(), [])
        finally:
            tile.close()

    def test_buffer_calls_are_refused_over_tcp(self):
        import grpc
        from meshcast.v1 import worker_pb2, worker_pb2_grpc
        client = meshcast.Client.local(self.dir)
        address = [w.address for w in client.cluster().workers][0]
        client.close()
        channel = grpc.insecure_channel(address)
        stub = worker_pb2_grpc.WorkerStub(channel)
        with self.assertRaises(grpc.RpcError) as refused:
            stub.ListBuffers(worker_pb2.ListBuffersRequest(), timeout=10)
        channel.close()
        self.assertEqual(refused.exception.code(),
                         grpc.StatusCode.PERMISSION_DENIED,
                         refused.exception.details())
        self.assertIn("local socket", refused.exception.details())


if __name__ == "__main__":
    unittest.main()
