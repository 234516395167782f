#!/usr/bin/env bash
# Installs every Debian package meshcast needs to build, test and run.
# Idempotent: packages already present are skipped; apt-get update runs only
# when something is missing. Must run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libblis-serial-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libsqlite3-dev sqlite3 nlohmann-json3-dev libyaml-cpp-dev libcivetweb-dev
  prometheus-cpp-dev
  prometheus iproute2 python3 python3-yaml curl procps
  # the Python client (python/): its runtime, and pip to install it in tests
  python3-grpcio python3-protobuf python3-pip python3-venv python3-setuptools
  # numpy arrays as user buffers (python/meshcast/buffers.py)
  python3-numpy
  libssl-dev libcrypt-dev
  # fuzzing (scripts/fuzz.sh): clang with libFuzzer and the sanitizers
  clang libclang-rt-14-dev
)

# Installed where the distribution's archive has them; their tests skip
# without them.
OPTIONAL=(
  # torch CPU tensors as user buffers (python/meshcast/buffers.py)
  python3-torch
)

installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}
missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done
missing_optional=()
for p in "${OPTIONAL[@]}"; do
  installed "$p" || missing_optional+=("$p")
done

if [ ${#missing[@]} -eq 0 ] && [ ${#missing_optional[@]} -eq 0 ]; then
  echo "install-deps: all $(( ${#PACKAGES[@]} + ${#OPTIONAL[@]} )) packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
for p in "${missing_optional[@]}"; do
  if apt-cache show "$p" >/dev/null 2>&1; then
    missing+=("$p")
  else
    echo "install-deps: $p is not in this distribution's archive; the tests that need it skip"
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# prometheus is installed for its binaries (tests start their own servers);
# do not leave the packaged service scraping in the background.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
  $SUDO systemctl stop prometheus || true
fi
echo "install-deps: done"
