#!/usr/bin/env bash
# Builds the daemons and meshctl, then runs pipeline_bench.py: pipeline
# training steps under gpipe, 1f1b and eager_1f1b, with and without
# overlapping the sends between stages; the cross-mesh resharding paper's
# GPT-3 and U-Transformer settings simulated on its V100 testbed, and the
# schedules measured on the emulated multi-host cluster (that section needs
# root). Arguments go to the benchmark:
#   bench/pipeline/run_pipeline_bench.sh --quick
#   bench/pipeline/run_pipeline_bench.sh --sections paper
#   sudo bench/pipeline/run_pipeline_bench.sh --sections net --repeat 3
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
exec python3 bench/pipeline/pipeline_bench.py --bin-dir "$BUILD_DIR" "$@"
