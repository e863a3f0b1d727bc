#!/usr/bin/env bash
# The container rehearsal from a fresh machine, without Google's base images
# (make rehearse-container; docs/submitting.md#rehearse):
#   1. a Docker engine: the one the docker client reaches (DOCKER_HOST or the default socket);
#      without one, as root, tests/images/engine.sh starts one of its own, with no bridge
#      network (so everything below builds on the host's network and runs with none);
#   2. the stand-in base tpu-standin:RUNTIME (make standin-base; once: it stays on the engine);
#   3. the shipped Dockerfile built on it (make build ... DOCKER_BUILD_ARGS=--network=host);
#   4. the image run as a platform runs it, on fake data for a few steps; outputs in
#      runs/rehearsal-DATE.
# Environment: RUNTIME (pjrt; the xrt stand-in has no torch_xla to train with), DOCKER
# (client), REHEARSAL_IMAGE [tpu-xla-rehearsal:RUNTIME], REHEARSAL_ARGS (the run's trainer
# arguments), MAKE, PIP_CERT (a CA bundle pip must trust inside the builds).
# It ends by printing the commands that come next: reaching its engine (make rehearse-env),
# make local-run on the image, docs/own-code.md on it, stopping the engine (make
# rehearse-stop).
# Exit: 0 the run trained; 64 RUNTIME not pjrt; 69 no engine; else the failing step's status.
set -euo pipefail

runtime="${RUNTIME:-pjrt}"
[ "$runtime" = pjrt ] || {
  echo "rehearse.sh: RUNTIME=$runtime cannot be rehearsed: its stand-in has no torch_xla (no" \
    "wheel for the xrt base can be had); HINT: make rehearse-container RUNTIME=pjrt" >&2
  exit 64
}
cd "$(dirname "$0")/.."
docker="${DOCKER:-docker}"
make="${MAKE:-make}"
image="${REHEARSAL_IMAGE:-tpu-xla-rehearsal:$runtime}"
args="${REHEARSAL_ARGS:---fake_data --num_epochs=1 --num_steps=20}"

step() { echo "rehearse: $*" >&2; }

own_engine=
if ! "$docker" info >/dev/null 2>&1; then
  step "no engine answers the docker client: tests/images/engine.sh starts one (root)"
  own_engine=1
  engine="$(tests/images/engine.sh)"
  # DOCKER_HOST=unix://... DOCKER=client: no spaces in either.
  export ${engine?}
  docker="$DOCKER"
fi
export DOCKER="$docker"

if ! "$docker" image inspect "tpu-standin:$runtime" >/dev/null 2>&1; then
  step "the stand-in base, once (make standin-base RUNTIME=$runtime: a few minutes)"
  "$make" --no-print-directory standin-base RUNTIME="$runtime"
fi
step "the image on the stand-in (make build ... BASE_IMAGE=tpu-standin:$runtime)"
"$make" --no-print-directory build PROJECT=rehearsal RUNTIME="$runtime" \
  BASE_IMAGE="tpu-standin:$runtime" IMAGE_URI="$image" DOCKER_BUILD_ARGS=--network=host

job="runs/rehearsal-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$job"
step "a run of $image: $args (outputs in $job)"
# The platform's way: the image's entrypoint (the launcher), the job's arguments after it.
# shellcheck disable=SC2086  # the arguments are words, as a job's are
"$docker" run --rm --network none -v "$PWD/$job:/job" "$image" $args --job-dir=/job
step "done: $job/summary.json"

# What comes next, with this engine: the docs' commands (docs/submitting.md#rehearse).
if [ -n "$own_engine" ]; then
  state="${TPU_XLA_ENGINE_DIR:-/var/lib/tpu-xla-dockerd}"
  step "the engine keeps running with the images at $DOCKER_HOST, which the docker client" \
    "does not reach by itself; in your shell, first:"
  echo "    eval \"\$(make -s rehearse-env)\"   # DOCKER_HOST, and a docker with BuildKit on PATH" >&2
fi
step "then: the image with Vertex AI's variables, --dry-run:"
echo "    make local-run PROJECT=rehearsal IMAGE_URI=$image" >&2
step "your own code on it: docs/own-code.md#build-rehearse-submit with BASE=$image"
if [ -n "$own_engine" ]; then
  step "stop the engine: make rehearse-stop (its data root $state/data keeps" \
    "$(du -sh "$state/data" 2>/dev/null | cut -f1) of images for the next rehearsal;" \
    "rm -rf $state frees it)"
fi
