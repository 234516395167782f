#!/usr/bin/env python3
"""The daemons' monitoring endpoints, on a live local cluster (issue 4).

One meshcast-controller and two meshcast-worker processes on 127.0.0.1 run
two reshard jobs (a broadcast and a point-to-point one) submitted through the
Controller gRPC API, and one invalid submission. Then:

- health: the standard grpc.health.v1.Health/Check answers SERVING on the
  controller and on every worker (through a real channel), and NOT_FOUND for
  a service that does not exist;
- reflection: the reflection service lists each daemon's own service and the
  health service;
- /metrics of every daemon passes `promtool check metrics`;
- the metric families are exactly the ones docs/metrics.md documents for that
  daemon, with the documented label names; every label value comes from its
  fixed set (job states, gRPC codes, the Controller's methods, the plan IR's
  ops, local device indices, ...) and none looks like a job id, a worker
  name or an address;
- the values add up: jobs and RPCs counted with their outcome, the bytes the
  workers sent between them equal the bytes they received, the elements they
  verified equal the jobs' destination elements.

Exit 77 (skipped) only when promtool is missing.
"""

import re
import shutil
import subprocess

import monitoring_lib as lib

DEVICES = 2
SHAPE = (64, 64)
# Destination elements: 1x2 RR holds the tensor twice, 1x2 S1R once.
EXPECTED_VERIFIED = 2 * SHAPE[0] * SHAPE[1] + SHAPE[0] * SHAPE[1]


def promtool_check(promtool, text, what):
    proc = subprocess.run([promtool, "check", "metrics"], input=text,
                          capture_output=True, text=True, timeout=30)
    lib.check(proc.returncode == 0 and not proc.stdout.strip(),
              "promtool check metrics on %s: exit %d: %s %s" %
              (what, proc.returncode, proc.stdout, proc.stderr))


def check_families(text, component, documented, rules, forbidden, what):
    """Metric names, label names and label values of one scrape."""
    types, samples = lib.parse_exposition(text)
    expected = dict(documented[component])
    lib.check(set(types) == set(expected),
              "%s: families %s, docs/metrics.md documents %s (extra %s, "
              "missing %s)" % (what, sorted(types), sorted(expected),
                               sorted(set(types) - set(expected)),
                               sorted(set(expected) - set(types))))
    for name, (kind, _) in expected.items():
        lib.check(types[name] == kind, "%s: %s is a %s, documented as %s" %
                  (what, name, types[name], kind))
    for name, labels, _ in samples:
        family = lib.family_of(name, types)
        allowed = set(expected[family][1]) | (
            {"le"} if name.endswith("_bucket") else set())
        if name != family and types[family] == "summary":
            allowed.discard("quantile")  # a summary's _sum and _count
        lib.check(set(labels) == allowed,
                  "%s: %s has labels %s, documented %s" %
                  (what, name, sorted(labels), sorted(allowed)))
        for label, value in labels.items():
            lib.check(rules[label](value),
                      "%s: %s{%s=%r}: not one of the label's fixed values" %
                      (what, name, label, value))
            for pattern in forbidden:
                lib.check(not re.search(pattern, value),
                          "%s: %s{%s=%r} looks like an unbounded value (%s)" %
                          (what, name, label, value, pattern))
    return samples


def test():
    promtool = shutil.which("promtool")
    if not promtool:
        print("SKIP: no promtool (Debian package `prometheus`, "
              "scripts/install-deps.sh)")
        return lib.SKIP
    documented = lib.documented_metrics()
    lib.check(set(documented) == {"controller", "worker"},
              "docs/metrics.md sections: %s" % sorted(documented))
    rules = lib.label_rules(DEVICES)

    with lib.LocalCluster(workers=2, devices=DEVICES) as cluster:
        shape = "x".join(map(str, SHAPE))
        broadcast = cluster.submit(shape=shape, dtype="int32", src_mesh="1x1",
                                   src_spec="RR", dst_mesh="1x2",
                                   dst_spec="RR", strategy="broadcast",
                                   name="bcast")
        p2p = cluster.submit(shape=shape, dtype="float32", src_mesh="1x2",
                             src_spec="S1R", dst_mesh="1x2", dst_spec="S1R",
                             name="p2p")
        for job in (broadcast, p2p):
            state, message = cluster.wait(job)
            lib.check(state == "SUCCEEDED", "job %s: %s %s" %
                      (job, state, message))
        code = cluster.submit_expecting_error(
            shape=shape, dtype="int32", src_mesh="1x2", src_spec="Q",
            dst_mesh="1x2", dst_spec="RR")
        lib.check(code == "INVALID_ARGUMENT", "bad spec answered %s" % code)

        # Health and reflection, through real channels.
        workers = cluster.workers()
        lib.check(len(workers) == 2, "workers: %r" % workers)
        daemons = [("controller", cluster.controller_address,
                    "meshcast.v1.Controller")]
        daemons += [(name, address, "meshcast.v1.Worker")
                    for name, address, _ in workers]
        for what, address, service in daemons:
            code, out, err = cluster.client("health", address)
            lib.check(code == 0 and out == "SERVING",
                      "%s health: exit %d: %s %s" % (what, code, out, err))
            code, out, _ = cluster.client("health", address,
                                          "no.such.Service")
            lib.check(code == 3 and "NOT_FOUND" in out,
                      "%s health of an unknown service: exit %d: %s" %
                      (what, code, out))
            code, out, err = cluster.client("services", address)
            lib.check(code == 0, "%s reflection: exit %d: %s %s" %
                      (what, code, out, err))
            services = set(out.split())
            for expected in (service, "grpc.health.v1.Health"):
                lib.check(expected in services,
                          "%s reflection lists %s, not %s" %
                          (what, sorted(services), expected))
            lib.log(what, "health SERVING; reflection:", sorted(services))

        # Values that must not appear in any label: ids, names, addresses.
        forbidden = [r"job-\d+", r"\d+\.\d+\.\d+\.\d+", r"\w:\d+"]
        forbidden += [re.escape(n) for n in cluster.worker_names]
        forbidden += [re.escape(name) for name in ("bcast", "p2p")]

        text = lib.http_get(cluster.controller_metrics_url())
        promtool_check(promtool, text, "controller")
        controller = check_families(text, "controller", documented, rules,
                                    forbidden, "controller")
        # The checks themselves must be able to fail: a job id as a label
        # value, an undocumented label, an undocumented family.
        for bad in (text.replace('state="ready"', 'state="job-000001"'),
                    text.replace('{state="ready"}',
                                 '{state="ready",job="job-000001"}'),
                    text + "# TYPE meshcast_controller_extra gauge\n"
                           "meshcast_controller_extra 1\n"):
            try:
                check_families(bad, "controller", documented, rules,
                               forbidden, "mutated scrape")
            except lib.TestFailure:
                continue
            raise lib.TestFailure("the label checks accepted a mutated scrape")
        scrapes = {}
        for name in cluster.worker_names:
            text = lib.http_get(cluster.worker_metrics_url(name))
            promtool_check(promtool, text, name)
            scrapes[name] = check_families(text, "worker", documented, rules,
                                           forbidden, name)
        lib.log("promtool check metrics passed on 3 endpoints; families and "
                "labels as documented")

    # Values.
    v = lib.value_of
    expectations = [
        (v(controller, "meshcast_build_info", component="controller"), 1),
        (v(controller, "meshcast_controller_jobs_finished_total",
           state="succeeded"), 2),
        (v(controller, "meshcast_controller_jobs_finished_total",
           state="failed"), 0),
        (v(controller, "meshcast_controller_jobs", state="succeeded"), 2),
        (v(controller, "meshcast_controller_workers", state="ready"), 2),
        (v(controller, "meshcast_controller_devices", state="free"),
         2 * DEVICES),
        (v(controller, "meshcast_controller_queue_depth"), 0),
        (v(controller, "meshcast_controller_rpcs_total", method="SubmitJob",
           code="OK"), 2),
        (v(controller, "meshcast_controller_rpcs_total", method="SubmitJob",
           code="INVALID_ARGUMENT"), 1),
        (v(controller, "meshcast_controller_rpcs_total",
           method="RegisterWorker", code="OK"), 2),
        (v(controller, "meshcast_controller_planning_seconds_count"), 2),
        (v(controller, "meshcast_controller_job_duration_seconds_count",
           state="succeeded"), 2),
        (v(controller, "meshcast_controller_measured_over_predicted_ratio_"
           "count"), 2),
    ]
    for got, want in expectations:
        lib.check(got == want, "controller value %s, expected %s" %
                  (got, want))

    def total(name, **labels):
        return sum(v(s, name, **labels) or 0 for s in scrapes.values())

    lib.check(total("meshcast_worker_verified_elements_total") ==
              EXPECTED_VERIFIED,
              "workers verified %s elements, jobs hold %d" %
              (total("meshcast_worker_verified_elements_total"),
               EXPECTED_VERIFIED))
    lib.check(total("meshcast_worker_verification_failures_total") == 0,
              "verification failures")
    sent = total("meshcast_worker_bytes_sent_total", link="inter",
                 backend="gloo")
    received = total("meshcast_worker_bytes_received_total", link="inter",
                     backend="gloo")
    lib.check(sent > 0 and sent == received,
              "inter-worker bytes: sent %s, received %s" % (sent, received))
    # The broadcast job sends the 64x64 int32 tensor to both destination
    # devices of the other worker: one inter hop, then one local copy.
    lib.check(total("meshcast_worker_bytes_received_total", link="intra") > 0,
              "no intra-worker copy counted")
    lib.check(total("meshcast_worker_tasks_total", result="ok") >= 2,
              "tasks ok: %s" % total("meshcast_worker_tasks_total",
                                     result="ok"))
    for op in ("broadcast", "send_recv"):
        lib.check(total("meshcast_worker_step_duration_seconds_count",
                        op=op) > 0, "no %s step counted" % op)
        lib.check(total("meshcast_worker_transfer_duration_seconds_count",
                        op=op) > 0, "no %s hop counted" % op)
    lib.check(total("meshcast_worker_running_steps") == 0, "steps in flight")
    lib.check(total("meshcast_worker_device_memory_bytes") == 0,
              "buffer memory held after the jobs")
    lib.log("values add up: %d bytes between workers, %d elements verified" %
            (sent, EXPECTED_VERIFIED))
    return 0


if __name__ == "__main__":
    lib.run_main(test, 100)
