"""User buffers: a program's own memory as the source and destination of
meshcast jobs (CPU workers; docs/user_buffers.md).

A process on a worker's host puts each tile it owns into a file in shared
memory (/dev/shm), registers it with that host's worker over the worker's
local Unix socket, and names the buffers in the job (`reshard_model`'s
`src_buffer_prefix` / `dst_buffer_prefix`). The worker maps the files, so
what a job writes is in the process's own mapping when the job ends.

    import meshcast
    from meshcast import buffers

    workers = buffers.local_workers("~/.meshcast")   # name -> LocalWorker
    tile = buffers.SharedTile.create("/dev/shm/me/wq.0", nbytes)
    tile.view()[:] = my_bytes                          # or a numpy view
    workers["worker-0"].register("train/wq", device=0, tile=tile)
    ...
    client.run({"reshard_model": {..., "src_buffer_prefix": "train/",
                                  "dst_buffer_prefix": "infer/"},
                "verify": "VERIFY_MODE_OFF"})

numpy arrays: `SharedTile.from_array(path, array)` makes a tile holding a
copy of an array, and `tile.as_array(dtype, shape)` is a numpy array over
the tile's own memory (no copy): fill a source through it before the job,
read a destination through it after. numpy is imported only by these two
(Debian: python3-numpy). torch CPU tensors work the same way
(`SharedTile.from_tensor`, `tile.as_tensor`; bfloat16 included; Debian:
python3-torch). Drop the arrays and tensors before `close()`.

Names: a job's tile of tensor NAME on global device D is the buffer
PREFIX + NAME registered with the worker of host D // G under local device
D % G (G devices per worker). `tiles(plan)` lists every tile of a plan with
its box, so a program knows what to put where.

Errors: a worker's refusal raises meshcast.Error (PERMISSION_DENIED when
the call did not come over the local socket). Thread safety: a
LocalWorker may be shared between threads; a SharedTile may not.
"""

import json
import mmap
import os

import grpc

from meshcast.client import Error, _call
from meshcast.v1 import plan_pb2
from meshcast.v1 import types_pb2
from meshcast.v1 import worker_pb2
from meshcast.v1 import worker_pb2_grpc


class SharedTile:
    """A file of `size` bytes mapped shared (usually under /dev/shm)."""

    def __init__(self, path, size, mapping, fd):
        self.path = path
        self.size = size
        self._mapping = mapping
        self._fd = fd

    @classmethod
    def create(cls, path, size):
        """Creates (or truncates) the file at `path` with `size` zero bytes
        and maps it."""
        path = os.path.abspath(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.ftruncate(fd, size)
        return cls(path, size, mmap.mmap(fd, size) if size else None, fd)

    @classmethod
    def from_array(cls, path, array):
        """A new tile at `path` holding a copy of numpy `array`'s elements
        in C order (its nbytes)."""
        np = _numpy()
        array = np.ascontiguousarray(array)
        tile = cls.create(path, array.nbytes)
        if array.nbytes:
            tile.as_array(array.dtype, array.shape)[...] = array
        return tile

    def view(self):
        """A writable memoryview of the bytes."""
        return memoryview(self._mapping) if self._mapping else memoryview(b"")

    def as_array(self, dtype, shape=None):
        """The tile's bytes as a writable numpy array of `dtype` (a numpy
        dtype, or a meshcast dtype: see numpy_dtype) and `shape` (default:
        one dimension, every element), without a copy: what the array holds
        is what the worker reads and writes. ValueError when the shape's
        bytes are not the tile's size."""
        np = _numpy()
        dtype = numpy_dtype(dtype)
        shape = self._shape_of(shape, dtype.itemsize, dtype.name, "as_array")
        count = 1
        for d in shape:
            count *= d
        if self._mapping is None:
            return np.zeros(shape, dtype=dtype)  # a tile of 0 bytes
        # frombuffer keeps a memoryview of the mapping as the array's base,
        # so the mapping refuses to close under a live array (an ndarray
        # built over the mmap itself would let it close and then fault).
        return np.frombuffer(self._mapping, dtype=dtype,
                             count=count).reshape(shape)

    @classmethod
    def from_tensor(cls, path, tensor):
        """A new tile at `path` holding a copy of torch `tensor`'s elements
        (moved to the CPU first if it is not there) in C order."""
        tensor = tensor.detach().to("cpu").contiguous()
        nbytes = tensor.numel() * tensor.element_size()
        tile = cls.create(path, nbytes)
        if nbytes:
            tile.as_tensor(tensor.dtype, tensor.shape).copy_(tensor)
        return tile

    def as_tensor(self, dtype, shape=None):
        """The tile's bytes as a writable torch CPU tensor of `dtype` (a
        torch dtype, or a meshcast one: see torch_dtype; bfloat16 too) and
        `shape`, without a copy, as as_array does for numpy."""
        torch = _torch()
        dtype = torch_dtype(dtype)
        itemsize = torch.empty((), dtype=dtype).element_size()
        shape = self._shape_of(shape, itemsize, str(dtype), "as_tensor")
        count = 1
        for d in shape:
            count *= d
        if self._mapping is None:
            return torch.zeros(shape, dtype=dtype)
        # Through a memoryview that the tensor keeps: the mapping then
        # refuses to close under it.
        return torch.frombuffer(memoryview(self._mapping), dtype=dtype,
                                count=count).reshape(shape)

    def _shape_of(self, shape, itemsize, name, what):
        """`shape` as a tuple (default: every element, in one dimension),
        checked against the tile's size; errors start with `what`."""
        if shape is None:
            if self.size % itemsize:
                raise ValueError("%s: the tile's %d bytes are not a "
                                 "whole number of %s elements (%d bytes "
                                 "each)" % (what, self.size, name, itemsize))
            return (self.size // itemsize,)
        shape = tuple(int(d) for d in shape)
        count = 1
        for d in shape:
            count *= d
        if count * itemsize != self.size:
            raise ValueError("%s: shape %s of %s holds %d bytes; the "
                             "tile has %d" % (what, list(shape), name,
                                              count * itemsize, self.size))
        return shape

    def close(self, remove=True):
        if self._mapping is not None:
            try:
                self._mapping.close()
            except BufferError:
                raise ValueError("close: arrays or views of %s are still "
                                 "alive; drop them first" % self.path)
            self._mapping = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if remove:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


class LocalWorker:
    """The user-buffer calls of one worker, over its local Unix socket."""

    def __init__(self, socket_path, timeout=10.0):
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel = grpc.insecure_channel("unix:" + socket_path)
        self._stub = worker_pb2_grpc.WorkerStub(self._channel)

    def register(self, name, device, tile=None, path=None, size=None):
        """Lends the worker a buffer: `tile` (a SharedTile), or a file
        `path` of `size` bytes. `device` is the worker's local device
        index."""
        if tile is not None:
            path, size = tile.path, tile.size
        if path is None or size is None:
            raise ValueError("register: give a tile, or a path and a size")
        buffer = worker_pb2.UserBuffer(name=name, device=device,
                                       path=os.path.abspath(path),
                                       size_bytes=size)
        _call(self._stub.RegisterBuffer,
              worker_pb2.RegisterBufferRequest(buffer=buffer), self.timeout)

    def unregister(self, name, device):
        _call(self._stub.UnregisterBuffer,
              worker_pb2.UnregisterBufferRequest(name=name, device=device),
              self.timeout)

    def list(self):
        """The UserBuffer messages registered now (with jobs_using)."""
        return list(_call(self._stub.ListBuffers,
                          worker_pb2.ListBuffersRequest(),
                          self.timeout).buffers)

    def close(self):
        self._channel.close()


def local_workers(cluster_dir=None):
    """{worker name: LocalWorker} of a local cluster started by `meshctl
    up` (its cluster.json records each worker's local socket)."""
    cluster_dir = os.path.expanduser(
        cluster_dir or os.environ.get("MESHCAST_HOME", ".meshcast"))
    with open(os.path.join(cluster_dir, "cluster.json")) as f:
        info = json.load(f)
    workers = {}
    for process in info.get("processes", []):
        if process.get("role") == "worker" and process.get("local_socket"):
            workers[process["name"]] = LocalWorker(process["local_socket"])
    if not workers:
        raise Error("NOT_FOUND", "no worker of %s records a local socket "
                    "(a cluster started by an older meshctl?)" % cluster_dir)
    return workers


def tiles(plan):
    """Every tile of a Plan (e.g. Client.plan(spec).plan, for meshes given
    as explicit devices, so that the job places them alike): a list of
    dicts with tensor (its index), device
    (global id), role ("source" or "destination"), box ([(begin, end)] per
    dimension) and size (bytes)."""
    out = []
    for buffer in plan.buffers:
        if buffer.role == plan_pb2.Buffer.ROLE_SOURCE:
            role = "source"
        elif buffer.role == plan_pb2.Buffer.ROLE_DESTINATION:
            role = "destination"
        else:
            continue
        box = [(i.begin, i.end) for i in buffer.box]
        elements = 1
        for begin, end in box:
            elements *= end - begin
        out.append({"tensor": buffer.tensor, "device": buffer.device,
                    "role": role, "box": box,
                    "size": elements * dtype_size(
                        plan.tensors[buffer.tensor].dtype)})
    return out


_DTYPE_SIZES = {
    "DTYPE_INT8": 1, "DTYPE_UINT8": 1, "DTYPE_INT32": 4, "DTYPE_INT64": 8,
    "DTYPE_FLOAT16": 2, "DTYPE_BFLOAT16": 2, "DTYPE_FLOAT32": 4,
    "DTYPE_FLOAT64": 8,
}


# numpy's name for each meshcast dtype; bfloat16 has none.
_NUMPY_DTYPES = {
    "DTYPE_INT8": "int8", "DTYPE_UINT8": "uint8", "DTYPE_INT32": "int32",
    "DTYPE_INT64": "int64", "DTYPE_FLOAT16": "float16",
    "DTYPE_FLOAT32": "float32", "DTYPE_FLOAT64": "float64",
}


def _numpy():
    try:
        import numpy
    except ImportError:
        raise ImportError("meshcast.buffers: numpy arrays need numpy "
                          "(Debian: python3-numpy)") from None
    return numpy


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("meshcast.buffers: torch tensors need torch "
                          "(Debian: python3-torch)") from None
    return torch


# torch's name for each meshcast dtype.
_TORCH_DTYPES = dict(_NUMPY_DTYPES, DTYPE_BFLOAT16="bfloat16")


def _dtype_name(dtype):
    """"DTYPE_..." for a meshcast.v1 DType value, its name or its short
    name ("float32"); None for anything else."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return types_pb2.DType.Name(dtype)
    if isinstance(dtype, str):
        name = dtype.upper()
        return name if name.startswith("DTYPE_") else "DTYPE_" + name
    return None


def torch_dtype(dtype):
    """The torch dtype of `dtype`: a meshcast.v1 DType value, its name
    ("DTYPE_BFLOAT16") or short name ("bfloat16"), or a torch dtype."""
    torch = _torch()
    if isinstance(dtype, torch.dtype):
        return dtype
    name = _dtype_name(dtype)
    if name in _TORCH_DTYPES:
        return getattr(torch, _TORCH_DTYPES[name])
    raise ValueError("dtype %r: allowed: a torch dtype or one of %s" % (
        dtype, ", ".join(sorted(_TORCH_DTYPES))))


def numpy_dtype(dtype):
    """The numpy dtype of `dtype`: a meshcast.v1 DType value, its name
    ("DTYPE_FLOAT32") or short name ("float32"), or anything numpy.dtype
    takes. bfloat16 has no numpy dtype: ValueError (view such a tile as
    uint16 for its raw bits)."""
    np = _numpy()
    name = _dtype_name(dtype)
    if name is not None:
        if name == "DTYPE_BFLOAT16":
            raise ValueError("numpy has no bfloat16: view the tile as "
                             "uint16 for its raw bits")
        if name in _NUMPY_DTYPES:
            return np.dtype(_NUMPY_DTYPES[name])
        if name in _DTYPE_SIZES:
            raise ValueError("dtype %s has no numpy dtype" % dtype)
    try:
        return np.dtype(dtype)
    except TypeError:
        raise ValueError("dtype %r: allowed: a numpy dtype or one of %s" % (
            dtype, ", ".join(sorted(_NUMPY_DTYPES)))) from None


def dtype_size(dtype):
    """Bytes per element of a meshcast.v1 DType value."""
    name = types_pb2.DType.Name(dtype)
    if name not in _DTYPE_SIZES:
        raise ValueError("dtype %s: allowed: %s" % (name,
                                                    ", ".join(_DTYPE_SIZES)))
    return _DTYPE_SIZES[name]
