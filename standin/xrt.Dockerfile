# Stand-in for gcr.io/tpu-pytorch/xla:r1.11_3.7 (test-only; built by standin/build.sh xrt).
# What it reproduces: the conda env's path, PATH, Python 3.7, the entrypoint script, torch 1.11
# and the packages pytorch/xla's scripts/build_torch_wheels.sh installs, as one `pip install` per
# package in that script's order leaves them (the order decides which cloud-tpu-client pip
# picks: 0.10), pinned exactly in standin/xrt-pins.txt.
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
# The packages are the set that build script's order gives (one `pip install` each: numpy pyyaml
# tensorboard google-api-python-client oauth2client google-cloud-storage cloud-tpu-client
# tensorboardX lark-parser "torch==1.11.0 torchvision==0.12.0"), pinned with each file's sha256
# in pins.txt (standin/xrt-pins.txt, bind-mounted: not stored). With today's PyPI that order
# leaves the set inconsistent (cloud-tpu-client's google-api-python-client 1.8.0 takes
# google-api-core back below what google-cloud-storage 3.9.0 needs), so no resolver would
# install it in one go: it is installed as listed, --no-deps, in pip's hash-checking mode.
# hadolint ignore=DL3013
RUN --mount=type=secret,id=pip_cert \
    --mount=type=bind,source=pins.txt,target=/tmp/pins.txt \
    if [ -f /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    set -e; \
    python -m pip install --force-reinstall pip==22.0.4; \
    python -m pip install --no-deps --require-hashes -r /tmp/pins.txt; \
    python -c "import cloud_tpu_client, torch; assert torch.__version__.startswith('1.11')"

COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["bash"]
