# Sourced by the bench/*/run_*.sh wrappers: moves to the repository root,
# configures BUILD_DIR (default build) as a Release build when it has no
# build.ninja yet (MESHCAST_CUDA default OFF: the benchmarks need no device
# code), then builds the targets given, with JOBS (default: number of cores)
# jobs. Sets BUILD_DIR.
#
#   source "$(dirname "$0")/../common/build_targets.sh"
#   build_targets meshcast-controller meshcast-worker meshctl
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

build_targets() {
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DMESHCAST_CUDA="${MESHCAST_CUDA:-OFF}" >/dev/null
  fi
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "$@" >/dev/null
}
