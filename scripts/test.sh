#!/usr/bin/env bash
# Installs dependencies, builds everything and runs every test through CTest,
# then runs every fuzz target for a bounded time (docs/fuzzing.md;
# FUZZ_SECONDS=0 skips that part). This is the README's test command and
# what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 300 "$@"
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
if [ "$FUZZ_SECONDS" != "0" ]; then
  FUZZ_SECONDS=$FUZZ_SECONDS bash scripts/fuzz.sh
fi
