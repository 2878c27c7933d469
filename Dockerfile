# syntax=docker/dockerfile:1
# kubegan images, one target each:
#   docker build --target operator      -t ghcr.io/kubegan/operator:0.1.0 .
#   docker build --target trainer-torch -t ghcr.io/kubegan/trainer-torch:0.1.0 .
#   docker build --target trainer-tf    -t ghcr.io/kubegan/trainer-tf:0.1.0 .
# Builder stages install into a virtualenv; the final stages copy only that virtualenv onto
# a clean slim base (no compiler, no pip, no package caches). Every dependency ships wheels,
# so the builders need no build tools either. Versions come from pyproject.toml's pins.

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# ---------------------------------------------------------------- builders
FROM ${PYTHON_IMAGE} AS source
WORKDIR /src
# README.md is the package's readme (pyproject metadata); nothing else outside the packages.
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY trainer/ trainer/

FROM source AS build-operator
# hadolint ignore=DL3013
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check ".[operator]" \
 && /opt/venv/bin/pip uninstall --yes pip setuptools

FROM source AS build-torch
# torch from PyPI on linux/amd64 brings its CUDA runtime wheels (nvidia-*): one image for
# GPU and CPU nodes.
# hadolint ignore=DL3013
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check ".[torch]" \
 && /opt/venv/bin/pip uninstall --yes pip setuptools

FROM source AS build-tf
# tensorflow[and-cuda] adds the CUDA/cuDNN wheels TensorFlow needs to see GPUs; the version
# is pyproject.toml's pin (extra `tensorflow`).
# hadolint ignore=DL3013
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check \
      ".[tensorflow]" "tensorflow[and-cuda]==2.20.0" \
 && /opt/venv/bin/pip uninstall --yes pip setuptools

# ---------------------------------------------------------------- runtime base
FROM ${PYTHON_IMAGE} AS runtime
# Read-only root filesystem in the pods: Python writes no bytecode, HOME is the /tmp emptyDir.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
# The base's own pip/setuptools are not needed at run time either.
RUN python -m pip uninstall --yes --no-cache-dir pip setuptools wheel \
 && groupadd --gid 1000 kubegan && useradd --uid 1000 --gid 1000 --no-create-home \
      --home-dir /tmp --shell /usr/sbin/nologin kubegan \
 && groupadd --gid 65532 nonroot && useradd --uid 65532 --gid 65532 --no-create-home \
      --home-dir /tmp --shell /usr/sbin/nologin nonroot
WORKDIR /tmp

# ---------------------------------------------------------------- targets
FROM runtime AS operator
COPY --from=build-operator /opt/venv /opt/venv
# The chart's pod security context runs it as 65532 too (charts/kubegan values.yaml).
USER 65532:65532
EXPOSE 8000 8080
ENTRYPOINT ["kubegan"]
CMD ["operator"]

FROM runtime AS trainer-torch
COPY --from=build-torch /opt/venv /opt/venv
# Worker pods run as 1000 (render.py RUN_AS_USER) with the command python -m kubegan_trainer.
USER 1000:1000
ENTRYPOINT ["python", "-m", "kubegan_trainer"]

FROM runtime AS trainer-tf
COPY --from=build-tf /opt/venv /opt/venv
USER 1000:1000
ENTRYPOINT ["python", "-m", "kubegan_trainer"]
