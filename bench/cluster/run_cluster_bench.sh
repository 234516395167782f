#!/usr/bin/env bash
# Runs cluster_bench on a local cluster of its own (docs/benchmarks.md):
#   1. measures this machine's memcpy and loopback TCP bandwidth;
#   2. starts `meshctl up` on 127.0.0.1 in a temporary directory, with those
#      rates as the topology (--intra-gbps = memcpy, --inter-gbps = one TCP
#      stream), so the controller's predictions are for this machine;
#   3. runs the resharding suite (every strategy) and the control-plane
#      figures against it (the `collective` section only when asked for:
#      it takes minutes more; see below);
#   4. always stops the cluster (trap), and removes the directory unless
#      something failed (then it prints where the logs are).
# It builds nothing: build first, e.g.
#   cmake --build build --target meshctl meshcast-controller meshcast-worker \
#     cluster_bench gloo_collective_baseline
# Arguments go to cluster_bench (both runs; flags given later win), e.g.
#   bench/cluster/run_cluster_bench.sh --size_mib 32 --repeat 5
#   bench/cluster/run_cluster_bench.sh --cases all --strategies meshcast,send_recv
# The collectives (every op at 1, 16 and 64 MiB on WORKERSx1, next to Gloo's
# own between as many local processes, measured in the same run):
#   bench/cluster/run_cluster_bench.sh --sections collective
#   bench/cluster/run_cluster_bench.sh --sections reshard,control,collective
#   bench/cluster/run_cluster_bench.sh --sections collective \
#     --collective_mesh 2x2 --collective_sizes 4MiB,256MiB --repeat 3
# Environment: BUILD_DIR (default build), WORKERS (default 4), DEVICES (CPU
# devices per worker, default 4), INTER_GBPS / INTRA_GBPS (override the
# measured rates the controller plans with), CONTROLLER_FLAGS (extra
# meshcast-controller flags, e.g. cost-model settings), KEEP_DIR=1 (keep the
# cluster directory and its logs).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
WORKERS=${WORKERS:-4}
DEVICES=${DEVICES:-4}
meshctl="$BUILD_DIR/cli/meshctl"
bench="$BUILD_DIR/bench/cluster/cluster_bench"
for binary in "$meshctl" "$bench" "$BUILD_DIR/controller/meshcast-controller" \
  "$BUILD_DIR/worker/meshcast-worker"; do
  if [[ ! -x "$binary" ]]; then
    echo "run_cluster_bench: $binary not found; build it first: cmake --build" \
      "$BUILD_DIR --target meshctl meshcast-controller meshcast-worker" \
      "cluster_bench (or set BUILD_DIR)" >&2
    exit 2
  fi
done

dir="$(mktemp -d "${TMPDIR:-/tmp}/meshcast-cluster-bench.XXXXXX")"
status=1
cleanup() {
  # Stop whatever `up` started, even after a failed or interrupted run.
  if [[ -f "$dir/cluster/cluster.json" ]]; then
    "$meshctl" down --dir "$dir/cluster" >/dev/null 2>&1 || true
  fi
  if [[ "$status" == 0 && "${KEEP_DIR:-0}" != 1 ]]; then
    rm -rf "$dir"
  else
    echo "# cluster directory (logs): $dir" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$(date +%s)
cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "# run_cluster_bench: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores" \
  "(${cpu_model:-unknown CPU}), $(uname -sr), load average" \
  "$(cut -d' ' -f1-3 /proc/loadavg) at start"

# 1. Links, before any daemon runs.
"$bench" "$@" --sections=links --links_env="$dir/links.env"
# shellcheck disable=SC1091
source "$dir/links.env"
inter=${INTER_GBPS:-$TCP_GBPS}
intra=${INTRA_GBPS:-$MEMCPY_GBPS}

# 2. The cluster.
up_flags=(--workers "$WORKERS" --devices-per-worker "$DEVICES" --insecure
  --inter-gbps "$inter" --intra-gbps "$intra")
if [[ -n "${CONTROLLER_FLAGS:-}" ]]; then
  up_flags+=(--controller-flags "$CONTROLLER_FLAGS")
fi
echo "# meshctl up ${up_flags[*]}"
"$meshctl" up "${up_flags[@]}" --dir "$dir/cluster" --output json \
  >"$dir/up.json"
controller=$(grep -o '"controller": *"[^"]*"' "$dir/cluster/cluster.json" |
  head -1 | sed 's/.*"\([^"]*\)"$/\1/')
if [[ -z "$controller" ]]; then
  echo "run_cluster_bench: no controller address in $dir/cluster/cluster.json" >&2
  exit 1
fi

# 3. The benchmark (link figures from step 1, so they are not re-measured
# while the daemons run).
set +e
"$bench" --sections=reshard,control "$@" --controller="$controller" \
  --memcpy_gbps="$MEMCPY_GBPS" --tcp_gbps="$TCP_GBPS"
status=$?
set -e
echo "# run_cluster_bench: exit $status, $(($(date +%s) - start)) s, load" \
  "average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
exit "$status"
