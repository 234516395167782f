#!/usr/bin/env bash
# Builds the daemons and meshctl, then runs netcluster_bench.py (as root):
# the public resharding suite, every strategy, measured on an emulated
# cluster of network namespaces with shaped links, next to the cost model's
# prediction and the lower bound. Arguments go to the benchmark, e.g.
#   bench/netcluster/run_netcluster_bench.sh --size-mib 128 --repeat 3
#   bench/netcluster/run_netcluster_bench.sh --cases case2,case7 --rate 500mbit
# Environment: BUILD_DIR (default build), JOBS (default: number of cores).
set -euo pipefail
source "$(dirname "$0")/../common/build_targets.sh"
build_targets meshcast-controller meshcast-worker meshctl
exec python3 bench/netcluster/netcluster_bench.py --bin-dir "$BUILD_DIR" "$@"
