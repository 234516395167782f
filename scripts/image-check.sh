#!/usr/bin/env bash
# Builds the meshcast container images and proves they work together: a
# controller and two CPU workers on a private container network run a
# verified resharding job, and both daemons serve their metrics.
#
#   scripts/image-check.sh                 # build, run, check, clean up
#   scripts/image-check.sh --no-build      # reuse meshcast-*:local images
#   ENGINE=podman scripts/image-check.sh   # docker is the default if present
#
# Options:
#   --no-build   use the existing meshcast-controller:local and
#                meshcast-worker-cpu:local images
#   --keep       leave the containers and network running at the end
#   --help       this text
# Environment:
#   ENGINE             docker or podman (default: docker, else podman)
#   RUN_FLAGS          extra flags for every `ENGINE run`, e.g. for podman in
#                      a VM without CAP_SYS_RESOURCE: "--runtime runc
#                      --ulimit nofile=20000:20000 --ulimit nproc=4096:4096"
#   BUILD_FLAGS        extra flags for `ENGINE build` (e.g. "--pull=never")
#   TIMEOUT_SECONDS    how long to wait for workers and the job (default 300)
#
# The GPU worker image (Dockerfile.worker with its CUDA defaults) is not
# built here: it needs NVIDIA's base images; see docs/deploy.md.
# Exit status: 0 when every check passed, 1 otherwise, 2 on bad usage.
set -euo pipefail

usage() { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; }

build=1
keep=0
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    --keep) keep=1 ;;
    --help|-h) usage; exit 0 ;;
    *) echo "image-check: unknown option '$arg'; allowed: --no-build, --keep, --help" >&2
       exit 2 ;;
  esac
done

engine=${ENGINE:-}
if [ -z "$engine" ]; then
  if command -v docker >/dev/null 2>&1; then engine=docker
  elif command -v podman >/dev/null 2>&1; then engine=podman
  else
    echo "image-check: neither docker nor podman is installed; set ENGINE" >&2
    exit 2
  fi
fi
case "$engine" in
  docker|podman) ;;
  *) echo "image-check: ENGINE must be docker or podman, got '$engine'" >&2; exit 2 ;;
esac
timeout_s=${TIMEOUT_SECONDS:-300}
read -r -a run_flags <<<"${RUN_FLAGS:-}"
read -r -a build_flags <<<"${BUILD_FLAGS:-}"

cd "$(dirname "$0")/.."
suffix=$$
net=meshcast-check-$suffix
controller=meshcast-check-controller-$suffix
workers=(meshcast-check-worker-0-$suffix meshcast-check-worker-1-$suffix)

log() { echo "image-check: $*"; }
fail() { echo "image-check: FAILED: $*" >&2; exit 1; }

cleanup() {
  if [ "$keep" = 1 ]; then
    log "kept: network $net, containers $controller ${workers[*]}"
    return
  fi
  "$engine" rm -f "$controller" "${workers[@]}" >/dev/null 2>&1 || true
  "$engine" network rm "$net" >/dev/null 2>&1 || true
}
trap cleanup EXIT

if [ "$build" = 1 ]; then
  start=$(date +%s)
  log "building meshcast-controller:local"
  "$engine" build "${build_flags[@]}" -f deploy/docker/Dockerfile.controller \
    -t meshcast-controller:local .
  log "building meshcast-worker-cpu:local"
  "$engine" build "${build_flags[@]}" -f deploy/docker/Dockerfile.worker \
    -t meshcast-worker-cpu:local \
    --build-arg BUILD_IMAGE=debian:bookworm \
    --build-arg RUNTIME_IMAGE=debian:bookworm-slim \
    --build-arg MESHCAST_CUDA=OFF .
  log "images built in $(( $(date +%s) - start )) s"
fi
"$engine" image inspect meshcast-controller:local meshcast-worker-cpu:local \
  >/dev/null || fail "images missing; run without --no-build"

"$engine" network create "$net" >/dev/null
log "network $net"
"$engine" run -d "${run_flags[@]}" --name "$controller" --network "$net" \
  --network-alias controller meshcast-controller:local \
  --listen=0.0.0.0:50051 --db=/var/lib/meshcast/controller.db \
  --metrics-port=9401 --insecure >/dev/null
for i in 0 1; do
  "$engine" run -d "${run_flags[@]}" --name "${workers[$i]}" \
    --hostname "worker-$i" --network "$net" --network-alias "worker-$i" \
    --shm-size 1g meshcast-worker-cpu:local \
    --controller=controller:50051 --listen=0.0.0.0:50052 --devices=cpu:4 \
    --metrics-port=9402 --name="worker-$i" --data-address="worker-$i" \
    --insecure >/dev/null
done

meshctl() { "$engine" exec "$controller" meshctl "$@"; }

# Both workers registered and ready.
deadline=$(( $(date +%s) + timeout_s ))
until meshctl cluster --controller localhost:50051 --output json 2>/dev/null |
      grep -o '"state":"ready"' | wc -l | grep -qx 2; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    "$engine" logs "$controller" 2>&1 | tail -20 >&2 || true
    fail "the workers did not register within ${timeout_s} s"
  fi
  sleep 1
done
meshctl cluster --controller localhost:50051

# A job across both workers; meshctl exits 0 only if every destination
# element was verified with no mismatch.
log "running a verified resharding job across the two workers"
if ! timeout "$timeout_s" "$engine" exec "$controller" meshctl submit reshard \
    --controller localhost:50051 --wait --name image-check \
    --shape 512x512x64 --dtype int32 \
    --src-mesh 1x4 --src-spec S0RR --dst-mesh 1x4 --dst-spec RS0R; then
  for c in "$controller" "${workers[@]}"; do
    echo "--- logs of $c" >&2
    "$engine" logs "$c" 2>&1 | tail -20 >&2 || true
  done
  fail "the job did not succeed"
fi

# Metrics, fetched inside each container with bash's /dev/tcp (the runtime
# images carry no HTTP client).
scrape() {
  "$engine" exec "$1" bash -c "exec 3<>/dev/tcp/127.0.0.1/$2 &&
    printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 && cat <&3"
}
scrape "$controller" 9401 |
  grep -q 'meshcast_controller_jobs_finished_total{type="reshard",state="succeeded"} 1' ||
  fail "the controller's metrics do not count the succeeded job"
for w in "${workers[@]}"; do
  scrape "$w" 9402 | grep -q '^meshcast_build_info{component="worker"' ||
    fail "$w serves no worker metrics"
done
log "metrics: controller counts the job; both workers serve /metrics"

"$engine" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' |
  grep -E 'meshcast-(controller|worker-cpu):local' || true
log "PASSED ($engine)"
