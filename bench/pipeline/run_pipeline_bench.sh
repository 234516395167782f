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
source "$(dirname "$0")/../common/build_targets.sh"
build_targets meshcast-controller meshcast-worker meshctl
exec python3 bench/pipeline/pipeline_bench.py --bin-dir "$BUILD_DIR" "$@"
