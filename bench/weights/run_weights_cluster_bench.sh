#!/usr/bin/env bash
# Builds the daemons and meshctl, then runs weights_cluster_bench.py: a
# scaled-down Kimi-K2-like model's weights moved from a 2x2 training mesh
# to inference replicas as reshard_model jobs, every strategy, measured
# next to predicted and the lower bound, on the emulated multi-host cluster
# (root; without it the local cluster, with a note). Arguments go to the
# benchmark:
#   sudo bench/weights/run_weights_cluster_bench.sh               # ~2 min
#   bench/weights/run_weights_cluster_bench.sh --sections plan    # offline
#   bench/weights/run_weights_cluster_bench.sh --quick            # < 20 s
# Environment: BUILD_DIR (default build), JOBS (default: number of cores).
set -euo pipefail
source "$(dirname "$0")/../common/build_targets.sh"
build_targets meshcast-controller meshcast-worker meshctl
exec python3 bench/weights/weights_cluster_bench.py --bin-dir "$BUILD_DIR" "$@"
