#!/usr/bin/env bash
# Builds just reshard_plan_bench (and what it links) and runs it; arguments go
# to the benchmark, e.g. --only suite, --only speed, --verify, --help.
# Environment: BUILD_DIR (default build), MESHCAST_CUDA (default OFF: the
# benchmark needs no device code), JOBS (default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMESHCAST_CUDA="${MESHCAST_CUDA:-OFF}" >/dev/null
fi
cmake --build "$BUILD_DIR" -j "$JOBS" --target reshard_plan_bench >/dev/null
exec "$BUILD_DIR/bench/reshard_plan_bench" "$@"
