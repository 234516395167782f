#!/usr/bin/env bash
# Builds just reshard_plan_bench (and what it links) and runs it; arguments go
# to the benchmark, e.g. --only suite, --only speed, --verify, --help.
# Environment: BUILD_DIR (default build), MESHCAST_CUDA (default OFF: the
# benchmark needs no device code), JOBS (default: number of cores).
set -euo pipefail
source "$(dirname "$0")/common/build_targets.sh"
build_targets reshard_plan_bench
exec "$BUILD_DIR/bench/reshard_plan_bench" "$@"
