"""meshcast.buffers without a cluster: numpy arrays and torch tensors over
shared tiles (the array is the tile's memory, not a copy), dtype names, and
the errors."""

import os
import tempfile
import unittest

from meshcast import buffers
from meshcast.v1 import types_pb2

try:
    import numpy as np
except ImportError:  # scripts/install-deps.sh installs python3-numpy
    np = None
try:
    import torch
except ImportError:  # scripts/install-deps.sh installs python3-torch
    torch = None


@unittest.skipUnless(np is not None, "numpy is not installed")
class ArrayTileTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mc-buffers-")

    def path(self, name):
        return os.path.join(self.tmp, name)

    def test_from_array_copies_and_as_array_shares_the_memory(self):
        source = np.arange(24, dtype=np.float32).reshape(4, 6) * 0.5
        tile = buffers.SharedTile.from_array(self.path("a"), source)
        self.assertEqual(tile.size, 96)
        array = tile.as_array("DTYPE_FLOAT32", (4, 6))
        np.testing.assert_array_equal(array, source)
        # A write through the array is in the tile's bytes (what the worker
        # maps), and a write to the bytes shows in the array.
        array[1, 2] = -7.25
        again = np.frombuffer(bytes(tile.view()), dtype=np.float32)
        self.assertEqual(again[1 * 6 + 2], -7.25)
        tile.view()[0:4] = np.float32(3.5).tobytes()
        self.assertEqual(array[0, 0], 3.5)
        # The source array is not tied to the tile.
        self.assertEqual(source[1, 2], 4.0)
        del array
        tile.close()
        self.assertFalse(os.path.exists(self.path("a")))

    def test_non_contiguous_arrays_are_copied_in_c_order(self):
        source = np.arange(12, dtype=np.int64).reshape(3, 4).T  # 4 x 3
        tile = buffers.SharedTile.from_array(self.path("t"), source)
        np.testing.assert_array_equal(tile.as_array(np.int64, (4, 3)), source)
        np.testing.assert_array_equal(tile.as_array("int64"),
                                      source.reshape(-1))
        tile.close()

    def test_dtype_names(self):
        for name, expected in [("DTYPE_INT32", np.int32),
                               ("float16", np.float16),
                               (types_pb2.DTYPE_FLOAT64, np.float64),
                               (np.uint8, np.uint8), ("<i8", np.int64)]:
            self.assertEqual(buffers.numpy_dtype(name), np.dtype(expected),
                             name)
        with self.assertRaises(ValueError) as bf16:
            buffers.numpy_dtype("DTYPE_BFLOAT16")
        self.assertIn("uint16", str(bf16.exception))
        with self.assertRaises(ValueError) as bad:
            buffers.numpy_dtype("quaternion")
        self.assertIn("DTYPE_FLOAT32", str(bad.exception))

    def test_a_shape_that_does_not_fill_the_tile_is_refused(self):
        tile = buffers.SharedTile.create(self.path("s"), 40)
        with self.assertRaises(ValueError) as shape:
            tile.as_array(np.float32, (3, 4))
        self.assertIn("holds 48 bytes; the tile has 40", str(shape.exception))
        self.assertEqual(tile.as_array(np.int32).shape, (10,))
        tile.close()
        odd = buffers.SharedTile.create(self.path("o"), 6)
        with self.assertRaises(ValueError) as partial:
            odd.as_array(np.int32)
        self.assertIn("not a whole number", str(partial.exception))
        odd.close()

    def test_close_with_a_live_array_names_the_problem(self):
        tile = buffers.SharedTile.create(self.path("c"), 16)
        array = tile.as_array(np.int32)
        with self.assertRaises(ValueError) as live:
            tile.close()
        self.assertIn("still alive", str(live.exception))
        del array
        tile.close()


@unittest.skipUnless(torch is not None, "torch is not installed")
class TensorTileTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mc-buffers-")

    def test_bfloat16_tensors_round_trip_through_the_tiles_memory(self):
        source = torch.linspace(-3, 3, 24, dtype=torch.float32).reshape(
            4, 6).to(torch.bfloat16)
        tile = buffers.SharedTile.from_tensor(os.path.join(self.tmp, "w"),
                                              source)
        self.assertEqual(tile.size, 24 * 2)
        tensor = tile.as_tensor("DTYPE_BFLOAT16", (4, 6))
        self.assertTrue(torch.equal(tensor, source))
        # The tile's bytes are the tensor's: the bits of source[2, 5].
        bits = source[2, 5].view(torch.int16).item() & 0xFFFF
        offset = 2 * (2 * 6 + 5)
        self.assertEqual(bytes(tile.view()[offset:offset + 2]),
                         bits.to_bytes(2, "little"))
        tensor[0, 0] = 7.5
        self.assertEqual(tile.as_tensor(torch.bfloat16)[0].item(), 7.5)
        self.assertNotEqual(source[0, 0].item(), 7.5)  # a copy went in
        with self.assertRaises(ValueError) as live:
            tile.close()
        self.assertIn("still alive", str(live.exception))
        del tensor
        tile.close()

    def test_dtype_names_and_shapes(self):
        self.assertEqual(buffers.torch_dtype("bfloat16"), torch.bfloat16)
        self.assertEqual(buffers.torch_dtype(types_pb2.DTYPE_INT8),
                         torch.int8)
        self.assertEqual(buffers.torch_dtype(torch.float64), torch.float64)
        with self.assertRaises(ValueError) as bad:
            buffers.torch_dtype("complex")
        self.assertIn("DTYPE_BFLOAT16", str(bad.exception))
        tile = buffers.SharedTile.create(os.path.join(self.tmp, "s"), 12)
        with self.assertRaises(ValueError) as shape:
            tile.as_tensor(torch.float32, (2, 2))
        self.assertIn("as_tensor: shape [2, 2] of torch.float32 holds 16 "
                      "bytes; the tile has 12", str(shape.exception))
        self.assertEqual(tuple(tile.as_tensor(torch.int16).shape), (6,))
        tile.close()


if __name__ == "__main__":
    unittest.main()
