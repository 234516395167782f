#!/usr/bin/env bash
# Builds the daemons and meshctl, then runs tp_overlap_bench.py: `tp_overlap`
# jobs (a tensor-parallel GEMM feeding a reduce-scatter or all-reduce) in
# every mode on a local cluster and on the emulated multi-host cluster
# (that section needs root), measured next to predicted, and the T3 paper's
# sublayers simulated at H100-class rates. Arguments go to the benchmark:
#   bench/tp_overlap/run_tp_overlap_bench.sh --quick
#   bench/tp_overlap/run_tp_overlap_bench.sh --sections local --repeat 3
#   sudo bench/tp_overlap/run_tp_overlap_bench.sh --sections net --rate 1gbit
# Environment: BUILD_DIR (default build), JOBS (default: number of cores).
set -euo pipefail
source "$(dirname "$0")/../common/build_targets.sh"
build_targets meshcast-controller meshcast-worker meshctl
exec python3 bench/tp_overlap/tp_overlap_bench.py --bin-dir "$BUILD_DIR" "$@"
