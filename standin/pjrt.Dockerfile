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

# Every version is pinned by pins.txt (standin/pjrt-pins.txt, bind-mounted: not stored, used
# as pip's constraints): a rebuild installs the same set.
# hadolint ignore=DL3013
RUN --mount=type=secret,id=pip_cert \
    --mount=type=bind,source=pins.txt,target=/tmp/pins.txt \
    if [ -f /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    set -e; \
    python -m pip install --force-reinstall pip==23.0.1; \
    python -m pip install -c /tmp/pins.txt torch==2.9.0 torch_xla==2.9.0; \
    python -c "import torch, torch_xla; assert torch_xla.__version__.startswith('2.9')"

# The release image installs the torchvision wheel it builds at torch's pin (pytorch/xla's
# infra/ansible), and with it Pillow: 0.24.0 is that pin's release. A layer of its own keeps
# the 7 GB one above cached.
# hadolint ignore=DL3013
RUN --mount=type=secret,id=pip_cert \
    --mount=type=bind,source=pins.txt,target=/tmp/pins.txt \
    if [ -f /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    set -e; \
    python -m pip install -c /tmp/pins.txt torchvision==0.24.0; \
    python -c "import torch, torchvision, PIL; assert torch.__version__.startswith('2.9.0')"

COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["bash"]
