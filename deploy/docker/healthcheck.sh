#!/bin/bash
# Docker HEALTHCHECK of the meshcast daemons: healthy when the daemon's gRPC
# port accepts a TCP connection.
#
#   HEALTHCHECK CMD ["/usr/local/bin/meshcast-healthcheck", "50051"]
#
# The address is the daemon's own --listen, read from its command line
# (PID 1: the image's ENTRYPOINT; MESHCAST_HEALTH_CMDLINE names another file
# for tests), so it follows whatever address the container was started with;
# 0.0.0.0 / [::] mean loopback here. The argument is the port when the
# command line has no --listen. A TCP connect rather than a gRPC health call:
# with TLS on (the default) a health call needs the cluster's client
# certificate, which a health check must not hold; the gRPC health service
# (grpc.health.v1) answers on the same port for callers that have one.
set -u
cmdline=${MESHCAST_HEALTH_CMDLINE:-/proc/1/cmdline}
listen=""
previous=""
while IFS= read -r -d '' arg; do
  case "$arg" in
    --listen=*) listen=${arg#--listen=} ;;
  esac
  [ "$previous" = "--listen" ] && listen=$arg
  previous=$arg
done <"$cmdline"
if [ -z "$listen" ]; then
  listen="127.0.0.1:${1:?usage: healthcheck.sh DEFAULT_PORT}"
fi
host=${listen%:*}
port=${listen##*:}
host=${host#[}
host=${host%]}
case "$host" in
  "" | 0.0.0.0) host=127.0.0.1 ;;
  ::) host=::1 ;;
esac
if [ "$port" = "0" ] || [ -z "$port" ]; then
  echo "healthcheck: --listen=$listen has no fixed port to check" >&2
  exit 1
fi
if ! timeout 3 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null; then
  echo "healthcheck: nothing accepts connections at $host:$port" >&2
  exit 1
fi
