# Stand-in for gcr.io/tpu-pytorch/xla:r1.11_3.7 (test-only; built by standin/build.sh xrt).
# What it reproduces: the conda env's path, PATH, Python 3.7, the entrypoint script, torch 1.11
# and the packages pytorch/xla's scripts/build_torch_wheels.sh installs, one `pip install` per
# package in that script's order (the order decides which cloud-tpu-client pip picks: 0.10).
# What it cannot: torch_xla 1.11 (no wheel can be reached from here; it is left out, never faked).
ARG ROOTFS=tpu-standin-rootfs:bookworm
# A local image (standin/build.sh imports it), not from a registry.
# hadolint ignore=DL3006,DL3026
FROM ${ROOTFS}

ENV CONDA_ENV=/root/anaconda3/envs/pytorch
COPY python/ ${CONDA_ENV}/
# pyenv's CPython looks for libpython at its build path; tell the loader where it lives now.
RUN echo "${CONDA_ENV}/lib" > /etc/ld.so.conf.d/conda-env.conf && ldconfig
ENV PATH=${CONDA_ENV}/bin:/root/anaconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The CA bundle pip needs on this machine arrives as a build secret and is never stored.
# `pip install --force-reinstall pip` rewrites the console scripts for the interpreter's new path.
# Every version is pinned by constraints.txt (standin/xrt-constraints.txt, bind-mounted: not
# stored), so the order below still decides what the real build's order decided, and a
# rebuild installs the same set.
# hadolint ignore=DL3013,SC2086
RUN --mount=type=secret,id=pip_cert \
    --mount=type=bind,source=constraints.txt,target=/tmp/constraints.txt \
    if [ -f /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    set -e; \
    python -m pip install --force-reinstall pip==22.0.4; \
    for spec in numpy pyyaml tensorboard google-api-python-client oauth2client \
                google-cloud-storage cloud-tpu-client tensorboardX lark-parser \
                "torch==1.11.0 torchvision==0.12.0"; do \
      python -m pip install -c /tmp/constraints.txt $spec; \
    done; \
    python -c "import cloud_tpu_client, torch; assert torch.__version__.startswith('1.11')"

COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["bash"]
