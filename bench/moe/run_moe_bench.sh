#!/usr/bin/env bash
# Builds the daemons and meshctl, then runs moe_bench.py: MoE layers under
# MP + EP + ESP with the baseline, s1 and s2 schedules, simulated over a grid
# of layer configurations and measured on the emulated multi-host cluster
# (that section needs root). Arguments go to the benchmark:
#   bench/moe/run_moe_bench.sh --quick
#   sudo bench/moe/run_moe_bench.sh --sections net --rate 1gbit --limit 40
# Environment: BUILD_DIR (default build), JOBS (default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMESHCAST_CUDA="${MESHCAST_CUDA:-OFF}" >/dev/null
fi
cmake --build "$BUILD_DIR" -j "$JOBS" --target meshcast-controller \
  meshcast-worker meshctl >/dev/null
exec python3 bench/moe/moe_bench.py --bin-dir "$BUILD_DIR" "$@"
