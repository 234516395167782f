#!/usr/bin/env bash
# Installs the Python client as a user would (pip install ./python, offline,
# into a fresh virtual environment over Debian's python3-grpcio and
# python3-protobuf) and runs its tests: the layout converters, and the
# client against a real local cluster (test_client.py; it needs MESHCTL,
# MESHCAST_CONTROLLER_BIN and MESHCAST_WORKER_BIN, as the cluster tests do).
# Exits 77 (skipped) when Debian's python3 lacks grpc, protobuf or venv.
# Environment: PYTHON (default /usr/bin/python3, the one python3-grpcio is for).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-/usr/bin/python3}
if ! "$python" -c 'import grpc, google.protobuf, venv, ensurepip' 2>/dev/null; then
  echo "python client tests: SKIPPED: $python lacks grpc, protobuf or venv" \
       "(scripts/install-deps.sh installs python3-grpcio python3-protobuf" \
       "python3-venv)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The source is copied so that the build leaves nothing in the checkout.
mkdir -p "$work/src"
cp -r "$here" "$work/src/python"
cp -r "$here/../proto" "$work/src/proto"
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --no-index --no-deps \
  --no-build-isolation "$work/src/python"
cd "$work"  # import the installed package, not the source tree
"$work/venv/bin/python" -c 'import meshcast, meshcast.v1.job_pb2'
"$work/venv/bin/python" -m unittest discover -s "$here/tests" -p 'test_*.py' -v
