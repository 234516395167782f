#!/usr/bin/env bash
# gpu-check: builds meshcast with CUDA (MESHCAST_CUDA=ON) and runs, on this
# machine's GPUs, every GPU test (ctest -L gpu), the GPU benchmark
# (bench/gpu/gpu_bench: copy, reshard, NCCL and collective sections), the
# host-side checks of the GPU code, and end-to-end jobs on virtual GPU
# devices through controller, planner and worker (meshctl up / submit: one
# reshard, then every collective op), writing everything into one log. See
# docs/gpu.md.
#
#   scripts/gpu-check.sh [LOG]
#
# LOG defaults to $OUT/gpu-check.log when $OUT is set, else ./gpu-check.log.
# Meant for GPU machines: with no GPU visible to nvidia-smi it fails at once.
# Environment: BUILD_DIR (default build-gpu-check), JOBS (default nproc),
# CUDA_ARCH (default: the GPU's compute capability, e.g. 90),
# GPU_BENCH_FLAGS (extra gpu_bench flags), STEP_TIMEOUT (seconds per
# benchmark or end-to-end step, default 1800, so a hung NCCL call cannot
# stall the run), MESHCAST_INSTALL_DEPS=1 (run scripts/install-deps.sh
# first; needs network), MESHCAST_PREBUILT=TARBALL (a bundle made by
# scripts/gpu-bundle.sh on a build machine: no configure and no build; the
# bundle is unpacked into BUILD_DIR and its programs run with its own
# libraries, the machine's NCCL and cuBLAS, for a GPU machine without
# meshcast's build dependencies), GPU_CHECK_STEPS (comma-separated groups
# to run, default all: tests, host, bench, reshard, collective, tp_overlap,
# moe, attention, pipeline, reshard_model, calibrate; e.g. to rerun what
# failed), TP_OVERLAP_MODES, MOE_SCHEDULES, ATTENTION_ALGORITHMS,
# ATTENTION_PASSES, PIPELINE_SCHEDULES (the variants each end-to-end group
# submits, default every one).
# A failed step does not stop the run: later steps still run where they
# can (a failed build still runs the tests and tools that did build).
# Exit status: 0 if every step passed, 1 otherwise (the log's last lines
# list each step's result).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)

if [[ $# -ge 1 ]]; then
  LOG=$1
elif [[ -n "${OUT:-}" ]]; then
  LOG=$OUT/gpu-check.log
else
  LOG=$ROOT/gpu-check.log
fi
mkdir -p "$(dirname "$LOG")"
: >"$LOG"
BUILD_DIR=${BUILD_DIR:-build-gpu-check}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
JOBS=${JOBS:-$(nproc)}
STEP_TIMEOUT=${STEP_TIMEOUT:-1800}

log() { echo "$*" | tee -a "$LOG"; }
die() {
  log "gpu-check: FAILED: $*"
  exit 1
}

log "# meshcast gpu-check"
log "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
log "# host: $(hostname)"
log "# commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"

# 1. A GPU must be there: this script exists to exercise one.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  die "nvidia-smi not found: no NVIDIA driver on this machine; gpu-check needs a GPU machine"
fi
if ! GPUS=$(nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap \
              --format=csv,noheader 2>>"$LOG") || [[ -z "$GPUS" ]]; then
  die "nvidia-smi lists no GPU; gpu-check needs a GPU machine"
fi
log "# GPUs (index, name, memory, driver, compute capability):"
while IFS= read -r line; do log "#   $line"; done <<<"$GPUS"
if [[ -z "${CUDA_ARCH:-}" ]]; then
  CUDA_ARCH=$(head -n1 <<<"$GPUS" | awk -F', ' '{print $5}' | tr -d '.')
fi
log "# CUDA: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -n1)"
NCCL_H=/usr/local/cuda/include/nccl.h
if [[ -f $NCCL_H ]]; then
  log "# NCCL: $(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{v=v (v?".":"") $3} END{print v}' "$NCCL_H")"
fi
log "# GPU topology (nvidia-smi topo -m):"
nvidia-smi topo -m 2>&1 | sed 's/^/#   /' | tee -a "$LOG" >/dev/null
log "# building for sm_${CUDA_ARCH} in $BUILD_DIR with $JOBS jobs"

STEPS=${GPU_CHECK_STEPS:-all}
# wants GROUP: whether GPU_CHECK_STEPS asks for the group.
wants() { [[ $STEPS == all || ",$STEPS," == *",$1,"* ]]; }
E2E_GROUPS=(reshard collective tp_overlap moe attention pipeline reshard_model calibrate)
wants_e2e() {
  local group
  for group in "${E2E_GROUPS[@]}"; do wants "$group" && return 0; done
  return 1
}

declare -a RESULTS=()
FAILED=0
# run_step NAME COMMAND...: runs it with output into the log, records the result.
run_step() {
  local name=$1
  shift
  log ""
  log "## $name"
  log "\$ $*"
  local start=$SECONDS
  "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  local took=$((SECONDS - start))
  if [[ $rc -eq 0 ]]; then
    RESULTS+=("PASS  $name (${took}s)")
  else
    RESULTS+=("FAIL  $name (exit $rc, ${took}s)")
    FAILED=1
  fi
  return "$rc"
}

# skip_step NAME WHY: records a step that could not run (counts as failed).
skip_step() {
  log ""
  log "## $1"
  log "not run: $2"
  RESULTS+=("FAIL  $1 (not run: $2)")
  FAILED=1
}

# Prints the per-step results and exits 1 if any step failed.
finish() {
  log ""
  log "## summary ($(date -u '+%Y-%m-%d %H:%M:%S UTC'))"
  for r in "${RESULTS[@]}"; do log "  $r"; done
  if [[ $FAILED -ne 0 ]]; then
    log "gpu-check: FAILED (see $LOG)"
    exit 1
  fi
  log "gpu-check: all steps passed (log: $LOG)"
  exit 0
}

# Where a prebuilt bundle runs: the machine's NCCL and cuBLAS (a CUDA
# toolkit's lib64, a distribution's, or the NVIDIA wheels of a Python
# environment), in the first directory that has each.
find_gpu_library() {
  find /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    /usr/lib/x86_64-linux-gnu /usr/local /opt -xdev -name "$1" \
    \( -type f -o -type l \) 2>/dev/null | head -n1
}

use_prebuilt() {
  local tarball=$1
  [[ -f $tarball ]] || die "MESHCAST_PREBUILT=$tarball: no such file"
  rm -rf "$BUILD_DIR" && mkdir -p "$BUILD_DIR" &&
    tar -C "$BUILD_DIR" -xzf "$tarball" || die "cannot unpack $tarball"
  log "# prebuilt bundle: $tarball"
  sed -n '1,3p' "$BUILD_DIR/manifest.txt" | sed 's/^/#   /' | tee -a "$LOG" >/dev/null
  # A library the machine has under the same soname (the same ABI) is
  # taken from the machine: a second copy of a system library in one
  # process can break what loads the machine's own plugins into it (NCCL
  # opens libibverbs, whose providers must match it).
  local shadowed=0 lib path
  mkdir -p "$BUILD_DIR/lib-shadowed"
  for path in "$BUILD_DIR"/lib/*; do
    lib=$(basename "$path")
    if ldconfig -p | grep -q "^[[:space:]]*$lib "; then
      mv "$path" "$BUILD_DIR/lib-shadowed/" && shadowed=$((shadowed + 1))
    fi
  done
  log "# bundle libraries: $(ls "$BUILD_DIR/lib" | wc -l) used, $shadowed left for the machine's own (same soname)"
  local dirs=$BUILD_DIR/lib
  for lib in libnccl.so.2 libcublas.so.13 libcublasLt.so.13; do
    path=$(find_gpu_library "$lib")
    if [[ -z $path ]]; then
      log "# $lib: not found on this machine"
      continue
    fi
    log "# $lib: $path"
    dirs+=":$(dirname "$path")"
  done
  export LD_LIBRARY_PATH=$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export MESHCAST_PUBLIC_SUITE=${MESHCAST_PUBLIC_SUITE:-$ROOT/bench/workloads/public_suite.txt}
  local missing
  missing=$(ldd "$BUILD_DIR/worker/meshcast-worker" | grep 'not found' || true)
  [[ -z $missing ]] || log "# meshcast-worker cannot load: $missing"
}

# run_gpu_tests_from_list: the bundle's gpu-tests.txt, `<program> <filter>`.
run_gpu_tests_from_list() {
  local program filter rc=0
  while read -r program filter; do
    echo "### $program"
    (cd "$(dirname "$BUILD_DIR/$program")" &&
      timeout --kill-after=30 "$STEP_TIMEOUT" "$BUILD_DIR/$program" \
        --gtest_filter="$filter" --gtest_also_run_disabled_tests) || rc=1
  done <"$BUILD_DIR/gpu-tests.txt"
  return $rc
}

if [[ -n "${MESHCAST_PREBUILT:-}" ]]; then
  use_prebuilt "$MESHCAST_PREBUILT"
  if wants tests; then
    run_step "GPU tests (the bundle's gpu-tests.txt)" run_gpu_tests_from_list
  fi
elif [[ "${MESHCAST_INSTALL_DEPS:-0}" == 1 ]]; then
  run_step "install dependencies" bash scripts/install-deps.sh || die "dependencies"
fi
if [[ -z "${MESHCAST_PREBUILT:-}" ]]; then
  for tool in cmake ninja; do
    command -v "$tool" >/dev/null 2>&1 ||
      die "$tool not found (run scripts/install-deps.sh, or set MESHCAST_INSTALL_DEPS=1)"
  done

  # 2. Build with CUDA required. Without a configured tree nothing else can
  # run; a failed build keeps going (-k 0) and the steps below use whatever
  # did build.
  run_step "configure (MESHCAST_CUDA=ON)" \
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMESHCAST_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" || finish
  run_step "build" ninja -C "$BUILD_DIR" -j "$JOBS" -k 0

  # 3. Every GPU test. On a GPU nothing may skip except the tests that need
  # more GPUs than there are; the log lists what skipped.
  if wants tests; then
    run_step "GPU tests (ctest -L gpu)" \
      ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure --timeout 600 -V
  fi
fi
SKIPPED=$(grep -c '\[  SKIPPED \] [A-Za-z].*\.[A-Za-z].* ([0-9]* ms)' "$LOG" || true)
log "# GPU test cases skipped: $SKIPPED (expected only the 2-GPU cases on a 1-GPU machine)"

# The host-side halves of the GPU code (no GPU needed, built with it): the
# collectives' exchanges simulated over random groups, the relay schedule's
# invariants, the mismatch report's wording. (The kernels' element
# arithmetic against the CPU backend's bits is ElementCoreTest in
# worker_kernels_test, which every build runs.)
HOST_TESTS=()
for t in collective_exchange_test relay_schedule_test mismatch_report_test; do
  [[ -x $BUILD_DIR/worker/$t ]] && HOST_TESTS+=("$BUILD_DIR/worker/$t")
done
if ! wants host; then
  :
elif [[ ${#HOST_TESTS[@]} -eq 3 ]]; then
  run_step "host-side tests of the GPU code" \
    bash -c 'for t in "$@"; do "$t" || exit 1; done' _ "${HOST_TESTS[@]}"
else
  skip_step "host-side tests of the GPU code" "not all of them were built"
fi

# 4. The GPU benchmark (copy, reshard on virtual devices, NCCL, every
# collective through the engine's GPU kernels with algbw and busbw).
GPU_BENCH=$BUILD_DIR/bench/gpu/gpu_bench
if ! wants bench; then
  :
elif [[ -x $GPU_BENCH ]]; then
  # shellcheck disable=SC2086
  run_step "GPU benchmark (gpu_bench)" \
    timeout --kill-after=30 "$STEP_TIMEOUT" "$GPU_BENCH" ${GPU_BENCH_FLAGS:-}
else
  skip_step "GPU benchmark (gpu_bench)" "$GPU_BENCH was not built"
fi

# 5. End to end: a local cluster of one worker driving 8 virtual devices on
# GPU 0, one reshard job through controller, planner and GPU executor, every
# collective, an MoE layer in every schedule, attention, a pipeline step in
# every schedule, a model's weights to two replicas and the link
# calibration.
MESHCTL="$BUILD_DIR/cli/meshctl"
# submit_file WHAT FILE: one end-to-end job from a job file, waited for.
submit_file() {
  run_step "end to end: meshctl submit -f $1" \
    timeout --kill-after=30 "$STEP_TIMEOUT" \
    env MESHCAST_HOME="$E2E_DIR" "$MESHCTL" submit -f "$2" --wait
}

if ! wants_e2e; then
  :
elif [[ -x $MESHCTL && -x $BUILD_DIR/worker/meshcast-worker &&
      -x $BUILD_DIR/controller/meshcast-controller ]]; then
  E2E_DIR=$(mktemp -d)
  cleanup() { "$MESHCTL" down --dir "$E2E_DIR" >/dev/null 2>&1 || true; }
  trap cleanup EXIT
  if run_step "end to end: meshctl up (1 worker, --devices=cuda:0x8)" \
      timeout --kill-after=30 "$STEP_TIMEOUT" \
      "$MESHCTL" up --dir "$E2E_DIR" --workers 1 --devices-per-worker 8 \
      --worker-flags "--devices=cuda:0x8"; then
    wants reshard && run_step "end to end: meshctl submit reshard --wait" \
      timeout --kill-after=30 "$STEP_TIMEOUT" \
      env MESHCAST_HOME="$E2E_DIR" "$MESHCTL" submit reshard \
      --shape 256x1024x64 --dtype int32 \
      --src-devices 0,1,2,3 --src-shape 2x2 --src-spec S0RR \
      --dst-devices 4,5,6,7 --dst-shape 2x2 --dst-spec RS0R \
      --allow-overlap --wait
    # Every collective of the `collective` kind on the same 8 virtual
    # devices: the engine's GPU kernels, verified, with algbw and busbw.
    wants collective || COLLECTIVE_OPS=""
    for op in ${COLLECTIVE_OPS-all_reduce all_gather reduce_scatter all_to_all broadcast}; do
      run_step "end to end: meshctl submit collective --op $op" \
        timeout --kill-after=30 "$STEP_TIMEOUT" \
        env MESHCAST_HOME="$E2E_DIR" "$MESHCTL" submit collective \
        --op "$op" --mesh 1x8 --bytes 64MiB --dtype float32 --wait
    done
    # A GEMM fused with the reduce-scatter that consumes it (docs/cli.md,
    # tp_overlap) in every mode on 4 of the devices: cuBLAS GEMMs, chunked
    # and tile-triggered collectives. A small verified job, then a large
    # one (sampled verification) for the overlap figures.
    wants tp_overlap || TP_OVERLAP_MODES=""
    for mode in ${TP_OVERLAP_MODES-sequential chunked fused auto}; do
      printf 'verify: full\ntp_overlap: {m: 1024, n: 1024, k: 2048, dtype: float32, mesh: 1x4, collective: reduce_scatter, mode: %s}\n' \
        "$mode" >"$E2E_DIR/tp-overlap-$mode.yaml"
      submit_file "tp_overlap ($mode, verified)" "$E2E_DIR/tp-overlap-$mode.yaml"
      printf 'verify: sample\ntp_overlap: {m: 8192, n: 8192, k: 8192, dtype: bfloat16, mesh: 1x4, collective: reduce_scatter, mode: %s}\n' \
        "$mode" >"$E2E_DIR/tp-overlap-large-$mode.yaml"
      submit_file "tp_overlap ($mode, 8192x8192x8192 bf16)" "$E2E_DIR/tp-overlap-large-$mode.yaml"
    done
    # An MoE layer (docs/moe.md) in every schedule on the same devices,
    # forward and forward_backward: the GPU's gather, ReLU, sigmoid, their
    # gradients, row dot and GEMM kernels with the all-to-all, all-gather
    # and reduce-scatter/all-reduce, verified.
    wants moe || MOE_SCHEDULES=""
    for pass in forward forward_backward; do
      for schedule in ${MOE_SCHEDULES-baseline s1 s2}; do
        printf 'verify: full\nmoe: {tokens: 1024, hidden: 256, ffn: 512, experts: 8, top_k: 2, capacity_factor: 1.2, mesh: 1x8, schedule: %s, pass: %s}\n' \
          "$schedule" "$pass" >"$E2E_DIR/moe-$schedule-$pass.yaml"
        submit_file "moe ($schedule, $pass)" "$E2E_DIR/moe-$schedule-$pass.yaml"
      done
    done
    # Sequence-parallel attention (docs/attention.md), every algorithm on
    # the 8 virtual devices, causal with the zigzag layout: the GPU's
    # attention block, finish and backward kernels with send/recv and
    # all-to-all (the backward smaller: its float64 reference recomputes
    # every block on the host).
    wants attention || ATTENTION_ALGORITHMS=""
    for pass in ${ATTENTION_PASSES-forward forward_backward}; do
      size="heads: 8, kv_heads: 8, seq_len: 4096"
      [ "$pass" = forward ] || size="heads: 8, kv_heads: 8, seq_len: 2048"
      for algorithm in ${ATTENTION_ALGORITHMS-rsa ring ulysses}; do
        printf 'verify: full\nattention: {batch: 1, %s, head_dim: 64, causal: true, layout: zigzag, mesh: 1x8, algorithm: %s, pass: %s}\n' \
          "$size" "$algorithm" "$pass" >"$E2E_DIR/attention-$algorithm-$pass.yaml"
        submit_file "attention ($algorithm, $pass)" "$E2E_DIR/attention-$algorithm-$pass.yaml"
      done
    done
    # A pipeline training step (docs/pipeline.md) of two stages of 4
    # virtual devices, in every schedule: GEMM, ReLU and its gradient,
    # all-reduce and all-gather inside each stage, the resharding sends
    # between them, verified (sized so that the float64 reference of the
    # whole step takes seconds: hidden 512 with 512 rows took minutes).
    wants pipeline || PIPELINE_SCHEDULES=""
    for schedule in ${PIPELINE_SCHEDULES-eager_1f1b 1f1b gpipe}; do
      printf 'verify: full\npipeline: {stages: [{mesh: 1x4, input_spec: "S0,R", output_spec: "R,S1"}, {mesh: 1x4, input_spec: "R,S1", output_spec: "R,R"}], microbatches: 8, microbatch_size: 128, hidden: 256, layers_per_stage: 2, schedule: %s}\n' \
        "$schedule" >"$E2E_DIR/pipeline-$schedule.yaml"
      submit_file "pipeline ($schedule)" "$E2E_DIR/pipeline-$schedule.yaml"
    done
    # A Llama-like model's weights (docs/reshard_model.md) from a 1x4
    # training mesh to two 1x2 inference replicas, every tensor verified.
    printf 'verify: full\nreshard_model: {src_mesh: 1x4, dst_meshes: [1x2, 1x2], preset: {family: llama, layers: 4, hidden: 1024, heads: 16, kv_heads: 4, vocab: 32000}}\n' \
      >"$E2E_DIR/reshard-model.yaml"
    wants reshard_model && submit_file "reshard_model (llama preset)" "$E2E_DIR/reshard-model.yaml"
    # The link calibration (docs/calibration.md) of the 8 virtual devices'
    # collectives over NCCL, and the fit it stores.
    wants calibrate && run_step "end to end: meshctl calibrate --mesh 1x8" \
      timeout --kill-after=30 "$STEP_TIMEOUT" \
      env MESHCAST_HOME="$E2E_DIR" "$MESHCTL" calibrate --mesh 1x8 \
      --max-size 64MiB
  fi
  # The daemons' logs, also when start-up failed (that is when they matter).
  while IFS= read -r f; do
    log "### ${f#"$E2E_DIR"/} (last 30 lines)"
    tail -n 30 "$f" | tee -a "$LOG"
  done < <(find "$E2E_DIR" -name '*.log' -type f | sort)
else
  skip_step "end to end" "meshctl, meshcast-worker or meshcast-controller was not built"
fi

finish
