# syntax=docker/dockerfile:1.19.0@sha256:b6afd42430b15f2d2a4c5a02b919e98a525b785b1aaff16747d2f623364e39b6
# kubegan images, one target each:
#   docker build --target operator      -t ghcr.io/kubegan/operator:0.1.0 .
#   docker build --target trainer-torch -t ghcr.io/kubegan/trainer-torch:0.1.0 .
#   docker build --target trainer-tf    -t ghcr.io/kubegan/trainer-tf:0.1.0 .
#   docker build --target trainer-tf-tpu -t ghcr.io/kubegan/trainer-tf-tpu:0.1.0 .   (amd64 only)
# Each image's dependencies are installed into a virtualenv on a clean slim base (no compiler, no
# pip, no package caches: uv runs from a bind mount, its cache is a cache mount). Every dependency
# ships wheels, so no build tools are needed. Versions and hashes come from uv.lock, exported to
# requirements/*.txt (hack/lock.sh; `make lock` upgrades them on purpose).
#
# Layers, so that a code change rebuilds in seconds: each image's dependencies are installed
# from its locked list alone (stage `requirements`), so neither a code change nor an edit of
# pyproject.toml invalidates them; the kubegan package itself is built once (stage `package`)
# and is the last, small layer of every image.
# The `# syntax=` frontend (first line) is pinned by digest for `docker build`/`buildx`, which
# fetch it; hack/build-images.sh (`make images`, the release workflow) runs BuildKit's built-in
# frontend instead (`--opt cmdline`, no registry needed), which ignores that line.
# The builders install with uv (from PyPI, pinned: UV_VERSION, by hash: requirements/uv.txt),
# whose download cache is a BuildKit cache mount (nothing of it lands in a layer) and works
# even behind proxies that strip HTTP caching headers, where pip's does not. Optional BuildKit secrets, mounted only
# for the steps that download and never part of a layer, let a build machine behind a
# TLS-intercepting proxy trust its CA (hack/build-images.sh passes them):
#   ca-certificates.crt -> /etc/ssl/certs/ca-certificates.crt, pip.conf -> /etc/pip.conf,
#   uv.toml -> /etc/uv/uv.toml.
# Build arguments: PYTHON_IMAGE (the base; hack/build-images.sh passes one made from Debian
# packages, the release workflow this default resolved to its digest), TF_EXTRA (tensorflow's extra, default and-cuda; empty for CPU-only images),
# UV_VERSION.

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# ---------------------------------------------------------------- dependency lists
# requirements/*.txt are exported from uv.lock (hack/lock.sh) with hashes: each image installs
# exactly the versions the tests ran with, and nothing unhashed.
FROM ${PYTHON_IMAGE} AS requirements
WORKDIR /req
COPY requirements/ /req/
# tensorflow[and-cuda] adds the CUDA/cuDNN wheels TensorFlow needs to see GPUs (extra
# tensorflow-cuda of pyproject.toml); an empty TF_EXTRA builds the CPU-only list.
ARG TF_EXTRA=and-cuda
RUN if [ "$TF_EXTRA" = "and-cuda" ]; then cp tensorflow-cuda.txt tensorflow-image.txt; \
    elif [ -z "$TF_EXTRA" ]; then cp tensorflow.txt tensorflow-image.txt; \
    else echo "TF_EXTRA must be and-cuda or empty, got $TF_EXTRA" >&2; exit 1; fi

# ---------------------------------------------------------------- builders
FROM ${PYTHON_IMAGE} AS uv
# uv itself by hash like everything else: requirements/uv.txt pins UV_VERSION (hack/lock.sh).
ARG UV_VERSION=0.13.9
COPY --from=requirements /req/uv.txt /req/uv.txt
RUN --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-certificates.crt,target=/etc/ssl/certs/ca-certificates.crt \
    grep -q "^uv==${UV_VERSION} " /req/uv.txt \
 && python -m venv /opt/uv \
 && /opt/uv/bin/pip install --disable-pip-version-check --no-cache-dir --require-hashes \
      --no-deps -r /req/uv.txt

FROM ${PYTHON_IMAGE} AS package
# The kubegan package alone (no dependencies, no network), installed under the prefix
# /pkg/opt/venv for the interpreter /opt/venv/bin/python: the final images copy it onto their
# /opt/venv. /opt/venv here holds only the build backend (pyproject's build-system pins).
WORKDIR /src
COPY --from=requirements /req/build.txt /req/build.txt
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv \
    --mount=type=cache,id=kubegan-uv,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=uv.toml,target=/etc/uv/uv.toml \
    --mount=type=secret,id=ca-certificates.crt,target=/etc/ssl/certs/ca-certificates.crt \
    python -m venv --without-pip /opt/venv \
 && UV_LINK_MODE=copy /opt/uv/bin/uv pip install --no-progress --python /opt/venv/bin/python \
      --require-hashes -r /req/build.txt
# README.md is the package's readme (pyproject metadata); nothing else outside the packages
# (examples/models holds the example custom models the trainer images ship).
COPY pyproject.toml README.md ./
COPY api/ api/
COPY operator/ operator/
COPY trainer/ trainer/
COPY examples/models/ examples/models/
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv \
    /opt/uv/bin/uv pip install --no-progress --offline --no-cache --python /opt/venv/bin/python \
      --no-deps --no-build-isolation --compile-bytecode --prefix /pkg/opt/venv .

# ---------------------------------------------------------------- runtime base
FROM ${PYTHON_IMAGE} AS runtime
# Read-only root filesystem in the pods: Python writes no bytecode, HOME is the /tmp emptyDir.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
# The base's own pip/setuptools are not needed at run time either (a base whose Python has no
# pip, like the Debian-made one of hack/make-python-base.sh, has nothing to remove).
RUN if python -m pip --version >/dev/null 2>&1; then \
      python -m pip uninstall --yes --no-cache-dir pip setuptools wheel; fi \
 && groupadd --gid 1000 kubegan && useradd --uid 1000 --gid 1000 --no-create-home \
      --home-dir /tmp --shell /usr/sbin/nologin kubegan \
 && groupadd --gid 65532 nonroot && useradd --uid 65532 --gid 65532 --no-create-home \
      --home-dir /tmp --shell /usr/sbin/nologin nonroot
WORKDIR /tmp

# ---------------------------------------------------------------- dependencies
# The dependencies of each image, into /opt/venv (made without pip: the final images have none),
# installed ON the runtime base: the install step's layer is the image's dependency layer, so
# BuildKit stores it once (a builder stage plus `COPY --from` stored every venv twice, 12 GB more
# for the four images). The lists come in by bind mounts, so the layer holds /opt/venv alone.
# UV_CACHE_DIR names the cache mount: the runtime base's HOME is /tmp, and uv's default cache
# there landed in the layer (7 GB of unpacked wheels in trainer-torch on 2026-11-27).
FROM runtime AS deps-operator
RUN --mount=type=bind,from=requirements,source=/req/operator.txt,target=/req/requirements.txt \
    --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv \
    --mount=type=cache,id=kubegan-uv,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=uv.toml,target=/etc/uv/uv.toml \
    --mount=type=secret,id=ca-certificates.crt,target=/etc/ssl/certs/ca-certificates.crt \
    python -m venv --without-pip /opt/venv \
 && UV_LINK_MODE=copy UV_CACHE_DIR=/root/.cache/uv /opt/uv/bin/uv pip install --no-progress \
      --python /opt/venv/bin/python --compile-bytecode --require-hashes -r /req/requirements.txt

FROM runtime AS deps-torch
# torch from PyPI on linux/amd64 brings its CUDA runtime wheels (nvidia-*): one image for
# GPU and CPU nodes.
RUN --mount=type=bind,from=requirements,source=/req/torch.txt,target=/req/requirements.txt \
    --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv \
    --mount=type=cache,id=kubegan-uv,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=uv.toml,target=/etc/uv/uv.toml \
    --mount=type=secret,id=ca-certificates.crt,target=/etc/ssl/certs/ca-certificates.crt \
    python -m venv --without-pip /opt/venv \
 && UV_LINK_MODE=copy UV_CACHE_DIR=/root/.cache/uv /opt/uv/bin/uv pip install --no-progress \
      --python /opt/venv/bin/python --compile-bytecode --require-hashes -r /req/requirements.txt

FROM runtime AS deps-tf
RUN --mount=type=bind,from=requirements,source=/req/tensorflow-image.txt,target=/req/requirements.txt \
    --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv \
    --mount=type=cache,id=kubegan-uv,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=uv.toml,target=/etc/uv/uv.toml \
    --mount=type=secret,id=ca-certificates.crt,target=/etc/ssl/certs/ca-certificates.crt \
    python -m venv --without-pip /opt/venv \
 && UV_LINK_MODE=copy UV_CACHE_DIR=/root/.cache/uv /opt/uv/bin/uv pip install --no-progress \
      --python /opt/venv/bin/python --compile-bytecode --require-hashes -r /req/requirements.txt

FROM runtime AS deps-tf-tpu
# tensorflow-tpu and the libtpu runtime it loads (extra tpu of pyproject.toml; linux/amd64 only,
# libtpu needs glibc 2.31+): TensorFlow for TPU nodes, no CUDA wheels.
RUN --mount=type=bind,from=requirements,source=/req/tpu.txt,target=/req/requirements.txt \
    --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv \
    --mount=type=cache,id=kubegan-uv,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=uv.toml,target=/etc/uv/uv.toml \
    --mount=type=secret,id=ca-certificates.crt,target=/etc/ssl/certs/ca-certificates.crt \
    python -m venv --without-pip /opt/venv \
 && UV_LINK_MODE=copy UV_CACHE_DIR=/root/.cache/uv /opt/uv/bin/uv pip install --no-progress \
      --python /opt/venv/bin/python --compile-bytecode --require-hashes -r /req/requirements.txt

# ---------------------------------------------------------------- targets
# Each target is its dependency stage (runtime base + the large dependency layer, reused after
# code changes) plus the kubegan package (a small last layer).
FROM deps-operator AS operator
COPY --from=package /pkg/opt/venv /opt/venv
# The chart's pod security context runs it as 65532 too (charts/kubegan values.yaml).
USER 65532:65532
EXPOSE 8000 8080
ENTRYPOINT ["kubegan"]
CMD ["operator"]

FROM deps-torch AS trainer-torch
COPY --from=package /pkg/opt/venv /opt/venv
# Worker pods run as 1000 (render.py RUN_AS_USER) with the command python -m kubegan_trainer.
USER 1000:1000
ENTRYPOINT ["python", "-m", "kubegan_trainer"]

FROM deps-tf AS trainer-tf
COPY --from=package /pkg/opt/venv /opt/venv
USER 1000:1000
ENTRYPOINT ["python", "-m", "kubegan_trainer"]

# TensorFlow jobs on TPUs (the operator's default for them); without a TPU the trainer exits 2
# with one line saying none was found.
FROM deps-tf-tpu AS trainer-tf-tpu
COPY --from=package /pkg/opt/venv /opt/venv
USER 1000:1000
ENTRYPOINT ["python", "-m", "kubegan_trainer"]
