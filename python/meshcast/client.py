"""A typed client of a meshcast controller (the Controller gRPC service of
proto/meshcast/v1/controller.proto).

    import meshcast
    client = meshcast.Client.local("~/.meshcast")        # a `meshctl up` dir
    job = client.submit({"name": "ar", "collective": {
        "op": "all_reduce", "mesh": {"shape": [2, 2]}, "size": "64MiB"}})
    for event in client.watch(job.id):
        print(event.state, event.progress, event.message)
    job = client.wait(job.id)                 # the final Job message
    print(job.result.metrics["busbw_bytes_per_second"])

Specs are `meshcast.v1.job_pb2.JobSpec` messages or dicts in protobuf's
JSON mapping (proto field names, as job files are written): what
`meshctl submit -f` reads. Results are the generated messages themselves
(`Job`, `JobEvent`, `PlanResponse`, `GetClusterResponse`).

Security: `Client(address, tls_ca=..., token=...)` (or `token_file=`)
connects over TLS with a bearer token, as the controller's tokens file
expects; `Client.local(dir)` reads both from the cluster.json of `meshctl
up`. A token is never sent in plaintext.

Errors: gRPC failures raise `meshcast.Error` with the status code name and
the controller's message (which names the field at fault);
`wait(timeout=)` raises `TimeoutError`. Thread safety: one Client may be
used from several threads (gRPC channels are thread-safe).
"""

import json
import os
import time

import grpc
from google.protobuf import json_format

from meshcast.v1 import controller_pb2
from meshcast.v1 import controller_pb2_grpc
from meshcast.v1 import job_pb2

FINAL_STATES = (job_pb2.JOB_STATE_SUCCEEDED, job_pb2.JOB_STATE_FAILED,
                job_pb2.JOB_STATE_CANCELLED)


class Error(Exception):
    """A call the controller refused or could not answer."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


def _call(method, request, timeout=None):
    try:
        return method(request, timeout=timeout)
    except grpc.RpcError as e:
        raise Error(e.code().name, e.details()) from None


def job_spec(spec):
    """A JobSpec from a JobSpec or a dict in protobuf's JSON mapping."""
    if isinstance(spec, job_pb2.JobSpec):
        return spec
    if isinstance(spec, str):
        spec = json.loads(spec)
    if not isinstance(spec, dict):
        raise TypeError("spec: want a JobSpec, a dict or a JSON string, got %s"
                        % type(spec).__name__)
    try:
        return json_format.ParseDict(spec, job_pb2.JobSpec())
    except json_format.ParseError as e:
        raise ValueError("spec: %s" % e) from None


def _read(path):
    with open(os.path.expanduser(path), "rb") as f:
        return f.read()


def _token_from(path):
    for line in _read(path).decode().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            return line
    raise ValueError("token_file %s holds no token" % path)


class Client:
    """A connection to one controller; see the module's documentation."""

    def __init__(self, address, *, tls_ca=None, tls_cert=None, tls_key=None,
                 token=None, token_file=None, timeout=30.0):
        """`address` is host:port. TLS when `tls_ca` (a PEM file) is given,
        with a client certificate when `tls_cert` and `tls_key` are, and a
        bearer token from `token` or `token_file`. `timeout` bounds every
        unary call (seconds)."""
        if token_file:
            token = _token_from(token_file)
        if token and not tls_ca:
            raise ValueError("a token needs TLS: give tls_ca too")
        self.address = address
        self.timeout = timeout
        if tls_ca:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca),
                private_key=_read(tls_key) if tls_key else None,
                certificate_chain=_read(tls_cert) if tls_cert else None)
            if token:
                credentials = grpc.composite_channel_credentials(
                    credentials, grpc.access_token_call_credentials(token))
            self._channel = grpc.secure_channel(address, credentials)
        else:
            self._channel = grpc.insecure_channel(address)
        self._stub = controller_pb2_grpc.ControllerStub(self._channel)

    @classmethod
    def local(cls, cluster_dir=None, **kwargs):
        """The controller of a local cluster that `meshctl up --dir DIR`
        started (DIR/cluster.json; default $MESHCAST_HOME, else
        ./.meshcast), with its CA and admin token."""
        cluster_dir = os.path.expanduser(
            cluster_dir or os.environ.get("MESHCAST_HOME", ".meshcast"))
        path = os.path.join(cluster_dir, "cluster.json")
        try:
            with open(path) as f:
                info = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(
                "no cluster in %s (%s missing); start one with 'meshctl up "
                "--dir %s'" % (cluster_dir, path, cluster_dir)) from None
        security = info.get("security") or {}
        if not security.get("insecure", True):
            kwargs.setdefault("tls_ca", security.get("tls_ca") or None)
            kwargs.setdefault("tls_cert", security.get("tls_cert") or None)
            kwargs.setdefault("tls_key", security.get("tls_key") or None)
            kwargs.setdefault("token_file", security.get("token_file") or None)
        return cls(info["controller"], **kwargs)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- jobs

    def submit(self, spec):
        """Queues a job; returns its Job (state QUEUED). The controller
        validates the spec first: a bad one raises Error naming the field."""
        request = controller_pb2.SubmitJobRequest(spec=job_spec(spec))
        return _call(self._stub.SubmitJob, request, self.timeout).job

    def get(self, job_id):
        request = controller_pb2.GetJobRequest(id=job_id)
        return _call(self._stub.GetJob, request, self.timeout).job

    def list(self, limit=0):
        """Jobs, newest first (limit 0: all)."""
        request = controller_pb2.ListJobsRequest(limit=limit)
        return list(_call(self._stub.ListJobs, request, self.timeout).jobs)

    def cancel(self, job_id):
        request = controller_pb2.CancelJobRequest(id=job_id)
        return _call(self._stub.CancelJob, request, self.timeout).job

    def watch(self, job_id, timeout=None):
        """Yields the job's JobEvents (state changes and progress) until it
        ends; the last one has a final state. `timeout` (seconds) bounds
        the whole watch. A stream the controller drops (UNAVAILABLE: it
        restarts, or sheds a slow watcher) is opened again; the events in
        between are lost, the final state is not."""
        request = controller_pb2.WatchJobRequest(id=job_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(
                0.0, deadline - time.monotonic())
            try:
                for event in self._stub.WatchJob(request, timeout=left):
                    yield event
                    if event.state in FINAL_STATES:
                        return
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise TimeoutError("job %s still running after %s s" %
                                       (job_id, timeout)) from None
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise Error(e.code().name, e.details()) from None
            # The stream ended early: the job's state now, then again.
            job = self.get(job_id)
            if job.state in FINAL_STATES:
                yield job_pb2.JobEvent(job_id=job.id, state=job.state,
                                       message=job.message,
                                       progress=job.progress)
                return
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("job %s still running after %s s" %
                                   (job_id, timeout))
            time.sleep(0.2)

    def wait(self, job_id, timeout=None):
        """The Job once it has ended (SUCCEEDED, FAILED or CANCELLED: check
        `job.state`). TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for _ in self.watch(job_id, timeout=timeout):
            pass
        while True:
            job = self.get(job_id)
            if job.state in FINAL_STATES:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("job %s still %s after %s s" % (
                    job_id, job_pb2.JobState.Name(job.state), timeout))
            time.sleep(0.05)

    def run(self, spec, timeout=None):
        """submit + wait: the final Job."""
        return self.wait(self.submit(spec).id, timeout=timeout)

    # -- planning and the cluster

    def plan(self, spec):
        """A dry run on the live cluster: the PlanResponse (the plan, every
        alternative compared, the topology, where the meshes would go)."""
        request = controller_pb2.PlanRequest(spec=job_spec(spec))
        return _call(self._stub.Plan, request, self.timeout)

    def cluster(self):
        """The GetClusterResponse: topology (with the link calibration, if
        any) and every worker."""
        return _call(self._stub.GetCluster, controller_pb2.GetClusterRequest(),
                     self.timeout)
