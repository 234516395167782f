#!/usr/bin/env bash
# Smoke test of run_cluster_bench.sh (ctest cluster_bench_smoke): a tiny run
# on a real local cluster (every section, the collectives with their Gloo
# baseline included) must succeed with every figure printed and leave no
# daemon or directory behind; a run that fails after the cluster started
# (a bad flag) must exit non-zero and still stop every daemon.
# Environment: BUILD_DIR (the build with meshctl, the daemons and
# cluster_bench).
set -euo pipefail
script="$(cd "$(dirname "$0")" && pwd)/run_cluster_bench.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export TMPDIR="$tmp"  # the script's cluster directory goes in here
out="$tmp/out.log"

fail() {
  echo "FAIL: $*"
  exit 1
}
expect_line() {
  grep -qE "$1" "$out" || fail "no output line matches: $1"
}
expect_nothing_running() {
  # The controller's command line names the cluster directory, the workers'
  # the controller's address (which the benchmark prints).
  local address
  address=$(sed -n 's/^# cluster \([0-9.]*:[0-9]*\): .*/\1/p' "$out" | head -1)
  [[ -n "$address" ]] || fail "$1: no '# cluster ADDRESS:' line"
  if pgrep -f "$tmp/meshcast-cluster-bench" >/dev/null ||
    pgrep -f -- "--controller=$address" >/dev/null; then
    pgrep -af "$tmp/meshcast-cluster-bench|--controller=$address" || true
    fail "$1: cluster processes still running"
  fi
}

# shellcheck disable=SC2054  # the commas belong to the flag values
small=(--size_mib=2 "--cases=case1,1-to-m(2,2)" --strategies=meshcast,send_recv
  --warmup=0 --repeat=1 --latency_jobs=10 --load_clients=2 --load_seconds=1
  --memcpy_bytes=16777216 --tcp_bytes=16777216 --link_repeats=1
  --sections=reshard,control,collective --collective_sizes=64KiB
  --collective_iterations=2 --gloo_iters=2 --gloo_warmup=1)

rc=0
timeout 100 "$script" "${small[@]}" >"$out" 2>&1 || rc=$?
cat "$out"
[[ $rc == 0 ]] || fail "run_cluster_bench.sh exited $rc"
expect_line '^# Summary: memcpy [0-9.]+ Gbps \(one thread\), loopback TCP [0-9.]+ Gbps'
expect_line '^ case1 +4194304 meshcast +[0-9.]+ +[0-9.]+ .* 0  ok$'
expect_line '^ 1-to-m\(2,2\) +4194304 send_recv +[0-9.]+ '
expect_line '^# Summary: 4/4 rows ok, 0 mismatches'
expect_line '^ sequential +1 +10 +10 '
expect_line '^ concurrent +2 +[1-9][0-9]* '
expect_line '^# Summary: tiny-job submit-to-done p50 [0-9.]+ ms, p99 [0-9.]+ ms'
for op in all_reduce all_gather reduce_scatter all_to_all broadcast; do
  # size, count, type, then meshcast's and Gloo's figures, 0 wrong, ok.
  expect_line "^ $op +65536 +16384 +float( +[0-9.]+){9} +0  ok$"
done
expect_line '^# Summary: 5/5 rows ok, 0 mismatches; avg busbw [0-9.]+ GB/s \(gloo [0-9.]+ GB/s'
expect_nothing_running "after a successful run"
if compgen -G "$tmp/meshcast-cluster-bench.*" >/dev/null; then
  fail "the cluster directory was kept after a successful run"
fi

rc=0
timeout 60 "$script" "${small[@]}" --strategies=bogus >"$out" 2>&1 || rc=$?
cat "$out"
[[ $rc != 0 ]] || fail "a run with --strategies=bogus exited 0"
expect_line 'strategies: unknown .bogus'
expect_line '^# cluster directory \(logs\): '
expect_nothing_running "after a failed run"
echo "PASS"
