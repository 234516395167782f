#!/usr/bin/env python3
"""scripts/gpu-bundle.sh and scripts/gpu-check.sh's prebuilt mode, on a
machine without a GPU (nvidia-smi is faked; the GPU tests skip themselves).

  check_gpu_bundle.py BUILD_DIR

The bundle of a CUDA build must hold meshctl, both daemons, gpu_bench, every
program of the ctest label `gpu` with exactly ctest's test names, a manifest,
and no library the target machine must provide itself (the C library, the
C++ runtime, the driver, NCCL, cuBLAS). gpu-check must then run that bundle's
tests and the host-side tests and pass, and fail when the bundle names a
test program it does not hold. Exits 77 (skipped) for a build without CUDA.
"""

import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import Checker, run  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROGRAMS = ["cli/meshctl", "controller/meshcast-controller",
            "worker/meshcast-worker", "bench/gpu/gpu_bench",
            "worker/collective_exchange_test", "worker/relay_schedule_test",
            "worker/mismatch_report_test"]
FORBIDDEN = ("libc.so", "libstdc++", "libcuda.so", "libnccl", "libcublas")
FAKE_SMI = """#!/bin/sh
case "$*" in
  *query-gpu*) echo "0, FAKE GPU, 81559 MiB, 580.00, 9.0" ;;
  *) echo "fake topology" ;;
esac
"""


def gpu_tests(build):
    """ctest's gpu-labelled tests: {program relative to build: {names}}."""
    out = subprocess.run(["ctest", "--test-dir", build, "-L", "gpu",
                          "--show-only=json-v1"], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    tests = {}
    for test in json.loads(out)["tests"]:
        program = os.path.relpath(test["command"][0], build)
        for arg in test["command"][1:]:
            if arg.startswith("--gtest_filter="):
                tests.setdefault(program, set()).add(arg.split("=", 1)[1])
    return tests


def check_gpu_check(c, work, bundle, steps, expect_rc, expect_lines, what):
    bindir = os.path.join(work, "fakebin")
    os.makedirs(bindir, exist_ok=True)
    smi = os.path.join(bindir, "nvidia-smi")
    with open(smi, "w") as f:
        f.write(FAKE_SMI)
    os.chmod(smi, 0o755)
    log = os.path.join(work, "gpu-check-%s.log" % what)
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"],
               MESHCAST_PREBUILT=bundle, GPU_CHECK_STEPS=steps,
               BUILD_DIR=os.path.join(work, "unpacked"), STEP_TIMEOUT="120")
    r = run(["bash", os.path.join(REPO, "scripts", "gpu-check.sh"), log],
            timeout=300, env=env)
    text = open(log).read() if os.path.exists(log) else ""
    c.check(r.returncode == expect_rc, "gpu-check (%s): exit %d, expected %d; "
            "log tail: %s" % (what, r.returncode, expect_rc, text[-1500:]))
    for line in expect_lines:
        c.check(line in text, "gpu-check (%s): no line %r in its log" %
                (what, line))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    build = os.path.abspath(sys.argv[1])
    if not os.path.exists(os.path.join(build, "bench", "gpu", "gpu_bench")):
        print("SKIP: %s is not a CUDA build (no bench/gpu/gpu_bench)" % build)
        return 77
    c = Checker()
    expected = gpu_tests(build)
    c.check(expected, "ctest lists no test labelled gpu")
    with tempfile.TemporaryDirectory(prefix="meshcast-gpu-bundle-") as work:
        bundle = os.path.join(work, "bundle.tar.gz")
        r = run(["bash", os.path.join(REPO, "scripts", "gpu-bundle.sh"),
                 build, bundle], timeout=300)
        c.check(r.returncode == 0, "gpu-bundle.sh: exit %d: %s %s" %
                (r.returncode, r.stdout, r.stderr))
        if r.returncode != 0:
            return c.finish()
        with tarfile.open(bundle) as tar:
            names = {os.path.normpath(n) for n in tar.getnames()}
            listing = tar.extractfile("./gpu-tests.txt").read().decode()
            manifest = tar.extractfile("./manifest.txt").read().decode()
            members = tar.getmembers()
        for program in PROGRAMS + sorted(expected):
            c.check(program in names, "the bundle lacks %s" % program)
        listed = {}
        for line in listing.splitlines():
            program, _, filters = line.partition(" ")
            listed[program] = set(filters.split(":"))
            c.check(program in names, "gpu-tests.txt names %s, which the "
                    "bundle lacks" % program)
        c.check(listed == expected, "gpu-tests.txt %s differs from ctest's "
                "gpu tests %s" % (sorted(listed), sorted(expected)))
        c.check(manifest.startswith("commit: "), "manifest: %r" % manifest[:80])
        libs = [os.path.basename(n) for n in names if n.startswith("lib/")]
        c.check(libs, "the bundle holds no libraries")
        for lib in libs:
            c.check(not lib.startswith(FORBIDDEN),
                    "the bundle carries %s, which the GPU machine provides" %
                    lib)

        check_gpu_check(c, work, bundle, "tests,host", 0,
                        ["PASS  GPU tests (the bundle's gpu-tests.txt)",
                         "PASS  host-side tests of the GPU code",
                         "gpu-check: all steps passed"], "pass")

        # The same bundle naming a test program it does not hold: a failed
        # step and exit status 1.
        broken = os.path.join(work, "broken.tar.gz")
        with tarfile.open(bundle) as src, tarfile.open(broken, "w:gz") as dst:
            for member in members:
                if member.name == "./gpu-tests.txt":
                    data = (listing + "worker/no_such_test X.Y\n").encode()
                    member.size = len(data)
                    dst.addfile(member, io.BytesIO(data))
                elif member.isfile():
                    dst.addfile(member, src.extractfile(member))
                else:
                    dst.addfile(member)
        check_gpu_check(c, work, broken, "tests", 1,
                        ["FAIL  GPU tests (the bundle's gpu-tests.txt)",
                         "gpu-check: FAILED"], "missing-program")
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
