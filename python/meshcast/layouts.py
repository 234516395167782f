"""Framework layouts as meshcast sharding specs and meshes.

meshcast writes a layout as one entry per tensor dimension: `R`
(replicated) or `S` and the mesh axes the dimension is split over, most
significant first (`S0`, `S1`, `S01`), e.g. "S0,R" (docs/conventions.md).

    from torch.distributed.tensor import Shard, Replicate
    meshcast.dtensor_spec([Shard(0), Replicate()], ndim=2)   # "S0,R"
    meshcast.dtensor_spec([Shard(1), Shard(1)], ndim=2)      # "R,S01"
    # jax.sharding.PartitionSpec("data", None) on Mesh(..., ("data", "model"))
    meshcast.jax_spec(("data", None), ["data", "model"])      # "S0,R"
    meshcast.jax_spec((None, ("data", "model")), ["data", "model"])  # "R,S01"

DTensor: `placements[i]` is what mesh axis i does: Shard(d) splits tensor
dimension d over it, Replicate() copies; several axes that shard one
dimension split it in mesh-axis order (axis 0 major), as DTensor does.
Partial (a pending reduction) has no meshcast layout: ValueError. Any
object whose class is named Shard (with `.dim`) or Replicate works, so
torch is not needed; strings "Shard(0)" and "Replicate()" too.

JAX: a PartitionSpec is a sequence with one entry per tensor dimension
(shorter ones mean replicated for the rest): None, a mesh axis name, or a
tuple of names (major first); `axis_names` are the mesh's, in order. Pure
functions over names: no JAX needed.

Errors are ValueError naming the entry at fault and what is allowed.
"""

import re

_SHARD_TEXT = re.compile(r"^\s*(?:Shard\s*\(\s*(?:dim\s*=\s*)?(-?\d+)\s*\))\s*$")


def _spec_text(axes_per_dim):
    return ",".join("S" + "".join(str(a) for a in axes) if axes else "R"
                    for axes in axes_per_dim)


def _placement(p, i):
    """('shard', dim) or ('replicate', None) for placement `p` of axis i."""
    if isinstance(p, str):
        m = _SHARD_TEXT.match(p)
        if m:
            return "shard", int(m.group(1))
        if re.match(r"^\s*Replicate\s*(\(\s*\))?\s*$", p):
            return "replicate", None
        raise ValueError("placements[%d] %r: allowed: Shard(d), Replicate()"
                         % (i, p))
    name = type(p).__name__
    if name == "Replicate":
        return "replicate", None
    if name == "Shard" and hasattr(p, "dim"):
        return "shard", int(p.dim)
    raise ValueError("placements[%d] is %s: meshcast moves Shard(d) and "
                     "Replicate() layouts only (a Partial tensor must be "
                     "reduced first)" % (i, name))


def dtensor_spec(placements, ndim):
    """The meshcast spec of a DTensor layout of an `ndim`-D tensor."""
    if ndim < 1:
        raise ValueError("ndim must be >= 1, got %r" % (ndim,))
    axes = [[] for _ in range(ndim)]
    for i, p in enumerate(placements):
        kind, dim = _placement(p, i)
        if kind == "replicate":
            continue
        if dim < 0:
            dim += ndim
        if not 0 <= dim < ndim:
            raise ValueError("placements[%d] shards dimension %d of a %d-D "
                             "tensor; allowed: -%d..%d" % (i, dim, ndim, ndim,
                                                           ndim - 1))
        axes[dim].append(i)
    return _spec_text(axes)


def jax_spec(partition_spec, axis_names, ndim=None):
    """The meshcast spec of a JAX PartitionSpec over a mesh whose axes are
    named `axis_names` (in mesh order); `ndim` pads with replicated
    dimensions (default: the PartitionSpec's length)."""
    entries = list(partition_spec)
    names = list(axis_names)
    if ndim is None:
        ndim = len(entries)
    if len(entries) > ndim:
        raise ValueError("the PartitionSpec has %d entries for a %d-D tensor"
                         % (len(entries), ndim))
    axes, used = [], set()
    for d, entry in enumerate(entries + [None] * (ndim - len(entries))):
        group = () if entry is None else (
            (entry,) if isinstance(entry, str) else tuple(entry))
        dim_axes = []
        for name in group:
            if name not in names:
                raise ValueError("PartitionSpec entry %d names mesh axis %r; "
                                 "allowed: %s" % (d, name, ", ".join(names)))
            if name in used:
                raise ValueError("mesh axis %r shards two dimensions" % name)
            used.add(name)
            dim_axes.append(names.index(name))
        axes.append(dim_axes)
    return _spec_text(axes)


def mesh_of_shape(shape, devices=None):
    """A DeviceMesh in JSON form: {"shape": [...]} placed by the controller,
    or with explicit global device ids (row-major over the shape)."""
    shape = [int(s) for s in shape]
    if not shape or any(s < 1 for s in shape):
        raise ValueError("mesh shape %r: every extent must be >= 1" % (shape,))
    mesh = {"shape": shape}
    if devices is not None:
        devices = [int(d) for d in devices]
        count = 1
        for s in shape:
            count *= s
        if len(devices) != count:
            raise ValueError("mesh %s needs %d devices, got %d" %
                             ("x".join(map(str, shape)), count, len(devices)))
        mesh["devices"] = devices
    return mesh


def mesh_of_device_mesh(device_mesh):
    """A torch DeviceMesh (its `.mesh` tensor of ranks) as a meshcast mesh,
    rank r being global device r (one device per rank, host-major)."""
    ranks = device_mesh.mesh
    return mesh_of_shape(list(ranks.shape), ranks.flatten().tolist())


def reshard_spec(shape, src_mesh, src_spec, dst_mesh, dst_spec,
                 dtype="DTYPE_FLOAT32", strategy="auto", name=None,
                 verify="VERIFY_MODE_FULL"):
    """A reshard JobSpec (dict, protobuf JSON mapping) for Client.submit:
    a tensor of `shape` from `src_spec` on `src_mesh` to `dst_spec` on
    `dst_mesh` (meshes from mesh_of_shape)."""
    spec = {"verify": verify, "reshard": {
        "tensor": {"shape": [int(s) for s in shape], "dtype": dtype},
        "src_mesh": src_mesh, "src_spec": {"text": src_spec},
        "dst_mesh": dst_mesh, "dst_spec": {"text": dst_spec},
        "strategy": strategy}}
    if name:
        spec["name"] = name
    return spec
