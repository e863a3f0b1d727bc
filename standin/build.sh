#!/usr/bin/env bash
# Build a stand-in for one of the real base images, from nothing but this machine:
#   standin/build.sh xrt|pjrt        (make standin-base RUNTIME=xrt|pjrt)
# gives the image tpu-standin:xrt or tpu-standin:pjrt. The real bases (gcr.io/tpu-pytorch/...)
# cannot be pulled here; what each stand-in reproduces, and what it cannot, is in docs/submitting.md#rehearse.
#
# 1. A Debian bookworm rootfs from debootstrap, imported once as tpu-standin-rootfs:bookworm
#    (with the shared libraries a pyenv CPython needs).
# 2. The real image's interpreter: pyenv's CPython 3.7 (xrt) or 3.10 (pjrt), copied to the path
#    the real image has it at, minus this machine's site-packages.
# 3. The real image's packages, installed the way its build installs them (standin/*.Dockerfile),
#    each at the version and file (sha256) standin/RUNTIME-pins.txt pins.
#
# Environment: DOCKER (client, default docker), PYENV_ROOT (default ~/.pyenv), PIP_CERT (a CA
# bundle pip must trust to reach PyPI; passed as a build secret, never stored in a layer).
set -euo pipefail

runtime="${1:-}"
case "$runtime" in
  xrt) python_minor=3.7 ;;
  pjrt) python_minor=3.10 ;;
  *) echo "standin/build.sh: RUNTIME must be xrt or pjrt, got '$runtime'" >&2; exit 64 ;;
esac

here="$(cd "$(dirname "$0")" && pwd)"
docker="${DOCKER:-docker}"
rootfs_image="tpu-standin-rootfs:bookworm"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

die() { echo "standin/build.sh: $1" >&2; echo "HINT: $2" >&2; exit 69; }
phase() { echo "standin/build.sh: $*" >&2; }

# debootstrap's phases (a line each), not its line per package, which go to its log only:
# "Resolving dependencies of required packages...", "Unpacking the base system..." and the
# like name no package; "Extracting libc6..." does.
debootstrap_phases() {
  grep --line-buffered -E '^I: ([A-Z][a-z]+ [a-z]+ .*\.\.\.|Retrieving (In)?Release|Base system)' \
    | sed -u 's/^I: /standin\/build.sh:   debootstrap: /' >&2 || true
}

if ! "$docker" image inspect "$rootfs_image" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || die "debootstrap is not installed" \
    "apt-get install debootstrap (as root)"
  phase "1/3: a Debian bookworm root file system by debootstrap, once (a few minutes; every" \
    "line in $work/debootstrap.log)"
  # The libraries pyenv's CPython links against (ssl, ffi, sqlite, compression, readline...).
  # pipefail: the pipeline fails when debootstrap does.
  if ! debootstrap --variant=minbase \
    --include=libssl3,libffi8,libsqlite3-0,libbz2-1.0,liblzma5,zlib1g,libreadline8,libncursesw6,libuuid1,libgdbm6 \
    bookworm "$work/rootfs" http://deb.debian.org/debian 2>&1 \
    | tee "$work/debootstrap.log" | debootstrap_phases; then
    tail -5 "$work/debootstrap.log" >&2; die "debootstrap failed" "see the lines above"
  fi
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  phase "1/3: importing it as $rootfs_image ($(du -sh "$work/rootfs" | cut -f1))"
  tar -C "$work/rootfs" -c . | "$docker" import - "$rootfs_image" >/dev/null
  rm -rf "$work/rootfs"
else
  phase "1/3: the root file system: $rootfs_image, made before"
fi

pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
python_dir="$(ls -d "$pyenv_root/versions/$python_minor".* 2>/dev/null | sort -V | tail -1 || true)"
[ -n "$python_dir" ] || die "no CPython $python_minor under $pyenv_root/versions" \
  "pyenv install $python_minor (the real $runtime base image's interpreter)"

phase "2/3: CPython $python_minor from $python_dir, as the real image has it"
# The interpreter as built, without anything this machine added to its site-packages.
mkdir -p "$work/context"
tar -C "$python_dir" -c --exclude='./lib/python*/site-packages/_sandboxing*' \
  --exclude='__pycache__' . | (mkdir -p "$work/context/python" && tar -C "$work/context/python" -x)
cp "$here/docker-entrypoint.sh" "$work/context/"
# Every package at its version (standin/RUNTIME-pins.txt), for the Dockerfile's pip installs.
cp "$here/$runtime-pins.txt" "$work/context/pins.txt"

secret=()
if [ -n "${PIP_CERT:-}" ]; then
  secret=(--secret "id=pip_cert,src=$PIP_CERT")
fi
phase "3/3: tpu-standin:$runtime, its packages from PyPI as standin/$runtime-pins.txt pins" \
  "them (docker build: its steps below)"
DOCKER_BUILDKIT=1 "$docker" build --network host "${secret[@]}" \
  --build-arg ROOTFS="$rootfs_image" -f "$here/$runtime.Dockerfile" \
  -t "tpu-standin:$runtime" "$work/context"
