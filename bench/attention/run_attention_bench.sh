#!/usr/bin/env bash
# Builds the daemons and meshctl, then runs attention_bench.py: ring, rsa
# and ulysses attention planned offline at GPU scale and measured on the
# emulated multi-host cluster (that section needs root). Arguments go to
# the benchmark:
#   bench/attention/run_attention_bench.sh --quick
#   sudo bench/attention/run_attention_bench.sh --sections net --seq-lens 1024,4096
# Environment: BUILD_DIR (default build), JOBS (default: number of cores).
set -euo pipefail
source "$(dirname "$0")/../common/build_targets.sh"
build_targets meshcast-controller meshcast-worker meshctl
exec python3 bench/attention/attention_bench.py --bin-dir "$BUILD_DIR" "$@"
