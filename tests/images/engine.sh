#!/usr/bin/env bash
# Make sure a Docker engine answers for the container tests, and say how to reach it.
#
# Prints `DOCKER_HOST=... DOCKER=...` for `env $(tests/images/engine.sh) pytest tests/images`.
# Uses the engine at $DOCKER_HOST when one answers there. Otherwise, as root, it installs what
# the tests need from Debian (docker.io, debootstrap, docker-registry) when missing and starts
# its own dockerd (own data root and socket; no iptables, no bridge: containers use
# --network host or none). Without root and without an engine it fails with one line: the
# container tier is never skipped silently. Exit 69 when no engine can be had.
set -euo pipefail

state="${TPU_XLA_ENGINE_DIR:-/var/lib/tpu-xla-dockerd}"
socket="unix://$state/docker.sock"

fail() { echo "engine.sh: no Docker engine for the container tests: $1" >&2; exit 69; }

# The client must build with BuildKit (build secrets): buildx, or Debian's 20.10 client, which
# has BuildKit built in.
pick_client() {
  if docker buildx version >/dev/null 2>&1; then echo docker
  elif [ -x /usr/bin/docker ]; then echo /usr/bin/docker
  else echo docker; fi
}

if [ -n "${DOCKER_HOST:-}" ] && docker info >/dev/null 2>&1; then
  echo "DOCKER_HOST=$DOCKER_HOST DOCKER=$(pick_client)"
  exit 0
fi

[ "$(id -u)" = 0 ] || fail "DOCKER_HOST is not set to a running engine and starting dockerd needs root"

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v docker-registry >/dev/null || missing+=(docker-registry)
if [ ${#missing[@]} -gt 0 ]; then
  echo "engine.sh: installing ${missing[*]}" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
    >"/tmp/engine-apt.log" 2>&1 || fail "apt-get install ${missing[*]} failed (/tmp/engine-apt.log)"
fi

export DOCKER_HOST="$socket"
client="$(pick_client)"
if ! "$client" info >/dev/null 2>&1; then
  mkdir -p "$state"
  # The engine outlives this script: it must not keep the caller's other open files (a pipe
  # a caller waits to see closed, a lock file held with flock would stay held for good).
  (
    for fd in /proc/self/fd/*; do
      fd="${fd##*/}"
      [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null
    done
    exec setsid dockerd --data-root "$state/data" --exec-root "$state/exec" \
      --pidfile "$state/dockerd.pid" --host "$socket" --storage-driver overlay2 \
      --iptables=false --ip6tables=false --bridge=none >"$state/dockerd.log" 2>&1 < /dev/null
  ) &
  for _ in $(seq 60); do
    "$client" info >/dev/null 2>&1 && break
    sleep 0.5
  done
  "$client" info >/dev/null 2>&1 || fail "dockerd did not start: $(tail -1 "$state/dockerd.log")"
fi
echo "DOCKER_HOST=$DOCKER_HOST DOCKER=$client"
