# kubegan developer entry points. `make install` is idempotent; `make test` runs every tier.
SHELL := /bin/bash
PY_VERSION ?= 3.11
VENV := .venv
PY := $(VENV)/bin/python
# uv at the version pyproject.toml requires, cached outside the repo (hack/install-uv.sh).
UV_VERSION := $(shell sed -n 's/^required-version = "==\(.*\)"$$/\1/p' pyproject.toml)
UV := $(HOME)/.cache/kubegan/tools/uv-$(UV_VERSION)/bin/uv
# What .venv holds: every extra but tensorflow-cuda (the GPU image's; tests run on CPU), exactly
# as uv.lock pins them (`uv sync` also removes anything the lock does not name).
VENV_EXTRAS := --extra operator --extra torch --extra tensorflow --extra dev
# uv keeps one wheel cache per machine; hardlinks make a second .venv (a fresh clone) nearly free.
export UV_CACHE_DIR ?= $(HOME)/.cache/uv
export UV_LINK_MODE ?= hardlink
REAL_NODES ?= 2

.PHONY: install lock lint demo cluster-up cluster-down crd

# Everything the tests and the demo need: system packages (Debian), the Python environment,
# the Go-built control plane, real-node binaries and the cluster tier's add-ons (Karpenter,
# Kueue), all cached by version outside the repo and reused when present.
install: $(VENV)/.installed install-system
# What only the helm, monitoring, cluster and e2e tiers need (`make test` builds it in their
# lanes while the unit and trainer tiers run in another): the control plane and the real nodes'
# binaries, which the e2e tier needs, and the cluster tier's add-ons, which it does not.
.PHONY: install-system install-control-plane install-addons
install-system: install-control-plane install-addons
install-control-plane:
	bash hack/install-debian-packages.sh
	bash hack/build-binaries.sh
	bash hack/build-node-binaries.sh
	bash hack/drop-go-caches.sh
install-addons:
	bash hack/build-cluster-addons.sh
	bash hack/drop-go-caches.sh

$(UV):
	bash hack/install-uv.sh >/dev/null

# --locked: a pyproject.toml change without `make lock` fails here instead of installing
# something the lock does not say.
$(VENV)/.installed: pyproject.toml uv.lock hack/warm-bytecode.py | $(UV)
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync --locked --python $(PY_VERSION) $(VENV_EXTRAS)
	PYTHONDONTWRITEBYTECODE= $(PY) hack/warm-bytecode.py
	touch $@

# --- tests: one pytest marker and one target per tier (tests/README.md) ---
# `make test` runs every tier, each in its own pytest process, in three lanes side by side
# (hack/run-tiers.sh: unit, trainer-rest | install-control-plane, install-addons, helm,
# monitoring, cluster | images, e2e once install-control-plane is done; the trainer tier in two
# halves, test-trainer-rest and then test-trainer-tf in whichever of the first two lanes is
# free first), going on after a failed tier and
# failing at the end with the list; KUBEGAN_TEST_LANES changes the lanes. Each tier stops what
# it started before the next one starts (KUBEGAN_STOP_CLUSTER: the cluster tier's control
# plane, when it started it).
# Each step's output is also in .test-logs/<step>.log.
TIERS := unit trainer helm monitoring cluster e2e
PYTEST := $(PY) -m pytest -q --durations=25
# Inside `make test` the prerequisites were made once, before the first tier.
INSTALL := $(if $(KUBEGAN_PREREQS_DONE),$(VENV)/.installed,install)
IMAGES := $(if $(KUBEGAN_PREREQS_DONE),,images)
.PHONY: test $(addprefix test-,$(TIERS)) test-trainer-rest test-trainer-tf
test: $(VENV)/.installed
	@bash hack/run-tiers.sh

test-unit: $(VENV)/.installed
	$(PYTEST) tests/unit
test-trainer: $(VENV)/.installed
	$(PYTEST) tests/trainer
# The trainer tier in two pytest processes, for two lanes of `make test`: it is the longest
# tier, and run whole it was the last one left, with a core idle.
test-trainer-rest: $(VENV)/.installed
	$(PYTEST) tests/trainer --ignore=tests/trainer/tf
test-trainer-tf: $(VENV)/.installed
	$(PYTEST) tests/trainer/tf
test-helm: $(INSTALL)
	$(PYTEST) tests/helm
test-monitoring: $(INSTALL)
	$(PYTEST) tests/monitoring
test-cluster: $(INSTALL)
	$(PYTEST) tests/cluster
# Real nodes need root; the e2e tier runs the images `make images` builds.
test-e2e: $(INSTALL) $(IMAGES)
	$(PYTEST) tests/e2e

# Upgrade every pinned dependency on purpose: uv.lock resolved again, requirements/*.txt (the
# images' lists) exported from it. Commit both and let the whole suite check the upgrade.
lock: | $(UV)
	UV=$(UV) bash hack/lock.sh --upgrade

# shellcheck: every shell script (Debian's, make install; tests/helm/test_shellcheck.py also
# finds scripts without the suffix by their shebang).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check api operator trainer tests
	shellcheck $$(git ls-files -co --exclude-standard '*.sh') .ci/run

crd: $(VENV)/.installed
	$(VENV)/bin/kubegan crd > crds/gantrainingjobs.kubegan.io.yaml
	cp crds/gantrainingjobs.kubegan.io.yaml charts/kubegan/crds/

demo: $(VENV)/.installed
	$(VENV)/bin/kubegan run examples/digits-local.yaml

# The operator at 1000 KWOK nodes / 500 jobs on its own control plane (bench/README.md).
.PHONY: bench-operator bench-preemption bench-autoscale
bench-operator: install
	nice -n 10 $(PY) bench/operator_scale.py --nodes 1000 --jobs 500
# A gang on an autoscaled pool at zero nodes, measured with a real Karpenter (bench/README.md).
bench-autoscale: install
	nice -n 10 $(PY) bench/autoscale.py --runs 3
# Spot reclaim on real nodes, measured: its own control plane and 3 real nodes (bench/README.md).
bench-preemption: install images
	nice -n 10 $(PY) bench/e2e_preemption.py --runs 7
# Elastic vs fixed size through a spot stockout on 3 real nodes, its own control plane (bench/README.md).
.PHONY: bench-elastic
bench-elastic: install images
	nice -n 10 $(PY) bench/elastic.py --runs 1
# Checkpoints in a bucket and datasets by shard, measured on a local S3 server (bench/README.md).
.PHONY: bench-object-store
bench-object-store: $(VENV)/.installed
	nice -n 10 $(PY) bench/object_store.py --runs 3
# The trainer on a GPU in one command (bench/README.md): here without CUDA it runs at tiny sizes
# on the CPU; a lent GPU machine runs `python3 bench/gpu_check.py` with bench/wheelhouse carried.
.PHONY: gpu-check gpu-wheelhouse
gpu-check: $(VENV)/.installed
	$(PY) bench/gpu_check.py
# Wheels of what gpu_check.py needs beyond torch and numpy (pydantic...), for CPython 3.10-3.13.
gpu-wheelhouse:
	bash bench/gpu_wheelhouse.sh

# --- local control plane (hack/README.md) ---
.PHONY: cluster-binaries cluster-addons
cluster-binaries: ; bash hack/build-binaries.sh
# Karpenter (KWOK provider) and Kueue for the cluster tier (tests/README.md).
cluster-addons: ; bash hack/build-cluster-addons.sh
# The control plane, then REAL_NODES real nodes (default 2; REAL_NODES=0: KWOK nodes only).
cluster-up:
	bash hack/cluster-up.sh
	if [ "$(REAL_NODES)" != 0 ]; then REAL_NODES=$(REAL_NODES) bash hack/real-node-up.sh; fi
cluster-down:
	bash hack/real-node-down.sh
	bash hack/cluster-down.sh

# --- real nodes: kubelet + containerd + kube-proxy per node, CoreDNS (hack/README.md) ---
# Needs root and a running control plane. The e2e tier starts its own cluster and nodes.
.PHONY: node-binaries real-nodes-up real-nodes-down
node-binaries: ; bash hack/build-node-binaries.sh
real-nodes-up: node-binaries ; REAL_NODES=$(REAL_NODES) bash hack/real-node-up.sh
real-nodes-down: ; bash hack/real-node-down.sh

# --- images: the Dockerfile's targets built with buildkit, for the real nodes (hack/README.md) ---
# Needs root. Archives and caches live in ~/.cache/kubegan/ (outside the repo).
.PHONY: images load-images test-images
images: ; bash hack/build-images.sh && bash hack/drop-go-caches.sh
# The images and the chart to your registry, at the chart's versions (hack/push.sh; docs/install.md).
.PHONY: push
push: ; REGISTRY="$(REGISTRY)" bash hack/push.sh $(PUSH_TARGETS)
load-images: ; bash hack/load-images.sh
test-images: ; bash hack/test-images.sh
