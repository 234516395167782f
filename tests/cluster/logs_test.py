#!/usr/bin/env python3
"""One job's story in the logs, end to end on a local cluster of 2 workers x
2 CPU devices: a reshard job between the two workers SUCCEEDS; then

- every line of every daemon's log file is in the one format of util/log.h
  (time, severity, component, optional job=ID, message), except what a
  daemon printed outside its logger;
- `grep job=ID` over the files finds the controller's and both workers'
  lines about the job, and `meshctl logs N` (the job's number) prints
  exactly those lines, in time order;
- `meshctl logs --worker worker-1` prints only worker-1's lines;
- `meshctl logs N -f --for 1` prints the same and ends by itself;
- an unknown job and an unknown worker are refused (exit 2), the worker
  with a "did you mean".
"""

import glob
import os
import re

import cluster_lib as lib

WORKERS, DEVICES = 2, 2
LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (INFO|WARN|ERROR) "
                  r"(controller|worker/worker-\d+) (?:job=(job-\d+) )?(.*)$")


def parse(text):
    """[(time, component, job, whole line)] of the lines in the format."""
    lines = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            lines.append((m.group(1), m.group(3), m.group(4), line))
    return lines


def run():
    with lib.LocalCluster(workers=WORKERS, devices=DEVICES) as cluster:
        job = cluster.submit_wait([
            "reshard", "--shape", "64x64", "--dtype", "float32",
            "--src-mesh", "1x2@0", "--src-spec", "S0R",
            "--dst-mesh", "1x2@1", "--dst-spec", "RS0"])
        lib.check(job["state"] == "SUCCEEDED", "job: %s" % job)
        job_id = job["id"]
        number = str(int(job_id.split("-")[1]))

        # The files: one format; grep job=ID tells the job's story.
        story = []
        for path in sorted(glob.glob(os.path.join(cluster.cluster_dir, "logs",
                                                  "*.log"))):
            name = os.path.basename(path)[:-len(".log")]
            if name == "prometheus":
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            parsed = parse(text)
            lib.check(parsed, "%s: no line in the log format:\n%s" %
                      (name, text))
            expected = "controller" if name == "controller" else "worker/" + name
            lib.check(all(p[1] == expected for p in parsed),
                      "%s: lines of another component: %s" % (name, parsed))
            story += [p for p in parsed if p[2] == job_id]
        components = {p[1] for p in story}
        lib.check(components == {"controller", "worker/worker-0",
                                 "worker/worker-1"},
                  "job=%s is logged by %s" % (job_id, sorted(components)))
        lib.check(any("SUCCEEDED" in p[3] for p in story if
                      p[1] == "controller"),
                  "the controller does not log the job's end: %s" % story)

        # meshctl logs N: exactly those lines, in time order.
        result = cluster.ctl("logs", number)
        lib.check(result.code == 0, "logs %s: %r" % (number, result))
        printed = parse(result.out)
        lib.check(len(printed) == len(result.out.splitlines()),
                  "logs printed lines in another format:\n%s" % result.out)
        lib.check(sorted(p[3] for p in printed) == sorted(p[3] for p in story),
                  "meshctl logs %s printed\n%s\nexpected the lines\n%s" %
                  (number, result.out, "\n".join(p[3] for p in story)))
        times = [p[0] for p in printed]
        lib.check(times == sorted(times), "not in time order:\n%s" %
                  result.out)

        result = cluster.ctl("logs", "--worker", "worker-1")
        lib.check(result.code == 0 and parse(result.out) and
                  all(p[1] == "worker/worker-1" for p in parse(result.out)),
                  "logs --worker worker-1: %r" % (result,))

        result = cluster.ctl("logs", number, "-f", "--for", "1")
        lib.check(result.code == 0 and
                  sorted(p[3] for p in parse(result.out)) ==
                  sorted(p[3] for p in story),
                  "logs -f --for 1: %r" % (result,))

        result = cluster.ctl("logs", "999")
        lib.check(result.code == 2 and "no log line names job '999'" in
                  result.err, "logs 999: %r" % (result,))
        result = cluster.ctl("logs", "--worker", "worker-7")
        lib.check(result.code == 2 and "did you mean" in result.err,
                  "logs --worker worker-7: %r" % (result,))
        lib.log("PASS: %d lines about %s from the controller and both "
                "workers, in time order" % (len(story), job_id))


if __name__ == "__main__":
    lib.main(run, limit_seconds=80)
