"""The layout converters (meshcast.layouts): pure functions, checked
against meshcast's notation (docs/conventions.md) by hand-written cases,
and with PyTorch's own DTensor placements when torch is installed."""

import unittest

from meshcast import layouts


class Shard:  # the duck type of torch.distributed.tensor.Shard
    def __init__(self, dim):
        self.dim = dim


class Replicate:
    pass


class Partial:
    pass


class DTensorTest(unittest.TestCase):
    def test_placements_per_mesh_axis(self):
        self.assertEqual(layouts.dtensor_spec([Shard(0), Replicate()], 2),
                         "S0,R")
        self.assertEqual(layouts.dtensor_spec([Replicate(), Shard(0)], 2),
                         "S1,R")
        self.assertEqual(layouts.dtensor_spec([Replicate(), Shard(1)], 3),
                         "R,S1,R")
        # Two mesh axes over one dimension: axis 0 major.
        self.assertEqual(layouts.dtensor_spec([Shard(1), Shard(1)], 2),
                         "R,S01")
        self.assertEqual(layouts.dtensor_spec([Shard(-1)], 3), "R,R,S0")
        self.assertEqual(layouts.dtensor_spec([Replicate(), Replicate()], 1),
                         "R")

    def test_strings(self):
        self.assertEqual(layouts.dtensor_spec(["Shard(0)", "Replicate()"], 2),
                         "S0,R")
        self.assertEqual(layouts.dtensor_spec(["Shard(dim=1)"], 2), "R,S0")

    def test_errors_name_the_entry(self):
        with self.assertRaisesRegex(ValueError, r"placements\[1\] is Partial"):
            layouts.dtensor_spec([Shard(0), Partial()], 2)
        with self.assertRaisesRegex(ValueError, r"placements\[0\] shards "
                                    r"dimension 2 of a 2-D tensor"):
            layouts.dtensor_spec([Shard(2)], 2)
        with self.assertRaisesRegex(ValueError, r"placements\[0\] 'S\(0\)'"):
            layouts.dtensor_spec(["S(0)"], 2)

    def test_real_torch_placements(self):
        try:
            from torch.distributed.tensor import Replicate as TReplicate
            from torch.distributed.tensor import Shard as TShard
        except ImportError:
            try:
                from torch.distributed._tensor import Replicate as TReplicate
                from torch.distributed._tensor import Shard as TShard
            except ImportError:
                self.skipTest("torch with DTensor is not installed")
        self.assertEqual(layouts.dtensor_spec([TShard(0), TReplicate()], 2),
                         "S0,R")


class JaxTest(unittest.TestCase):
    def test_partition_specs(self):
        names = ["data", "model"]
        self.assertEqual(layouts.jax_spec(("data", None), names), "S0,R")
        self.assertEqual(layouts.jax_spec((None, "model"), names), "R,S1")
        self.assertEqual(layouts.jax_spec((("data", "model"),), names), "S01")
        self.assertEqual(layouts.jax_spec((("model", "data"), None), names),
                         "S10,R")
        self.assertEqual(layouts.jax_spec(("model",), names, ndim=3),
                         "S1,R,R")
        self.assertEqual(layouts.jax_spec((), names, ndim=2), "R,R")

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, "names mesh axis 'pipe'; "
                                    "allowed: data, model"):
            layouts.jax_spec(("pipe",), ["data", "model"])
        with self.assertRaisesRegex(ValueError, "shards two dimensions"):
            layouts.jax_spec(("data", "data"), ["data", "model"])
        with self.assertRaisesRegex(ValueError, "3 entries for a 2-D"):
            layouts.jax_spec(("data", None, None), ["data"], ndim=2)


class MeshTest(unittest.TestCase):
    def test_meshes_and_specs(self):
        self.assertEqual(layouts.mesh_of_shape([2, 4]), {"shape": [2, 4]})
        self.assertEqual(layouts.mesh_of_shape([1, 2], [4, 5]),
                         {"shape": [1, 2], "devices": [4, 5]})
        with self.assertRaisesRegex(ValueError, "needs 2 devices, got 3"):
            layouts.mesh_of_shape([1, 2], [0, 1, 2])
        spec = layouts.reshard_spec([8, 8], layouts.mesh_of_shape([1, 2]),
                                    "S0,R", layouts.mesh_of_shape([1, 2]),
                                    "R,S0", name="t")
        self.assertEqual(spec["reshard"]["src_spec"], {"text": "S0,R"})
        self.assertEqual(spec["name"], "t")


if __name__ == "__main__":
    unittest.main()
