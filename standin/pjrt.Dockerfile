# Stand-in for us-central1-docker.pkg.dev/tpu-pytorch-releases/docker/xla:r2.9.0_3.10_tpuvm
# (test-only; built by standin/build.sh pjrt). What it reproduces: Python 3.10 as
# /usr/local/bin/python, the real torch 2.9.0, torch_xla 2.9.0 and torchvision from PyPI, so
# the XLA CPU device runs. What it cannot: libtpu and TPU chips.
ARG ROOTFS=tpu-standin-rootfs:bookworm
# A local image (standin/build.sh imports it), not from a registry.
# hadolint ignore=DL3006,DL3026
FROM ${ROOTFS}

COPY python/ /usr/local/
RUN ldconfig
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# torch 2.9.0 and torch_xla 2.9.0 with their dependencies, and the torchvision wheel the release
# image builds at torch's pin (pytorch/xla's infra/ansible) with Pillow: 0.24.0 is that pin's
# release. Every package at its version and file (pins.txt, standin/pjrt-pins.txt,
# bind-mounted: not stored), in pip's hash-checking mode: a rebuild installs the same files.
# hadolint ignore=DL3013
RUN --mount=type=secret,id=pip_cert \
    --mount=type=bind,source=pins.txt,target=/tmp/pins.txt \
    if [ -f /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    set -e; \
    python -m pip install --force-reinstall pip==23.0.1; \
    python -m pip install --no-deps --require-hashes -r /tmp/pins.txt; \
    python -c "import torch, torch_xla, torchvision, PIL; \
assert torch_xla.__version__.startswith('2.9') and torch.__version__.startswith('2.9.0')"

COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["bash"]
