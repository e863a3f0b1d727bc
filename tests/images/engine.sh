#!/usr/bin/env bash
# Make sure a Docker engine answers for the container tests and the rehearsal, and say how to
# reach it; or, for a shell, export how to reach it; or stop it.
#
# tests/images/engine.sh [start]: prints `DOCKER_HOST=... DOCKER=...` for `env
# $(tests/images/engine.sh) pytest tests/images`. Uses the engine at $DOCKER_HOST when one
# answers there. Otherwise, as root, it installs what the tests need from Debian (docker.io,
# debootstrap, docker-registry) when missing and starts its own dockerd (own data root and
# socket; no iptables, no bridge: containers use --network host or none). Without root and
# without an engine it fails with one line: the container tier is never skipped silently.
#
# tests/images/engine.sh env (make rehearse-env): starts nothing; prints the shell lines that
# point this shell's `docker` at the engine of its own (`eval "$(make -s rehearse-env)"`):
# DOCKER_HOST, and PATH with $STATE/bin first, where `docker` is the client that builds with
# BuildKit. Prints a comment alone when the docker client reaches an engine already.
#
# tests/images/engine.sh stop (make rehearse-stop): stops the dockerd of its own, if it runs,
# and says where its data root is and how large (the stand-in and the images stay there for
# the next rehearsal; deleting the folder frees the space).
#
# The engine of its own keeps its build cache at most TPU_XLA_BUILD_CACHE (default 12GB, what
# both stand-ins' and both images' current layers take): every start prunes the least recently
# used records beyond it. Without that, each run's new contexts and the container tier's
# --no-cache rebuild (about 1.3 GB a run) pile up until the disk is full. An engine of the
# user's own (DOCKER_HOST) is never pruned.
#
# STATE: TPU_XLA_ENGINE_DIR (default /var/lib/tpu-xla-dockerd). Exit 69 when no engine can be
# had (env: none runs); 64 for an unknown mode.
set -euo pipefail

state="${TPU_XLA_ENGINE_DIR:-/var/lib/tpu-xla-dockerd}"
socket="unix://$state/docker.sock"
mode="${1:-start}"

fail() { echo "engine.sh: no Docker engine for the container tests: $1" >&2; exit 69; }

# The client must build with BuildKit (build secrets): buildx, or Debian's 20.10 client, which
# has BuildKit built in.
pick_client() {
  if docker buildx version >/dev/null 2>&1; then echo docker
  elif [ -x /usr/bin/docker ]; then echo /usr/bin/docker
  else echo docker; fi
}

# $STATE/bin/docker: the client, first on a shell's PATH after make rehearse-env.
link_client() {
  mkdir -p "$state/bin"
  ln -sfn "$(command -v "$1")" "$state/bin/docker"
}

case "$mode" in
  start) ;;
  env)
    if docker info >/dev/null 2>&1; then
      echo "# the docker client reaches an engine already (${DOCKER_HOST:-its default socket}): nothing to set"
      exit 0
    fi
    client="$(pick_client)"
    DOCKER_HOST="$socket" "$client" info >/dev/null 2>&1 || {
      echo "engine.sh: no Docker engine runs (neither the docker client's nor the rehearsal's at" \
        "$socket); HINT: make rehearse-container starts one" >&2
      exit 69
    }
    link_client "$client"
    # PATH as the shell has it when it evaluates this line.
    # shellcheck disable=SC2016
    printf 'export DOCKER_HOST=%s PATH="%s/bin:$PATH"\n' "$socket" "$state"
    exit 0 ;;
  stop)
    pid="$(cat "$state/dockerd.pid" 2>/dev/null || true)"
    # Only the dockerd this script started: its command line names its own pidfile.
    if [ -z "$pid" ] || ! tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null \
        | grep -qF -- "--pidfile $state/dockerd.pid"; then
      echo "engine.sh: the rehearsal's engine is not running (nothing to stop at $socket)"
    else
      kill -TERM "$pid"
      # dockerd stops its containers first (10 s each at most). Ended: gone, or a zombie
      # its parent has not reaped yet.
      running() { [ -e "/proc/$pid/status" ] && ! grep -q '^State:.*Z' "/proc/$pid/status"; }
      for _ in $(seq 120); do running || break; sleep 0.5; done
      if running; then
        echo "engine.sh: dockerd (PID $pid) is still stopping: see $state/dockerd.log" >&2
        exit 1
      fi
      echo "engine.sh: stopped the rehearsal's engine (dockerd, PID $pid)"
    fi
    if [ -d "$state/data" ]; then
      echo "engine.sh: its data root $state/data holds $(du -sh "$state/data" 2>/dev/null \
        | cut -f1) (the stand-in and the images: the next make rehearse-container starts it" \
        "again and reuses them); to free the space: rm -rf $state"
    fi
    exit 0 ;;
  *) echo "engine.sh: unknown mode '$mode' (start, env or stop)" >&2; exit 64 ;;
esac

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
  echo "engine.sh: installing ${missing[*]} from Debian (a minute or two; log:" \
    "/tmp/engine-apt.log)" >&2
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
link_client "$client"
# A no-op (0.2 s) when the cache is within its bound; pruning tens of GB takes a minute.
"$client" builder prune --force --keep-storage "${TPU_XLA_BUILD_CACHE:-12GB}" >/dev/null 2>&1 \
  || echo "engine.sh: could not prune the engine's build cache (docker builder prune)" >&2
echo "DOCKER_HOST=$DOCKER_HOST DOCKER=$client"
