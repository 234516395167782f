"""meshcast's Python client: jobs, plans and the cluster over gRPC
(meshcast.Client), and converters from PyTorch DTensor and JAX layouts to
meshcast's sharding specs and meshes (meshcast.layouts). The generated
messages are in meshcast.v1 (job_pb2, plan_pb2, types_pb2, ...)."""

from meshcast.client import Client, Error, FINAL_STATES, job_spec
from meshcast.layouts import (dtensor_spec, jax_spec, mesh_of_device_mesh,
                              mesh_of_shape, reshard_spec)

__all__ = ["Client", "Error", "FINAL_STATES", "job_spec", "dtensor_spec",
           "jax_spec", "mesh_of_device_mesh", "mesh_of_shape",
           "reshard_spec"]
