#!/usr/bin/env bash
# Rebuilds the binary seeds of fuzz/corpus/{worker_program,controller_requests}
# from the readable text-format sources in this directory (needs protoc).
set -euo pipefail
cd "$(dirname "$0")/../.."
for src in fuzz/seeds/worker_*.txtpb; do
  name=$(basename "$src" .txtpb)
  grep -v '^#' "$src" | protoc --encode=meshcast.v1.RunTaskRequest \
    -I proto proto/meshcast/v1/worker.proto > "fuzz/corpus/worker_program/$name"
done
n=0
grep -v '^#' fuzz/seeds/controller_requests.txt | while read -r index message text; do
  n=$((n + 1))
  out=fuzz/corpus/controller_requests/seed_$(printf %02d "$n")_$message
  printf "\\x$(printf %02x "$index")" > "$out"
  echo "$text" | protoc --encode=meshcast.v1.$message \
    -I proto proto/meshcast/v1/controller.proto >> "$out"
done
