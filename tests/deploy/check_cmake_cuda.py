#!/usr/bin/env python3
"""The CUDA detection (cmake/cuda.cmake) configures with the system's CMake.

Debian's own cmake (3.25) and CUDA 13 are the combination the project builds
with; CUDA 13 ships no nvToolsExt library. Configures the small project
tests/deploy/cmake_cuda (which includes only cmake/cuda.cmake) twice in
temporary directories, with /usr/bin/cmake when it exists:
  1. as is: FindCUDAToolkit provides CUDA::cudart;
  2. with FindCUDAToolkit disabled (CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit),
     standing in for a module that cannot handle the toolkit: the fallback
     must find libcudart under the nvcc's toolkit root.
Both must succeed with CUDA detected and a CUDA::cudart whose library exists.
Skips (77) where there is no nvcc or NCCL (CPU-only machines).
"""

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import REPO, Checker, run, skip  # noqa: E402

PROJECT = os.path.join(REPO, "tests", "deploy", "cmake_cuda")


def configure(cmake, ninja, work, name, extra):
    build = os.path.join(work, name)
    cmd = [cmake, "-S", PROJECT, "-B", build] + (["-G", "Ninja"] if ninja else []) + extra
    r = run(cmd, timeout=240)
    print(f"--- {name}: {' '.join(cmd)} (rc {r.returncode})")
    print("\n".join(l for l in (r.stdout + r.stderr).splitlines() if "meshcast" in l or "Error" in l or "CUDA" in l))
    result = {}
    path = os.path.join(build, "cuda-detection.txt")
    if os.path.exists(path):
        for line in open(path):
            key, _, value = line.strip().partition("=")
            result[key] = value
    return r.returncode, result


def main():
    nvcc = "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else shutil.which("nvcc")
    if not nvcc:
        skip("no nvcc (CPU-only machine): nothing to detect")
    cmake = "/usr/bin/cmake" if os.path.exists("/usr/bin/cmake") else shutil.which("cmake")
    if not cmake:
        skip("no cmake")
    c = Checker()
    work = tempfile.mkdtemp(prefix="meshcast-cuda-cfg-")
    try:
        rc, found = configure(cmake, shutil.which("ninja"), work, "stock", [])
        if rc == 0 and found.get("have_cuda") == "OFF":
            skip("nvcc exists but NCCL does not: the build is CPU-only here")
        for name, extra in (("stock", None), ("fallback", ["-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE"])):
            if extra is not None:
                rc, found = configure(cmake, shutil.which("ninja"), work, name, extra)
            print(f"{name}: {found}")
            c.check(rc == 0, f"{name}: configure failed (rc {rc})")
            c.check(found.get("have_cuda") == "ON", f"{name}: CUDA not detected: {found}")
            cudart = found.get("cudart", "")
            c.check(bool(cudart) and os.path.exists(cudart) and "cudart" in os.path.basename(cudart),
                    f"{name}: CUDA::cudart must name an existing libcudart: {cudart!r}")
        c.check(found.get("cmake_command", "").startswith(os.path.dirname(cmake)),
                f"configured with {cmake}: {found.get('cmake_command')}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c.finish()


if __name__ == "__main__":
    main()
