#!/usr/bin/env python3
"""A stand-in for the meshcast daemons' /metrics endpoints, for offline tests.

Serves every metric of docs/metrics.md with plausible, changing values:
GET /controller is a controller's exposition, GET /worker/NAME a worker's.
Counters grow and histograms gain observations on every scrape, so rate(),
increase() and histogram_quantile() over them return data. It lets the
dashboard test run a real Prometheus against "a cluster" without building or
starting the daemons; the live test (later, with the daemons) replaces it.

Usage as a module:  server = start("127.0.0.1", 0); port = server.server_port
Usage standalone:   fake_exporter.py [PORT]
"""

import http.server
import sys
import threading

# (name, type, help, label sets) for each documented metric. Histograms list
# their bucket bounds separately below.
CONTROLLER = [
    ("meshcast_build_info", "gauge", "Build identity.",
     [{"component": "controller", "version": "0.1.0"}]),
    ("meshcast_controller_workers", "gauge", "Registered workers.",
     [{"state": s} for s in ("ready", "busy", "lost")]),
    ("meshcast_controller_devices", "gauge", "Devices of live workers.",
     [{"state": s} for s in ("free", "busy")]),
    ("meshcast_controller_jobs", "gauge", "Jobs known to the controller.",
     [{"type": "reshard", "state": s} for s in
      ("queued", "planning", "running", "succeeded", "failed", "cancelled")]),
    ("meshcast_controller_jobs_finished_total", "counter", "Jobs that ended.",
     [{"type": "reshard", "state": s} for s in ("succeeded", "failed", "cancelled")]),
    ("meshcast_controller_queue_depth", "gauge", "Jobs waiting for devices.", [{}]),
    ("meshcast_controller_planning_seconds", "histogram", "Time to plan a job.",
     [{"type": "reshard"}]),
    ("meshcast_controller_job_duration_seconds", "histogram", "Submit to end.",
     [{"type": "reshard", "state": s} for s in ("succeeded", "failed", "cancelled")]),
    ("meshcast_controller_measured_over_predicted_ratio", "histogram",
     "Measured data-plane time over the simulator's prediction.", [{"type": "reshard"}]),
    ("meshcast_controller_dataplane_measured_seconds_total", "counter",
     "Measured data-plane time of succeeded jobs that had a prediction.", [{"type": "reshard"}]),
    ("meshcast_controller_dataplane_predicted_seconds_total", "counter",
     "The simulator's predicted data-plane time of the same jobs.", [{"type": "reshard"}]),
    ("meshcast_controller_rpcs_total", "counter", "RPCs served.",
     [{"method": m, "code": c} for m in ("SubmitJob", "GetJob", "Heartbeat")
      for c in ("OK", "NOT_FOUND")]),
]

WORKER = [
    ("meshcast_build_info", "gauge", "Build identity.",
     [{"component": "worker", "version": "0.1.0"}]),
    ("meshcast_worker_bytes_sent_total", "counter", "Bytes this worker sent.",
     [{"link": l, "backend": b} for l, b in (("intra", "local"), ("inter", "gloo"))]),
    ("meshcast_worker_bytes_received_total", "counter", "Bytes this worker received.",
     [{"link": l, "backend": b} for l, b in (("intra", "local"), ("inter", "gloo"))]),
    ("meshcast_worker_transfer_duration_seconds", "histogram", "One hop of a step.",
     [{"op": o, "link": l} for o in ("broadcast", "send_recv") for l in ("intra", "inter")]),
    ("meshcast_worker_step_duration_seconds", "histogram", "One step, start to end.",
     [{"op": o} for o in ("broadcast", "send_recv")]),
    ("meshcast_worker_achieved_bandwidth_bytes_per_second", "gauge",
     "Bytes / seconds of the last finished step.", [{"op": o} for o in ("broadcast", "send_recv")]),
    ("meshcast_worker_verified_elements_total", "counter", "Destination elements checked.", [{}]),
    ("meshcast_worker_verification_failures_total", "counter", "Elements that did not match.", [{}]),
    ("meshcast_worker_device_memory_bytes", "gauge", "Buffer memory held per device.",
     [{"device": d} for d in ("0", "1")]),
    ("meshcast_worker_running_steps", "gauge", "Steps in flight.", [{}]),
    ("meshcast_worker_tasks_total", "counter", "Programs run.",
     [{"result": r} for r in ("ok", "failed", "aborted")]),
]

BUCKETS = {
    "meshcast_controller_planning_seconds": [0.001, 0.01, 0.1, 1, 10],
    "meshcast_controller_job_duration_seconds": [0.1, 1, 10, 100],
    "meshcast_controller_measured_over_predicted_ratio": [0.5, 1, 1.5, 2, 4],
    "meshcast_worker_transfer_duration_seconds": [1e-4, 1e-3, 1e-2, 0.1, 1],
    "meshcast_worker_step_duration_seconds": [1e-4, 1e-3, 1e-2, 0.1, 1],
}

# One observation per scrape per histogram child, cycling through these
# fractions of the bucket range so that quantiles vary.
OBSERVATION_FRACTIONS = [0.3, 0.6, 0.9]


def _labels(labels):
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


class _State:
    """Per-endpoint counters and histograms, advanced once per scrape."""

    def __init__(self, metrics):
        self.metrics = metrics
        self.scrapes = 0
        self.lock = threading.Lock()
        self.histograms = {}  # (name, labels) -> [bucket counts..., sum, count]

    def render(self):
        with self.lock:
            self.scrapes += 1
            n = self.scrapes
            out = []
            for name, kind, help_text, label_sets in self.metrics:
                out.append(f"# HELP {name} {help_text}")
                out.append(f"# TYPE {name} {kind}")
                for i, labels in enumerate(label_sets):
                    if kind == "counter":
                        # failures and errors grow too, slower than successes
                        out.append(f"{name}{_labels(labels)} {n * (10 if i == 0 else 1)}")
                    elif name.endswith("_info"):
                        out.append(f"{name}{_labels(labels)} 1")
                    elif kind == "gauge":
                        out.append(f"{name}{_labels(labels)} {1 + (n + i) % 4}")
                    else:
                        out.extend(self._histogram(name, labels, n + i))
            return "\n".join(out) + "\n"

    def _histogram(self, name, labels, n):
        bounds = BUCKETS[name]
        key = (name, tuple(sorted(labels.items())))
        state = self.histograms.setdefault(key, [0] * len(bounds) + [0.0, 0])
        value = bounds[-1] * OBSERVATION_FRACTIONS[n % len(OBSERVATION_FRACTIONS)]
        for i, bound in enumerate(bounds):
            if value <= bound:
                state[i] += 1
        state[-2] += value
        state[-1] += 1
        lines = []
        for i, bound in enumerate(bounds):
            lines.append(f"{name}_bucket{_labels({**labels, 'le': repr(float(bound))})} {state[i]}")
        lines.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {state[-1]}")
        lines.append(f"{name}_sum{_labels(labels)} {state[-2]}")
        lines.append(f"{name}_count{_labels(labels)} {state[-1]}")
        return lines


def make_handler():
    controller = _State(CONTROLLER)
    workers = {}
    workers_lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server naming)
            if self.path == "/controller":
                body = controller.render()
            elif self.path.startswith("/worker/"):
                with workers_lock:
                    state = workers.setdefault(self.path, _State(WORKER))
                body = state.render()
            else:
                self.send_error(404, "use /controller or /worker/NAME")
                return
            data = body.encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt, *args):  # keep test output quiet
            pass

    return Handler


def start(host="127.0.0.1", port=0):
    """Starts the exporter in a daemon thread; returns the server."""
    server = http.server.ThreadingHTTPServer((host, port), make_handler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def documented_names():
    """Metric names this exporter serves (without histogram suffixes)."""
    return {m[0] for m in CONTROLLER + WORKER}


if __name__ == "__main__":
    srv = start("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(f"serving on 127.0.0.1:{srv.server_port}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
