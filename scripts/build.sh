#!/usr/bin/env bash
# Configures and builds meshcast into build/ (Release, Ninja).
# Environment: BUILD_DIR (default build), MESHCAST_CUDA (AUTO|ON|OFF),
# JOBS (default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMESHCAST_CUDA="${MESHCAST_CUDA:-AUTO}" >"${BUILD_DIR}.configure.log" 2>&1 \
  || { cat "${BUILD_DIR}.configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j "$JOBS"
