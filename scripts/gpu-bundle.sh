#!/usr/bin/env bash
# gpu-bundle: packs what scripts/gpu-check.sh runs, from a CUDA build made
# on this machine, into one tarball, for a GPU machine that has the NVIDIA
# driver, cuBLAS and NCCL but none of meshcast's build dependencies (gRPC,
# protobuf, Abseil, Gloo, ...): a cloud GPU image, a node of a cluster.
#
#   scripts/gpu-bundle.sh [BUILD_DIR [TARBALL]]
#   # on the GPU machine, in a checkout of the same commit:
#   MESHCAST_PREBUILT=TARBALL scripts/gpu-check.sh
#
# BUILD_DIR (default build) must be a CUDA build (cmake -DMESHCAST_CUDA=ON or
# AUTO with CUDA found, CMAKE_CUDA_ARCHITECTURES covering the target GPU;
# the project's default is 90, Hopper). TARBALL defaults to
# BUILD_DIR/meshcast-gpu.tar.gz.
#
# The tarball keeps the build tree's layout (meshctl finds the daemons
# beside it) and holds:
#   - meshctl, meshcast-controller, meshcast-worker, gpu_bench, the GPU test
#     programs and the host-side tests of the GPU code;
#   - gpu-tests.txt: every test of the ctest label `gpu`, one line per
#     program: `<program path> <gtest filter>`;
#   - lib/: the shared libraries these programs load, except the C library
#     and the C++ runtime (the target's own are newer), the GPU driver, and
#     NCCL and cuBLAS (hundreds of megabytes; gpu-check finds the target's);
#   - manifest.txt: the commit, the CUDA architectures and the file list.
# Exit status: 0 on success, 1 if BUILD_DIR is not a built CUDA tree.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${1:-build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
TARBALL=${2:-$BUILD_DIR/meshcast-gpu.tar.gz}
case $TARBALL in /*) ;; *) TARBALL=$ROOT/$TARBALL ;; esac

fail() {
  echo "gpu-bundle: $*" >&2
  exit 1
}
[[ -f $BUILD_DIR/CMakeCache.txt ]] || fail "$BUILD_DIR is not a CMake build tree"
[[ -x $BUILD_DIR/bench/gpu/gpu_bench ]] ||
  fail "$BUILD_DIR/bench/gpu/gpu_bench is missing: build with -DMESHCAST_CUDA=ON"

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT

# The GPU tests, grouped by program, from ctest's own listing.
ctest --test-dir "$BUILD_DIR" -L gpu --show-only=json-v1 >"$STAGE/tests.json"
python3 - "$BUILD_DIR" "$STAGE/tests.json" >"$STAGE/gpu-tests.txt" <<'EOF'
import json, os, sys
build, listing = sys.argv[1], sys.argv[2]
filters = {}
for test in json.load(open(listing))["tests"]:
    program = os.path.relpath(test["command"][0], build)
    names = [a.split("=", 1)[1] for a in test["command"][1:]
             if a.startswith("--gtest_filter=")]
    filters.setdefault(program, []).extend(names)
for program in sorted(filters):
    print(program, ":".join(filters[program]))
EOF
[[ -s $STAGE/gpu-tests.txt ]] || fail "ctest lists no test labelled gpu in $BUILD_DIR"

PROGRAMS=(cli/meshctl controller/meshcast-controller worker/meshcast-worker
          bench/gpu/gpu_bench worker/collective_exchange_test
          worker/relay_schedule_test worker/mismatch_report_test)
while read -r program _; do PROGRAMS+=("$program"); done <"$STAGE/gpu-tests.txt"

mkdir -p "$STAGE/bundle/lib"
for program in $(printf '%s\n' "${PROGRAMS[@]}" | sort -u); do
  [[ -x $BUILD_DIR/$program ]] || fail "$BUILD_DIR/$program was not built"
  mkdir -p "$STAGE/bundle/$(dirname "$program")"
  cp "$BUILD_DIR/$program" "$STAGE/bundle/$program"
  # `name => /path (address)`: keep the path of every library that is not
  # the target's own.
  ldd "$BUILD_DIR/$program" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    grep -Ev '^(ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libnccl\.so|libcublas)' |
    while read -r name path; do cp -nL "$path" "$STAGE/bundle/lib/$name"; done
done
cp "$STAGE/gpu-tests.txt" "$STAGE/bundle/gpu-tests.txt"
{
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  arch=$(sed -n "s/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p" "$BUILD_DIR/CMakeCache.txt")
  echo "cuda_architectures: ${arch:-90 (the default of cmake/cuda.cmake)}"
  echo "built: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname)"
  (cd "$STAGE/bundle" && find . -type f | sort)
} >"$STAGE/bundle/manifest.txt"
mkdir -p "$(dirname "$TARBALL")"
tar -C "$STAGE/bundle" -czf "$TARBALL" .
echo "gpu-bundle: $TARBALL ($(du -h "$TARBALL" | cut -f1), $(wc -l <"$STAGE/gpu-tests.txt") test programs, $(ls "$STAGE/bundle/lib" | wc -l) libraries)"
