#!/usr/bin/env bash
# Builds the daemons and meshctl, then runs moe_bench.py: MoE layers under
# MP + EP + ESP with the baseline, s1 and s2 schedules, simulated over a grid
# of layer configurations and measured on the emulated multi-host cluster
# (that section needs root). Arguments go to the benchmark:
#   bench/moe/run_moe_bench.sh --quick
#   sudo bench/moe/run_moe_bench.sh --sections net --rate 1gbit --limit 40
# Environment: BUILD_DIR (default build), JOBS (default: number of cores).
set -euo pipefail
source "$(dirname "$0")/../common/build_targets.sh"
build_targets meshcast-controller meshcast-worker meshctl
exec python3 bench/moe/moe_bench.py --bin-dir "$BUILD_DIR" "$@"
