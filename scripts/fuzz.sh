#!/usr/bin/env bash
# Builds the fuzz targets with clang, libFuzzer, ASan and UBSan in
# build-fuzz/ and runs each for a bounded time on a copy of its checked-in
# corpus (fuzz/corpus/<target>). Exits non-zero on the first crash, leak or
# sanitizer report, leaving the reproducer in build-fuzz/artifacts/.
#
#   bash scripts/fuzz.sh                 # 30 s per target
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh parsers_fuzz
#   FUZZ_SEED=0 bash scripts/fuzz.sh     # a random seed (default: 1)
#
# The seed is fixed by default so that a short run (CI) explores a prefix of
# what a longer run with the same seed explores: a crash CI could meet is
# found first by a longer run here.
#
# New interesting inputs stay in build-fuzz/corpus/; copy the small ones
# worth keeping into fuzz/corpus/ by hand (docs/fuzzing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
FUZZ_SEED=${FUZZ_SEED:-1}
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(parsers_fuzz job_file_fuzz worker_program_fuzz controller_requests_fuzz)
fi
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (scripts/install-deps.sh installs clang)" >&2
  exit 1
fi
if [ ! -f "$BUILD/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESHCAST_FUZZ=ON \
    -DMESHCAST_BUILD_TESTS=OFF -DMESHCAST_BUILD_BENCH=OFF -DMESHCAST_CUDA=OFF \
    > "$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log"; exit 1; }
fi
echo "fuzz: building ${targets[*]} (clang, libFuzzer, ASan, UBSan)"
cmake --build "$BUILD" --target "${targets[@]}" -j "$(nproc)"
mkdir -p "$BUILD/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for target in "${targets[@]}"; do
  corpus_name=${target%_fuzz}
  work="$BUILD/corpus/$corpus_name"
  mkdir -p "$work"
  cp -n fuzz/corpus/"$corpus_name"/* "$work"/ 2>/dev/null || true
  echo "fuzz: $target for ${FUZZ_SECONDS}s on $(ls "$work" | wc -l) inputs"
  "$BUILD/fuzz/$target" "$work" \
    -max_total_time="$FUZZ_SECONDS" -seed="$FUZZ_SEED" -timeout=25 \
    -rss_limit_mb=4096 \
    -artifact_prefix="$BUILD/artifacts/$target-" -print_final_stats=1 \
    > "$BUILD/$target.log" 2>&1 || {
      tail -60 "$BUILD/$target.log"
      echo "fuzz: $target FAILED; reproducer in $BUILD/artifacts/" >&2
      exit 1
    }
  grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$BUILD/$target.log" | tail -2
done
echo "fuzz: ${#targets[@]} targets ran ${FUZZ_SECONDS}s each without a crash"
