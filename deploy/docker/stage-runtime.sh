#!/usr/bin/env bash
# Stages meshcast binaries for a runtime image and lists the packages they need.
#
#   stage-runtime.sh BUILD_DIR DEST BINARY...
#
# Finds each BINARY (e.g. meshcast-controller) under BUILD_DIR, copies it to
# DEST/bin, and writes DEST/runtime-packages.txt: the Debian/Ubuntu packages
# that own the shared libraries the binaries load (from ldd and dpkg-query),
# one per line, so the runtime stage of a Dockerfile installs exactly those
# (`xargs -a runtime-packages.txt apt-get install`). Package names come from
# the build image itself, which keeps this right on Debian bookworm
# (libgrpc++1.51) and on Ubuntu 24.04 (libgrpc++1.51t64) alike. Libraries no
# package owns (e.g. a toolkit under /usr/local) are listed in
# DEST/unowned-libraries.txt; the runtime base image must provide them.
# Fails when a binary is missing or a library does not resolve.
set -euo pipefail

if [ $# -lt 3 ]; then
  echo "usage: $0 BUILD_DIR DEST BINARY..." >&2
  exit 2
fi
build_dir=$1
dest=$2
shift 2

mkdir -p "$dest/bin"
: >"$dest/.libs"
for name in "$@"; do
  found=$(find "$build_dir" -type f -name "$name" -perm -u+x -not -path '*/CMakeFiles/*' | head -n 1)
  if [ -z "$found" ]; then
    echo "stage-runtime: binary '$name' not found under $build_dir" >&2
    exit 1
  fi
  install -m 0755 "$found" "$dest/bin/$name"
  echo "stage-runtime: $found -> $dest/bin/$name"
  if ldd "$found" | grep -q 'not found'; then
    echo "stage-runtime: unresolved libraries of $name:" >&2
    ldd "$found" | grep 'not found' >&2
    exit 1
  fi
  # "libfoo.so.1 => /usr/lib/x86_64-linux-gnu/libfoo.so.1 (0x...)"
  ldd "$found" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' >>"$dest/.libs"
done

: >"$dest/.packages"
: >"$dest/unowned-libraries.txt"
sort -u "$dest/.libs" | while read -r lib; do
  owner=""
  # dpkg knows a file by the path it shipped; with merged /usr the loader may
  # report /lib/... for /usr/lib/... or the other way round.
  for candidate in "$lib" "$(readlink -f "$lib")" "/usr$lib" "${lib#/usr}"; do
    [ -n "$candidate" ] || continue
    owner=$(dpkg-query -S "$candidate" 2>/dev/null | head -n 1 | cut -d: -f1) || true
    [ -n "$owner" ] && break
  done
  if [ -n "$owner" ]; then
    echo "$owner" >>"$dest/.packages"
  else
    echo "$lib" >>"$dest/unowned-libraries.txt"
  fi
done
sort -u "$dest/.packages" >"$dest/runtime-packages.txt"
rm -f "$dest/.libs" "$dest/.packages"
echo "stage-runtime: $(wc -l <"$dest/runtime-packages.txt") runtime packages:" \
  "$(tr '\n' ' ' <"$dest/runtime-packages.txt")"
if [ -s "$dest/unowned-libraries.txt" ]; then
  echo "stage-runtime: libraries owned by no package (the base image must have them):" \
    "$(tr '\n' ' ' <"$dest/unowned-libraries.txt")"
fi
