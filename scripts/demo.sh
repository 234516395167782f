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
# Case 3 of the public suite (bench/workloads/public_suite.txt), its 2 GiB
# tensor scaled to 64 MiB as the benchmarks scale it (the last dimension).
SUITE=${MESHCAST_PUBLIC_SUITE:-bench/workloads/public_suite.txt}
while read -r name _ shape src_mesh src_spec dst_mesh dst_spec _; do
  [[ $name == case3 ]] && break
done <"$SUITE"
if [[ ${name:-} != case3 ]]; then
  echo "demo: no case3 in $SUITE" >&2
  exit 1
fi
last=$(((${shape##*x} * 64 + 1024) / 2048))
shape="${shape%x*}x$((last > 0 ? last : 1))"
echo "+ meshctl submit reshard (case 3 of the public suite, scaled to 64 MiB)"
"$MESHCTL" submit reshard --dir "$DIR" --wait \
  --shape "$shape" --dtype int32 \
  --src-mesh "$src_mesh" --src-spec "$src_spec" \
  --dst-mesh "$dst_mesh" --dst-spec "$dst_spec"
echo
echo "+ meshctl list"
"$MESHCTL" list --dir "$DIR"
echo
"$BUILD_DIR/bench/reshard_plan_bench"
