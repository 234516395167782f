#!/usr/bin/env bash
# netcluster.sh: an emulated multi-host meshcast cluster on one Linux machine.
#
# Every "host" is a network namespace with one veth link to a bridge (in a
# namespace of its own); each link is rate-limited with tc in both directions
# (egress shaping on both ends of the veth, so what a host receives is capped
# as well as what it sends), optionally with netem delay. The controller runs
# in its own namespace on an unshaped link; each host namespace runs one
# meshcast-worker with K virtual CPU devices. The controller is told the
# emulated NIC rate (as TCP goodput), the memory-copy capacity a worker's K
# devices share (calibrated with a real worker, or memcpy, or given), the
# per-device bandwidth inside a host (memcpy, or calibrated, or given) and a
# fixed start-up time per transfer, so the planner's topology matches what
# the transfers will see.
#
#   scripts/netcluster.sh up [--hosts 4] [--devices 2] [--rate 1gbit] \
#       [--delay 0ms] [--dir .netcluster] [--bin-dir build] [--id nc]
#   scripts/netcluster.sh exec [--dir D] -- meshctl submit reshard ... --wait
#   scripts/netcluster.sh status [--dir D]
#   scripts/netcluster.sh check [--dir D] [--bytes N]   # measure link rates
#   scripts/netcluster.sh link HOST down|up [--dir D]   # cut / restore a link
#   scripts/netcluster.sh down [--dir D] [--id ID]
#
# Names: namespaces mc-<id>-br (bridge), mc-<id>-ctl (controller) and
# mc-<id>-h<i> (hosts), so clusters with different --id run side by side.
# Addresses 10.213.0.0/24 exist only inside those namespaces (controller
# .2, host i .(10+i)); the root namespace is not touched. `exec` runs a
# command in the controller's namespace with MESHCAST_CONTROLLER set, which
# is how meshctl reaches the cluster.
#
# `up` writes D/netcluster.env (shell syntax) and returns once every worker
# has registered; on any failure it tears down what it built. `down` kills
# the daemons and everything else left in the cluster's namespaces, deletes
# the namespaces (and with them the veths and the bridge), and succeeds
# whatever state a previous run left behind. Requires root, iproute2 and
# python3.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly SUBNET_PREFIX="10.213.0"
readonly CONTROLLER_ADDR="${SUBNET_PREFIX}.2"
readonly FIRST_HOST_OCTET=10
readonly MAX_HOSTS=200

# Defaults; flags override.
cmd=""
id=""
hosts=4
devices=2
rate="1gbit"
delay="0ms"
dir=""
bin_dir=""
intra_gbps=""
inter_gbps=""
host_copy_gbps=""
transfer_setup_us=300
mtu=1500
port=50051
worker_port=50052
register_timeout=60
lease_seconds=5
check_bytes=$((64 << 20))
controller_args=""
worker_args=""
link_host=""
link_state=""
with_daemons=1
exec_args=()

usage() {
  cat <<'EOF'
usage: netcluster.sh COMMAND [flags]

commands:
  up       create the namespaces, links and shaping; start the controller and
           one worker per host; wait until every worker has registered
  down     stop the daemons and delete the namespaces (idempotent)
  status   show namespaces, daemons, shaping counters and the cluster
  exec     run a command in the controller namespace with
           MESHCAST_CONTROLLER set:  exec [--dir D] -- meshctl cluster
  check    measure each host link's rate with TCP transfers between hosts
  link     cut or restore a host's link:  link HOST down|up  (HOST: 0..H-1)

flags (up):
  --hosts H            emulated hosts, 1..200 (default 4)
  --devices K          CPU devices per worker (default 2)
  --rate R             link rate each way, tc units bit|kbit|mbit|gbit
                       (default 1gbit)
  --delay D            added one-way delay on each end of each host link,
                       tc time units such as 0ms, 500us (default 0ms; needs
                       the sch_netem kernel module)
  --mtu M              MTU of the emulated links (default 1500)
  --host-copy-gbps G|memcpy|calibrate|probed
                       memory-copy capacity of each host for the planner,
                       shared by its K devices (copies inside the host and
                       the pack/unpack of slices that cross hosts): a number
                       (Gbit/s; 0 = unlimited, no such resource); memcpy:
                       this machine's single-thread memcpy speed; calibrate
                       (the default with K >= 2 devices): what a worker's K
                       devices copy together, measured with an intra-host
                       job on a throw-away controller before the cluster
                       starts (they share the worker's cores); probed: what
                       each worker measures itself when it starts (its
                       --probe-rates), the controller taking the slowest
  --intra-gbps G|memcpy|calibrate
                       per-device bandwidth inside a host for the planner:
                       a number (Gbit/s); memcpy (the default): this
                       machine's single-thread memcpy speed, one copy at a
                       time per device; calibrate: fold the shared copy
                       capacity into each device's port instead (the model
                       before --host-copy-gbps, which then defaults to 0)
  --transfer-setup-us U
                       fixed start-up time of every transfer for the planner
                       (thread start, tag matching, a round trip),
                       microseconds (default 300; 0 = none)
  --inter-gbps G       NIC bandwidth for the planner (default: the TCP goodput
                       of --rate at --mtu: rate x (mtu-52)/(mtu+14))
  --port P             controller port (default 50051; workers use 50052)
  --lease-seconds S    controller worker lease (default 5)
  --register-timeout S how long to wait for workers (default 60)
  --controller-args A  extra flags for meshcast-controller (one string)
  --worker-args A      extra flags for every meshcast-worker (one string)
  --no-daemons         only the network (namespaces, links, shaping); for
                       testing the emulation itself with 'check'
  --bin-dir B          directory (or build directory) holding
                       meshcast-controller, meshcast-worker and meshctl
                       (default: $MESHCAST_BUILD_DIR, else <repo>/build)
flags (all):
  --dir D              state directory: netcluster.env, logs, database
                       (default ./.netcluster)
  --id ID              namespace prefix mc-ID-, [a-z0-9]{1,12} (default: the
                       one recorded in D, else "nc")
  --bytes N            bytes per transfer for check (default 64 MiB)
EOF
}

die() {
  echo "netcluster: $*" >&2
  exit 1
}

log() { echo "netcluster: $*" >&2; }

parse_args() {
  [[ $# -ge 1 ]] || { usage >&2; exit 2; }
  cmd="$1"
  shift
  case "$cmd" in
    up | down | status | exec | check | link) ;;
    -h | --help | help) usage; exit 0 ;;
    *) echo "netcluster: unknown command '$cmd'; allowed: up, down, status, exec, check, link" >&2; exit 2 ;;
  esac
  if [[ "$cmd" == link ]]; then
    [[ $# -ge 2 ]] || die "link needs HOST and down|up, e.g. 'link 1 down'"
    link_host="$1"
    link_state="$2"
    shift 2
    [[ "$link_host" =~ ^[0-9]+$ ]] || die "link HOST must be a host index (0..H-1), got '$link_host'"
    [[ "$link_state" == up || "$link_state" == down ]] || die "link state must be 'down' or 'up', got '$link_state'"
  fi
  while [[ $# -gt 0 ]]; do
    local flag="$1"
    local value=""
    if [[ "$flag" == --no-daemons ]]; then
      with_daemons=0
      shift
      continue
    elif [[ "$flag" == --*=* ]]; then
      value="${flag#*=}"
      flag="${flag%%=*}"
    elif [[ "$flag" == -- ]]; then
      shift
      exec_args=("$@")
      break
    elif [[ $# -ge 2 ]]; then
      value="$2"
      shift
    elif [[ "$flag" != -h && "$flag" != --help ]]; then
      die "flag $flag needs a value"
    fi
    shift
    case "$flag" in
      -h | --help) usage; exit 0 ;;
      --hosts) hosts="$value" ;;
      --devices) devices="$value" ;;
      --rate) rate="$value" ;;
      --delay) delay="$value" ;;
      --dir) dir="$value" ;;
      --bin-dir) bin_dir="$value" ;;
      --id) id="$value" ;;
      --mtu) mtu="$value" ;;
      --intra-gbps) intra_gbps="$value" ;;
      --inter-gbps) inter_gbps="$value" ;;
      --host-copy-gbps) host_copy_gbps="$value" ;;
      --transfer-setup-us) transfer_setup_us="$value" ;;
      --port) port="$value" ;;
      --lease-seconds) lease_seconds="$value" ;;
      --register-timeout) register_timeout="$value" ;;
      --controller-args) controller_args="$value" ;;
      --worker-args) worker_args="$value" ;;
      --bytes) check_bytes="$value" ;;
      *) die "unknown flag '$flag' (see --help)" ;;
    esac
  done
  dir="${dir:-${NETCLUSTER_DIR:-$PWD/.netcluster}}"
  dir="$(realpath -m "$dir")"
}

# Rate "1gbit" / "200mbit" / "500kbit" / "1000000bit" -> bits per second.
rate_to_bits() {
  local text="${1,,}"
  [[ "$text" =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit)$ ]] ||
    die "--rate must be a number with a unit bit, kbit, mbit or gbit (e.g. 1gbit, 300mbit), got '$1'"
  local number="${BASH_REMATCH[1]}" unit="${BASH_REMATCH[3]}" scale=1
  case "$unit" in
    kbit) scale=1000 ;;
    mbit) scale=1000000 ;;
    gbit) scale=1000000000 ;;
  esac
  python3 -c "print(int(round(float('$number') * $scale)))"
}

# Delay "0ms" / "1.5ms" / "500us" / "0" -> microseconds.
delay_to_us() {
  local text="${1,,}"
  [[ "$text" =~ ^([0-9]+(\.[0-9]+)?)(s|ms|us|)$ ]] ||
    die "--delay must be a number with a unit s, ms or us (e.g. 0ms, 2ms, 500us), got '$1'"
  local number="${BASH_REMATCH[1]}" unit="${BASH_REMATCH[3]}" scale=1
  case "$unit" in
    s) scale=1000000 ;;
    ms | "") scale=1000 ;;
  esac
  python3 -c "print(int(round(float('$number') * $scale)))"
}

is_positive_number() {
  [[ "$1" =~ ^[0-9]+(\.[0-9]+)?$ ]] && python3 -c "import sys; sys.exit(0 if float('$1') > 0 else 1)"
}

is_non_negative_number() {
  [[ "$1" =~ ^[0-9]+(\.[0-9]+)?$ ]]
}

# Namespace and interface names of cluster $id.
bridge_ns() { echo "mc-${id}-br"; }
controller_ns() { echo "mc-${id}-ctl"; }
host_ns() { echo "mc-${id}-h$1"; }
host_addr() { echo "${SUBNET_PREFIX}.$((FIRST_HOST_OCTET + $1))"; }
# Bridge-side end of host i's veth (inside the bridge namespace).
bridge_port() { echo "h$1"; }

env_file() { echo "$dir/netcluster.env"; }

# Loads D/netcluster.env if present (our own file, written with %q quoting).
load_env() {
  if [[ -f "$(env_file)" ]]; then
    # shellcheck disable=SC1090
    source "$(env_file)"
    id="${id:-${NETCLUSTER_ID:-}}"
  fi
  if [[ -f "$dir/id" && -z "$id" ]]; then
    id="$(cat "$dir/id")"
  fi
  id="${id:-nc}"
  [[ "$id" =~ ^[a-z0-9]{1,12}$ ]] || die "--id must match [a-z0-9]{1,12}, got '$id'"
}

require_root() {
  [[ "$(id -u)" -eq 0 ]] || die "must run as root (network namespaces and tc need CAP_NET_ADMIN)"
  command -v ip >/dev/null || die "'ip' not found: install iproute2 (scripts/install-deps.sh)"
  command -v tc >/dev/null || die "'tc' not found: install iproute2 (scripts/install-deps.sh)"
  command -v python3 >/dev/null || die "python3 not found (scripts/install-deps.sh)"
}

# The namespaces of cluster $id that exist now.
cluster_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^mc-${id}-(br|ctl|h[0-9]+)$" || true
}

find_binary() {
  local name="$1" base candidate
  local -a bases=()
  if [[ -n "$bin_dir" ]]; then
    bases=("$bin_dir")
  else
    bases=("${MESHCAST_BUILD_DIR:-$REPO_ROOT/build}")
  fi
  for base in "${bases[@]}"; do
    for candidate in "$base/$name" "$base/controller/$name" "$base/worker/$name" "$base/cli/$name"; do
      if [[ -x "$candidate" && -f "$candidate" ]]; then
        (cd "$(dirname "$candidate")" && echo "$(pwd)/$(basename "$candidate")")
        return 0
      fi
    done
  done
  if [[ -z "$bin_dir" ]] && command -v "$name" >/dev/null; then
    command -v "$name"
    return 0
  fi
  die "$name not found under ${bases[*]} (build it, or pass --bin-dir)"
}

# Measures single-thread memcpy speed in Gbit/s (best of a few 64 MiB copies):
# what a hop between two CPU devices of one worker costs.
measure_memcpy_gbps() {
  python3 - <<'EOF'
import time
n = 64 << 20
src = bytearray(b"\x01") * n
dst = bytearray(n)
dst[:] = src
best = 0.0
for _ in range(5):
    t = time.perf_counter()
    dst[:] = src
    best = max(best, n / (time.perf_counter() - t))
print(f"{best * 8 / 1e9:.1f}")
EOF
}

# ---------------------------------------------------------------- teardown

# True if process $1 exists and is not a zombie (an exited daemon whose
# parent has not reaped it yet counts as gone).
pid_alive() {
  [[ -n "$1" && -r "/proc/$1/stat" ]] || return 1
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  # Field 3, after the parenthesized command name, is the state.
  [[ "${stat##*) }" != Z* ]]
}

stop_cluster() {
  local -a namespaces pids=()
  mapfile -t namespaces < <(cluster_namespaces)
  # Daemons recorded by `up` (they live in our namespaces, so the namespace
  # scan below would find them too; the pid file also covers a namespace that
  # is already gone).
  if [[ -f "$dir/pids" ]]; then
    local name pid
    while read -r name pid; do
      if pid_alive "$pid" && grep -qa meshcast "/proc/$pid/cmdline" 2>/dev/null; then
        pids+=("$pid")
      fi
    done <"$dir/pids"
  fi
  local ns
  for ns in "${namespaces[@]}"; do
    local p
    for p in $(ip netns pids "$ns" 2>/dev/null); do pids+=("$p"); done
  done
  if [[ ${#pids[@]} -gt 0 ]]; then
    mapfile -t pids < <(printf '%s\n' "${pids[@]}" | sort -un)
    log "stopping ${#pids[@]} process(es): ${pids[*]}"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local deadline=$((SECONDS + 10)) alive
    while :; do
      alive=()
      for pid in "${pids[@]}"; do pid_alive "$pid" && alive+=("$pid"); done
      [[ ${#alive[@]} -eq 0 ]] && break
      if [[ $SECONDS -ge $deadline ]]; then
        log "killing ${alive[*]} (no exit 10 s after SIGTERM)"
        kill -KILL "${alive[@]}" 2>/dev/null || true
        sleep 0.2
        break
      fi
      sleep 0.1
    done
  fi
  # Deleting a namespace destroys its veth ends (and their peers) and the
  # bridge inside it.
  for ns in "${namespaces[@]}"; do
    ip netns del "$ns" 2>/dev/null || log "could not delete namespace $ns"
  done
  local left
  left="$(cluster_namespaces)"
  [[ -z "$left" ]] || die "namespaces left behind: $left"
  rm -f "$(env_file)" "$dir/pids"
}

cmd_down() {
  require_root
  load_env
  stop_cluster
  log "cluster '$id' is down"
}

# ---------------------------------------------------------------- bring-up

# Shapes egress of interface $2 in namespace $1 to $rate_bits, with netem
# delay below it when asked. tbf: a token bucket with a burst of max(128 KiB,
# 2 ms of traffic) (at least one 64 KiB GSO packet, so tbf never has to split
# one) and a queue of NETCLUSTER_QUEUE_MS (default 50) ms of traffic (enough
# to absorb the incast of many TCP flows without drops; a shorter queue
# delays less the acknowledgements that wait in it behind data).
shape_link() {
  local ns="$1" dev="$2"
  local burst=$((rate_bits / 8 / 500))
  ((burst < 131072)) && burst=131072
  local queue_ms="${NETCLUSTER_QUEUE_MS:-50}"
  is_positive_number "$queue_ms" || die "NETCLUSTER_QUEUE_MS must be a positive number of milliseconds, got '$queue_ms'"
  tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
  if ! tc -n "$ns" qdisc add dev "$dev" root handle 1: tbf rate "${rate_bits}bit" \
      burst "$burst" latency "${queue_ms}ms"; then
    die "tc tbf on $dev in $ns failed (needs the sch_tbf kernel module)"
  fi
  if ((delay_us > 0)); then
    tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: netem delay "${delay_us}us" limit 100000 ||
      die "tc netem delay on $dev in $ns failed: this kernel lacks sch_netem; use --delay 0ms"
  fi
}

start_daemon() {
  local name="$1" ns="$2"
  shift 2
  # setsid: the daemons outlive this script and ignore the caller's Ctrl-C.
  # The script is not a process group leader's parent via job control, so
  # setsid execs in place and $! is the daemon's pid.
  ip netns exec "$ns" setsid "$@" </dev/null >"$dir/logs/$name.log" 2>&1 &
  local pid=$!
  echo "$name $pid" >>"$dir/pids"
  echo "$pid"
}

# meshctl in the controller namespace.
meshctl_in_cluster() {
  ip netns exec "$(controller_ns)" env MESHCAST_CONTROLLER="${CONTROLLER_ADDR}:${port}" "$meshctl_bin" "$@"
}

registered_workers() {
  meshctl_in_cluster cluster --output json 2>/dev/null | python3 -c '
import json, sys
try:
    doc = json.load(sys.stdin)
except Exception:
    print(-1); sys.exit(0)
workers = doc.get("workers", [])
print(sum(1 for w in workers if str(w.get("state", "")).lower() not in ("lost", "worker_state_lost")))
' 2>/dev/null || echo -1
}

# Stops the given daemons (SIGTERM, then SIGKILL after 10 s) and waits.
stop_pids() {
  local pid deadline=$((SECONDS + 10))
  kill -TERM "$@" 2>/dev/null || true
  for pid in "$@"; do
    while pid_alive "$pid"; do
      if [[ $SECONDS -ge $deadline ]]; then
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.1
        break
      fi
      sleep 0.05
    done
  done
}

# Waits until the controller answers and at least $1 workers registered.
wait_registered() {
  local want="$1" what="$2" log_name="$3" pid="$4" limit="$5" deadline
  deadline=$(python3 -c "import math; print($SECONDS + math.ceil($limit))")
  while [[ "$(registered_workers)" -lt "$want" ]]; do
    pid_alive "$pid" || die "$what exited; see $dir/logs/$log_name.log: $(tail -3 "$dir/logs/$log_name.log")"
    [[ $SECONDS -lt $deadline ]] || die "$what not ready within $limit s; see $dir/logs/$log_name.log"
    sleep 0.1
  done
}

# Measures how fast a worker's K devices copy among themselves: a throw-away
# controller (own database) and one worker with K devices in host 0's
# namespace run an all-gather inside the host (1xK S1RR -> the same devices
# RRR, 32 MiB of int32 per device): once to warm up (first-touch page
# faults, thread start), then five times. The median data-plane time,
# less the per-transfer set-up the controller will charge, gives the figure
# asked for:
#  - host copy (--host-copy-gbps calibrate): each of the K slices is copied
#    to the K-1 other devices, (K-1) x tensor bytes through the host's one
#    shared copy capacity;
#  - per-device port (--intra-gbps calibrate, the older model without a
#    host copy resource): each device receives (K-1)/K of the tensor.
# Sets host_copy_gbps or intra_gbps, whichever is "calibrate".
calibrate_copy() {
  local cal_db="$dir/calibration.db" cpid wpid
  rm -f "$cal_db"
  # shellcheck disable=SC2086
  cpid="$(start_daemon calibration-controller "$(controller_ns)" "$controller_bin" \
    --listen "${CONTROLLER_ADDR}:${port}" --db "$cal_db" \
    --inter-gbps "$inter_gbps" --intra-gbps "$memcpy_gbps" \
    --lease-seconds "$lease_seconds" --insecure $controller_args)"
  wait_registered 0 "the calibration controller" calibration-controller "$cpid" 20
  # shellcheck disable=SC2086
  wpid="$(start_daemon calibration-worker "$(host_ns 0)" "$worker_bin" \
    --controller "${CONTROLLER_ADDR}:${port}" --listen "$(host_addr 0):${worker_port}" \
    --data-address "$(host_addr 0)" --name calibration --devices "cpu:$devices" \
    --insecure $worker_args)"
  wait_registered 1 "the calibration worker" calibration-worker "$wpid" "$register_timeout"
  # 32 MiB per device of int32, split evenly over the K devices.
  local shape="128x$((devices * 64))x1024" seconds=() run
  for run in 0 1 2 3 4 5; do
    seconds+=("$(meshctl_in_cluster submit reshard --shape "$shape" --dtype int32 \
      --src-mesh "1x${devices}@0" --src-spec S1RR --dst-mesh "1x${devices}@0" \
      --dst-spec RRR --strategy meshcast --wait --timeout 60 --output json |
      python3 -c 'import json, sys; job = json.load(sys.stdin); print(job["result"]["seconds"] if job["state"] == "SUCCEEDED" else "failed: " + job["message"])')")
    [[ "${seconds[-1]}" =~ ^[0-9.e-]+$ ]] || die "intra-host calibration job ${seconds[-1]}; see $dir/logs/calibration-worker.log (or pass --host-copy-gbps / --intra-gbps as numbers)"
    ((run > 0)) || seconds=()
  done
  stop_pids "$cpid" "$wpid"
  rm -f "$cal_db" "$cal_db-wal" "$cal_db-shm"
  local which=host_copy
  [[ "$intra_gbps" == calibrate ]] && which=intra
  local gbps
  gbps="$(python3 -c "
import statistics, sys
seconds = statistics.median([$(IFS=,; echo "${seconds[*]}")]) - $transfer_setup_us * 1e-6
if seconds <= 0:
    sys.exit('median run shorter than --transfer-setup-us')
tensor = 4 * 128 * $devices * 64 * 1024
k = $devices
moved = (k - 1) * tensor if '$which' == 'host_copy' else tensor * (k - 1) / k
print(f'{moved * 8 / seconds / 1e9:.4g}')")" ||
    die "intra-host calibration: runs ${seconds[*]} s; pass --host-copy-gbps / --intra-gbps as numbers or a smaller --transfer-setup-us"
  if [[ "$which" == host_copy ]]; then
    host_copy_gbps="$gbps"
    log "calibrated host copy capacity: $host_copy_gbps Gbit/s per host, shared by $devices devices (runs ${seconds[*]} s; memcpy $memcpy_gbps)"
  else
    intra_gbps="$gbps"
    log "calibrated intra-host bandwidth: $intra_gbps Gbit/s per device (runs ${seconds[*]} s; memcpy $memcpy_gbps)"
  fi
}

# Starts the controller and the workers and waits until every worker has
# registered. Sets controller_pid and worker_pids (declared by the caller).
start_daemons() {
  local i
  if [[ "$intra_gbps" == calibrate || "$host_copy_gbps" == calibrate ]]; then
    calibrate_copy
  fi
  # shellcheck disable=SC2086
  controller_pid="$(start_daemon controller "$(controller_ns)" "$controller_bin" \
    --listen "${CONTROLLER_ADDR}:${port}" --db "$dir/controller.db" \
    --inter-gbps "$inter_gbps" --intra-gbps "$intra_gbps" \
    --host-copy-gbps "$host_copy_gbps" --transfer-setup-us "$transfer_setup_us" \
    --lease-seconds "$lease_seconds" --insecure $controller_args)"
  wait_registered 0 "meshcast-controller" controller "$controller_pid" 20

  # One at a time, each waiting for its registration, so that worker h<i>
  # becomes host i of the controller's topology (it numbers hosts in
  # registration order): pinned meshes (2x2@1) then name known namespaces.
  for ((i = 0; i < hosts; i++)); do
    # shellcheck disable=SC2086
    worker_pids+=("$(start_daemon "worker-h$i" "$(host_ns "$i")" "$worker_bin" \
      --controller "${CONTROLLER_ADDR}:${port}" --listen "$(host_addr "$i"):${worker_port}" \
      --data-address "$(host_addr "$i")" --name "h$i" --devices "cpu:$devices" \
      --insecure $worker_args)")
    wait_registered $((i + 1)) "worker h$i" "worker-h$i" "${worker_pids[$i]}" "$register_timeout"
  done
}

cmd_up() {
  require_root
  [[ -f "$(env_file)" ]] && die "a cluster is recorded in $(env_file); run 'netcluster.sh down --dir $dir' first"
  load_env
  [[ "$hosts" =~ ^[0-9]+$ && "$hosts" -ge 1 && "$hosts" -le $MAX_HOSTS ]] || die "--hosts must be 1..$MAX_HOSTS, got '$hosts'"
  [[ "$devices" =~ ^[0-9]+$ && "$devices" -ge 1 && "$devices" -le 64 ]] || die "--devices must be 1..64, got '$devices'"
  [[ "$mtu" =~ ^[0-9]+$ && "$mtu" -ge 576 && "$mtu" -le 65000 ]] || die "--mtu must be 576..65000, got '$mtu'"
  [[ "$port" =~ ^[0-9]+$ && "$port" -ge 1 && "$port" -le 65535 ]] || die "--port must be 1..65535, got '$port'"
  is_positive_number "$register_timeout" || die "--register-timeout must be a positive number of seconds"
  is_positive_number "$lease_seconds" || die "--lease-seconds must be a positive number of seconds"
  rate_bits="$(rate_to_bits "$rate")"
  ((rate_bits >= 8000)) || die "--rate must be at least 8kbit, got '$rate'"
  delay_us="$(delay_to_us "$delay")"
  if [[ -n "$inter_gbps" ]]; then
    is_positive_number "$inter_gbps" || die "--inter-gbps must be a positive number, got '$inter_gbps'"
  else
    # tbf counts whole frames (14 B Ethernet + 20 B IP + 32 B TCP with
    # timestamps around each MSS); the planner needs the payload rate.
    inter_gbps="$(python3 -c "print(f'{$rate_bits * ($mtu - 52) / ($mtu + 14) / 1e9:.6g}')")"
  fi
  # One shared copy capacity per host (calibrated) and per-device ports at
  # memcpy speed by default; --intra-gbps calibrate instead folds the
  # shared capacity into the ports (the model before host copy existed).
  [[ -z "$intra_gbps" ]] && intra_gbps=memcpy
  if [[ -z "$host_copy_gbps" ]]; then
    host_copy_gbps=calibrate
    ((with_daemons && devices >= 2)) || host_copy_gbps=memcpy
    [[ "$intra_gbps" == calibrate ]] && host_copy_gbps=0
  fi
  case "$intra_gbps" in
    memcpy | calibrate) ;;
    *) is_positive_number "$intra_gbps" || die "--intra-gbps must be a positive number (Gbit/s), memcpy or calibrate, got '$intra_gbps'" ;;
  esac
  case "$host_copy_gbps" in
    memcpy | calibrate | probed) ;;
    *) is_non_negative_number "$host_copy_gbps" || die "--host-copy-gbps must be a number >= 0 (Gbit/s; 0 = unlimited), memcpy, calibrate or probed, got '$host_copy_gbps'" ;;
  esac
  if [[ "$host_copy_gbps" == probed ]] && ((!with_daemons)); then
    die "--host-copy-gbps probed needs the daemons (the workers measure it)"
  fi
  is_non_negative_number "$transfer_setup_us" || die "--transfer-setup-us must be a number >= 0 (microseconds), got '$transfer_setup_us'"
  if [[ "$intra_gbps" == calibrate && "$host_copy_gbps" == calibrate ]]; then
    die "--intra-gbps and --host-copy-gbps cannot both be calibrate (one measurement fits one of them); give the other a number or memcpy"
  fi
  if [[ "$intra_gbps" == calibrate || "$host_copy_gbps" == calibrate ]] && ((!with_daemons || devices < 2)); then
    die "calibrate (--intra-gbps or --host-copy-gbps) needs the daemons and --devices >= 2"
  fi
  intra_source="$intra_gbps"
  [[ "$intra_gbps" == memcpy || "$intra_gbps" == calibrate ]] || intra_source=given
  host_copy_source="$host_copy_gbps"
  [[ "$host_copy_gbps" == memcpy || "$host_copy_gbps" == calibrate || "$host_copy_gbps" == probed ]] || host_copy_source=given
  memcpy_gbps="$(measure_memcpy_gbps)"
  log "memcpy: $memcpy_gbps Gbit/s single-threaded"
  [[ "$intra_gbps" == memcpy ]] && intra_gbps="$memcpy_gbps"
  [[ "$host_copy_gbps" == memcpy ]] && host_copy_gbps="$memcpy_gbps"
  # probed: the controller gets 0 and takes the workers' own measurement.
  [[ "$host_copy_gbps" == probed ]] && host_copy_gbps=0
  controller_bin="" worker_bin="" meshctl_bin=""
  if ((with_daemons)); then
    controller_bin="$(find_binary meshcast-controller)"
    worker_bin="$(find_binary meshcast-worker)"
    meshctl_bin="$(find_binary meshctl)"
  fi

  if [[ -n "$(cluster_namespaces)" ]]; then
    die "namespaces of cluster '$id' exist already ($(cluster_namespaces | tr '\n' ' ')); run 'netcluster.sh down --id $id' first"
  fi
  mkdir -p "$dir/logs" || die "cannot create --dir $dir"
  : >"$dir/pids"
  echo "$id" >"$dir/id"
  # From here on, any failure tears down what was built.
  # shellcheck disable=SC2154  # up_status is assigned inside the trap.
  trap 'up_status=$?; if [[ $up_status -ne 0 ]]; then log "up failed; tearing down"; trap - EXIT; stop_cluster || true; fi; exit $up_status' EXIT

  local br cns
  br="$(bridge_ns)"
  cns="$(controller_ns)"
  ip netns add "$br" || die "'ip netns add $br' failed (namespaces unavailable?)"
  ip -n "$br" link set lo up
  ip -n "$br" link add br0 type bridge
  ip -n "$br" link set br0 mtu "$mtu" up

  # The controller: own namespace, unshaped link (control traffic only).
  ip netns add "$cns"
  ip -n "$cns" link set lo up
  ip -n "$br" link add ctl type veth peer name eth0 netns "$cns"
  ip -n "$br" link set ctl mtu "$mtu" master br0 up
  ip -n "$cns" link set eth0 mtu "$mtu" up
  ip -n "$cns" addr add "${CONTROLLER_ADDR}/24" dev eth0

  local i ns
  for ((i = 0; i < hosts; i++)); do
    ns="$(host_ns "$i")"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$br" link add "$(bridge_port "$i")" type veth peer name eth0 netns "$ns"
    ip -n "$br" link set "$(bridge_port "$i")" mtu "$mtu" master br0 up
    ip -n "$ns" link set eth0 mtu "$mtu" up
    ip -n "$ns" addr add "$(host_addr "$i")/24" dev eth0
    shape_link "$ns" eth0                     # what the host sends
    shape_link "$br" "$(bridge_port "$i")"   # what the host receives
  done
  log "$hosts hosts, links ${rate} each way (planner: ${inter_gbps} Gbps goodput), delay ${delay}, mtu ${mtu}"

  local controller_pid=""
  local -a worker_pids=()
  if ((with_daemons)); then
    start_daemons
  fi

  local host_namespaces="" host_addrs=""
  for ((i = 0; i < hosts; i++)); do
    host_namespaces+="${host_namespaces:+ }$(host_ns "$i")"
    host_addrs+="${host_addrs:+ }$(host_addr "$i")"
  done
  {
    echo "# Written by scripts/netcluster.sh up; source it from bash."
    printf 'NETCLUSTER_ID=%q\n' "$id"
    printf 'NETCLUSTER_DIR=%q\n' "$dir"
    printf 'NETCLUSTER_HOSTS=%q\n' "$hosts"
    printf 'NETCLUSTER_DEVICES=%q\n' "$devices"
    printf 'NETCLUSTER_RATE=%q\n' "$rate"
    printf 'NETCLUSTER_RATE_BITS=%q\n' "$rate_bits"
    printf 'NETCLUSTER_DELAY_US=%q\n' "$delay_us"
    printf 'NETCLUSTER_MTU=%q\n' "$mtu"
    printf 'NETCLUSTER_INTER_GBPS=%q\n' "$inter_gbps"
    printf 'NETCLUSTER_INTRA_GBPS=%q\n' "$intra_gbps"
    printf 'NETCLUSTER_INTRA_SOURCE=%q\n' "$intra_source"
    printf 'NETCLUSTER_MEMCPY_GBPS=%q\n' "$memcpy_gbps"
    printf 'NETCLUSTER_HOST_COPY_GBPS=%q\n' "$host_copy_gbps"
    printf 'NETCLUSTER_HOST_COPY_SOURCE=%q\n' "$host_copy_source"
    printf 'NETCLUSTER_TRANSFER_SETUP_US=%q\n' "$transfer_setup_us"
    printf 'NETCLUSTER_BRIDGE_NS=%q\n' "$br"
    printf 'NETCLUSTER_CONTROLLER_NS=%q\n' "$cns"
    printf 'NETCLUSTER_HOST_NS=%q\n' "$host_namespaces"
    printf 'NETCLUSTER_HOST_ADDRS=%q\n' "$host_addrs"
    printf 'NETCLUSTER_CONTROLLER_PID=%q\n' "$controller_pid"
    printf 'NETCLUSTER_WORKER_PIDS=%q\n' "${worker_pids[*]}"
    printf 'NETCLUSTER_MESHCTL=%q\n' "$meshctl_bin"
    printf 'NETCLUSTER_PORT=%q\n' "$port"
    printf 'MESHCAST_CONTROLLER=%q\n' "${CONTROLLER_ADDR}:${port}"
  } >"$(env_file).tmp"
  mv "$(env_file).tmp" "$(env_file)"
  trap - EXIT
  if ((!with_daemons)); then
    echo "netcluster '$id' is up (network only): $hosts hosts, $rate each way; stop: $0 down --dir $dir"
    return 0
  fi
  cat <<EOF
netcluster '$id' is up: controller ${CONTROLLER_ADDR}:${port} in namespace $cns, $hosts workers x cpu:$devices
  links: $rate each way per host (planner: $inter_gbps Gbps), intra-host $intra_gbps Gbps per device,
  host copy $host_copy_gbps Gbps per host (0 = unlimited), transfer setup $transfer_setup_us us
  state: $(env_file), logs: $dir/logs/
  try:   $0 exec --dir $dir -- meshctl cluster
  stop:  $0 down --dir $dir
EOF
}

# ---------------------------------------------------------------- the rest

require_up() {
  require_root
  load_env
  [[ -f "$(env_file)" ]] || die "no cluster recorded in $dir (run 'netcluster.sh up --dir $dir')"
  meshctl_bin="$NETCLUSTER_MESHCTL"
  port="$NETCLUSTER_PORT"
  hosts="$NETCLUSTER_HOSTS"
}

cmd_exec() {
  require_up
  [[ ${#exec_args[@]} -gt 0 ]] || die "exec needs a command after --, e.g. 'exec -- meshctl cluster'"
  # A bare 'meshctl' means the cluster's own binary.
  if [[ "${exec_args[0]}" == meshctl ]]; then exec_args[0]="$meshctl_bin"; fi
  exec ip netns exec "$NETCLUSTER_CONTROLLER_NS" env \
    MESHCAST_CONTROLLER="$MESHCAST_CONTROLLER" NETCLUSTER_DIR="$dir" "${exec_args[@]}"
}

cmd_status() {
  require_root
  load_env
  local ns
  echo "cluster '$id' (state in $dir)"
  local -a namespaces
  mapfile -t namespaces < <(cluster_namespaces)
  if [[ ${#namespaces[@]} -eq 0 ]]; then
    echo "  no namespaces: the cluster is down"
    return 0
  fi
  for ns in "${namespaces[@]}"; do
    echo "  namespace $ns: processes $(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
  done
  if [[ -f "$(env_file)" ]]; then
    local i
    for ((i = 0; i < NETCLUSTER_HOSTS; i++)); do
      local up_bytes down_bytes state
      up_bytes="$(tc -s -n "$(host_ns "$i")" qdisc show dev eth0 2>/dev/null | awk '/^qdisc tbf/{f=1} f && /Sent/{print $2; exit}')"
      down_bytes="$(tc -s -n "$(bridge_ns)" qdisc show dev "$(bridge_port "$i")" 2>/dev/null | awk '/^qdisc tbf/{f=1} f && /Sent/{print $2; exit}')"
      state="$(ip -n "$(bridge_ns)" -br link show "$(bridge_port "$i")" 2>/dev/null | awk '{print $2}')"
      echo "  host h$i $(host_addr "$i"): link $state, sent ${up_bytes:-?} B, received ${down_bytes:-?} B (shaped at $NETCLUSTER_RATE)"
    done
    meshctl_bin="$NETCLUSTER_MESHCTL"
    port="$NETCLUSTER_PORT"
    if [[ -n "$meshctl_bin" ]]; then
      meshctl_in_cluster cluster || true
    else
      echo "  network only (up --no-daemons)"
    fi
  fi
}

cmd_link() {
  require_up
  ((link_host < hosts)) || die "link HOST must be 0..$((hosts - 1)), got $link_host"
  # The bridge-side end: like pulling the host's cable at the switch. The
  # host's own interface loses carrier too, so both sides see the cut.
  ip -n "$NETCLUSTER_BRIDGE_NS" link set "$(bridge_port "$link_host")" "$link_state"
  log "host h$link_host link $link_state"
}

# Measures each host's send rate alone (h_i -> h_{i+1}) and one host's receive
# rate under incast (every other host -> h0), with plain TCP in python3.
cmd_check() {
  require_up
  ((hosts >= 2)) || die "check needs at least 2 hosts"
  [[ "$check_bytes" =~ ^[0-9]+$ && "$check_bytes" -ge 1048576 ]] || die "--bytes must be an integer >= 1048576"
  local probe="$dir/tcp_probe.py"
  cat >"$probe" <<'EOF'
# TCP probe: 'server ADDR PORT N' accepts N connections and prints the
# aggregate goodput in bit/s; 'client ADDR PORT BYTES' sends BYTES.
import socket, sys, time
mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "server":
    n = int(sys.argv[4])
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(n)
    s.settimeout(30)
    conns = [s.accept()[0] for _ in range(n)]
    import selectors
    sel = selectors.DefaultSelector()
    for c in conns:
        sel.register(c, selectors.EVENT_READ)
    # recv_into one buffer: a fresh 1 MiB bytes object per recv costs more
    # CPU (allocation and page faults) than the emulated link itself.
    buf = memoryview(bytearray(1 << 20))
    total, first, last, open_ = 0, None, None, n
    while open_:
        for key, _ in sel.select(timeout=30):
            got = key.fileobj.recv_into(buf)
            now = time.perf_counter()
            if not got:
                sel.unregister(key.fileobj)
                open_ -= 1
                continue
            first = first or now
            last = now
            total += got
    print(total * 8 / (last - first))
else:
    total = int(sys.argv[4])
    for _ in range(100):
        try:
            c = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            time.sleep(0.05)
    buf = b"\0" * (1 << 20)
    sent = 0
    while sent < total:
        c.sendall(buf[: min(len(buf), total - sent)])
        sent += min(len(buf), total - sent)
    c.close()
EOF
  local expected_bits
  expected_bits="$(python3 -c "print($NETCLUSTER_INTER_GBPS * 1e9)")"
  run_probe() {  # receiver host, sender hosts...
    local receiver="$1"
    shift
    local out="$dir/probe.out"
    ip netns exec "$(host_ns "$receiver")" timeout 120 python3 "$probe" server "$(host_addr "$receiver")" 5201 "$#" >"$out" &
    local server=$!
    local -a clients=()
    local s
    for s in "$@"; do
      ip netns exec "$(host_ns "$s")" timeout 120 python3 "$probe" client "$(host_addr "$receiver")" 5201 "$check_bytes" &
      clients+=($!)
    done
    wait "${clients[@]}" || true
    wait "$server" || die "probe server on h$receiver failed"
    cat "$out"
  }
  local i measured
  printf '%-24s %12s %12s %8s\n' "transfer" "Mbit/s" "expected" "ratio"
  for ((i = 0; i < hosts; i++)); do
    local j=$(((i + 1) % hosts))
    measured="$(run_probe "$j" "$i")"
    python3 -c "m=$measured; e=$expected_bits; print(f'{\"h$i -> h$j\":<24} {m/1e6:12.1f} {e/1e6:12.1f} {m/e:8.3f}')"
  done
  if ((hosts >= 3)); then
    local -a senders=()
    for ((i = 1; i < hosts; i++)); do senders+=("$i"); done
    measured="$(run_probe 0 "${senders[@]}")"
    python3 -c "m=$measured; e=$expected_bits; print(f'{\"h1..h$((hosts - 1)) -> h0 (incast)\":<24} {m/1e6:12.1f} {e/1e6:12.1f} {m/e:8.3f}')"
  fi
}

main() {
  parse_args "$@"
  case "$cmd" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    exec) cmd_exec ;;
    check) cmd_check ;;
    link) cmd_link ;;
  esac
}

main "$@"
