#!/usr/bin/env bash
# The README's main command: installs dependencies, builds meshcast and runs
# the resharding planner benchmark over the public suite (every strategy's
# predicted time next to the lower bound), then plans one case with meshctl.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
"$BUILD_DIR/bench/reshard_plan_bench"
echo
echo "+ meshctl plan (case 7 of the public suite on the paper's testbed)"
"$BUILD_DIR/cli/meshctl" plan --cluster 5x4 --inter-gbps 10 --intra-gbps 1200 \
  --shape 1024x1024x512 --dtype int32 \
  --src-mesh 1x4@0 --src-spec S1RR --dst-mesh 2x4@1 --dst-spec RRR
