# PyTorch/XLA training image: the launcher is the entrypoint; it configures torch_xla for the
# platform (TPU node, TPU VM or CPU) and execs the trainer.
#
# Profiles (make build RUNTIME=xrt|pjrt; BuildKit, the default builder since Docker 23):
#   xrt  (default) gcr.io/tpu-pytorch/xla:r1.11_3.7 - legacy AI Platform, TPU node, XRT;
#                  pairs with tpuTfVersion pytorch-1.11 (the table: jobspec/images.py)
#   pjrt           us-central1-docker.pkg.dev/tpu-pytorch-releases/docker/xla:r2.9.0_3.10_tpuvm
#                  - Vertex AI / TPU VM, PJRT
ARG BASE_IMAGE=gcr.io/tpu-pytorch/xla:r1.11_3.7
ARG RUNTIME=xrt

# The data workers' cropped JPEG decoder (trainer/data/_jpeg_region.c; docs/benchmarks.md),
# built for the base's own Python against the libjpeg-turbo of the base's Debian release; the
# library is copied next to the module (imagebuild/jpeg_region.py --bundle), so the final
# stage installs no Debian package, and the SBOM names the version copied. The packages are
# not pinned to a version: Debian drops superseded ones from its mirror, and an exact pin
# would stop the build at the first security update (the compiler and headers only build;
# they stay in this stage). The pjrt profile only: the xrt image (Python 3.7) keeps its
# decoders (trainer/data/jpeg_decode.py).
# Every FROM names a trusted registry's base (.hadolint.yaml); hadolint cannot see through
# the ARG, and tests/delivery checks the defaults.
# hadolint ignore=DL3026
FROM ${BASE_IMAGE} AS native-pjrt
# hadolint ignore=DL3008
RUN --mount=type=bind,source=trainer/data/_jpeg_region.c,target=/tmp/native/_jpeg_region.c \
    --mount=type=bind,source=imagebuild/jpeg_region.py,target=/tmp/native/jpeg_region.py \
    set -e; \
    apt-get update -qq; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        gcc libc6-dev libjpeg62-turbo-dev >/dev/null; \
    python /tmp/native/jpeg_region.py /tmp/native/_jpeg_region.c /jpeg-region --bundle; \
    mkdir /jpeg-region-sbom; \
    dpkg-query -s libjpeg62-turbo > /jpeg-region-sbom/status; \
    rm -rf /var/lib/apt/lists/*

# hadolint ignore=DL3026
FROM ${BASE_IMAGE} AS native-xrt
RUN mkdir /jpeg-region /jpeg-region-sbom

# hadolint ignore=DL3006,DL3026
FROM native-${RUNTIME} AS native

# hadolint ignore=DL3026
FROM ${BASE_IMAGE}

# The base's reference again (an ARG before FROM is not visible after it): the SBOM names it.
ARG BASE_IMAGE
ARG RUNTIME
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY requirements/image-${RUNTIME}.txt requirements/image-${RUNTIME}.lock \
     imagebuild/pip_check.py /tmp/build/
# The lock (make lock-images) names every package this adds to the base, each with the sha256
# of its file: pip's hash-checking mode stops the build on a package that is not in it or a
# file that changed. Then pip checks, offline, that the pins' whole dependency tree is
# installed: what the lock assumes of the base (its header lists it) is checked here, not at
# run time. `--no-deps` skips pip's conflict check, so `pip check` runs on the result: a
# conflict stops the build unless requirements/image-RUNTIME.txt allows it, with the reason
# (`# allow-conflict:`, for what the base forces; imagebuild/pip_check.py).
# A CA bundle pip must trust (a TLS-inspecting proxy, a test machine) may be passed as the
# build secret pip_cert (docker build --secret id=pip_cert,src=FILE); secrets are mounted for
# this step only and never stored in a layer. Without it, pip uses its own bundle.
RUN --mount=type=secret,id=pip_cert \
    if [ -f /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    set -e; \
    python -m pip install --no-cache-dir --no-deps --require-hashes \
        -r /tmp/build/image-${RUNTIME}.lock; \
    python -m pip install --no-cache-dir --no-index -r /tmp/build/image-${RUNTIME}.txt \
        || { echo "the base lacks a package requirements/image-${RUNTIME}.lock assumes" \
                  "(its header lists them): run make lock-images on a matching stand-in" >&2; \
             exit 1; }; \
    python /tmp/build/pip_check.py /tmp/build/image-${RUNTIME}.txt; \
    rm -rf /tmp/build

COPY launcher/ /app/launcher/
COPY trainer/ /app/trainer/
COPY --from=native /jpeg-region/ /app/trainer/data/
# Any uid runs the image (docker run --user, a pod's runAsUser): the xrt base keeps its
# interpreter under /root, which Debian makes 0700; others may now pass through it, not list it.
RUN chmod go+x /root

# The SBOM (make sbom prints it): Python and Debian packages, the base reference and the
# project's code. Its tool and the lock are bind-mounted from the context, so nothing of them
# stays in a layer; this step reruns only when the code or the lock changes.
RUN --mount=type=bind,source=imagebuild/sbom.py,target=/tmp/sbom/sbom.py \
    --mount=type=bind,source=requirements,target=/tmp/sbom/requirements \
    --mount=type=bind,from=native,source=/jpeg-region-sbom,target=/tmp/sbom/bundled \
    python /tmp/sbom/sbom.py /tmp/sbom/requirements/image-${RUNTIME}.lock "${RUNTIME}" \
        --base "${BASE_IMAGE}" --project /app/launcher --project /app/trainer \
        --bundled-dpkg-status /tmp/sbom/bundled/status \
        > /app/sbom.cdx.json

# The platform's job arguments replace CMD, so the trainer is chosen here, not in CMD.
ENV PYTHONPATH=/app \
    LAUNCHER_TRAINER="python -m trainer.mnist"

# Exec form: the launcher is PID 1 and execs the trainer, which then receives SIGTERM.
ENTRYPOINT ["python", "-m", "launcher"]
