#!/usr/bin/env bash
# The README's main command: installs dependencies, builds meshcast, starts a
# local cluster (a controller and 4 workers with 4 CPU devices each on
# 127.0.0.1), runs a verified resharding job end to end through meshctl, and
# stops the cluster. Then prints the planner benchmark over the public suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
MESHCTL="$BUILD_DIR/cli/meshctl"
DIR=${MESHCAST_HOME:-$(mktemp -d /tmp/meshcast-demo.XXXXXX)}

"$MESHCTL" up --workers 4 --devices-per-worker 4 --dir "$DIR"
trap '"$MESHCTL" down --dir "$DIR" || true' EXIT

echo "+ meshctl cluster"
"$MESHCTL" cluster --dir "$DIR"
echo
echo "+ meshctl submit reshard (case 3 of the public suite, scaled to 64 MiB)"
"$MESHCTL" submit reshard --dir "$DIR" --wait \
  --shape 256x256x256 --dtype int32 \
  --src-mesh 2x4 --src-spec RS0R --dst-mesh 2x4 --dst-spec S0RR
echo
echo "+ meshctl list"
"$MESHCTL" list --dir "$DIR"
echo
"$BUILD_DIR/bench/reshard_plan_bench"
