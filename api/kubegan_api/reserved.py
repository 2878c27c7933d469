"""The names kubegan gives a worker pod itself (volumes, mount paths, environment variables,
label and annotation prefixes), which spec.podTemplate cannot take."""

from __future__ import annotations

import os

from kubegan_api.contract import (
    BUCKET_CREDENTIAL_KEYS,
    CHECKPOINT_ROOT,
    CONFIG_DIR,
    DATA_ROOT,
    ENV_ALLOW_HOST_PATH,
    ENV_ALLOWED_PRIORITY_CLASSES,
    ENV_CPU_THREADS,
    ENV_PREFIX,
    JOB_NAME_LABEL,
    KUEUE_QUEUE_LABEL,
    MLFLOW_CREDENTIAL_KEYS,
)
from kubegan_api.worker_env import WorkerTopology, build_worker_env

# A worker's own volumes and where the trainer mounts them; render.worker_volumes builds them
# from this table, so what is refused here is exactly what a worker has.
CONFIG_VOLUME = "config"
TMP_VOLUME = "tmp"
SHM_VOLUME = "dshm"
CHECKPOINT_VOLUME = "checkpoints"
DATA_VOLUME = "data"
TMP_DIR = "/tmp"
# The trainer's $HOME, which the operator sets: the root filesystem is read-only.
HOME_ENV = ("HOME", TMP_DIR)
KUBEGAN_MOUNTS: dict[str, str] = {
    CONFIG_VOLUME: CONFIG_DIR,
    TMP_VOLUME: TMP_DIR,
    SHM_VOLUME: "/dev/shm",
    CHECKPOINT_VOLUME: CHECKPOINT_ROOT,
    DATA_VOLUME: DATA_ROOT,
}


def _worker_env_names() -> tuple[str, ...]:
    """Every variable the operator sets on a worker that is not under ENV_PREFIX (those are
    all refused): the frameworks' own, read off build_worker_env for each kind of worker, and
    the bucket and MLflow credentials it sets from the credentialsSecrets (manifests/container.py
    sets exactly these; tests/unit/test_refusals.py reads them off rendered workers)."""
    names: set[str] = {HOME_ENV[0], *BUCKET_CREDENTIAL_KEYS, *MLFLOW_CREDENTIAL_KEYS}
    for framework, tpu in (("pytorch", False), ("tensorflow", False), ("tensorflow", True)):
        topology = WorkerTopology("j", "ns", framework, tpu, ["h:1", "g:1"], 0, 1, "", "", "", 1, 0)
        names.update(build_worker_env(topology))
    return tuple(sorted(n for n in names if not n.startswith(ENV_PREFIX)))


RESERVED_ENV = _worker_env_names()
# Variables the operator sets as defaults a job's pod template may replace (not refused): the
# compute threads, which a user tunes to their model.
TUNABLE_ENV = (ENV_CPU_THREADS,)
# Keys kubegan and Kueue own on a worker; a job joins a Kueue queue by its own labels.
RESERVED_KEY_PREFIXES = tuple(
    key.split("/", 1)[0] + "/" for key in (JOB_NAME_LABEL, KUEUE_QUEUE_LABEL)
)
# Label key prefixes that Kubernetes, Kueue and kubegan own: an operator flag that labels
# workers (--worker-identity-label) cannot use them. A subdomain counts as its parent
# (node.kubernetes.io/), except app.kubernetes.io/, the labels Kubernetes recommends to users.
OWNED_LABEL_DOMAINS = ("kubernetes.io", "k8s.io", "kueue.x-k8s.io", "kubegan.io")
USER_LABEL_DOMAINS = ("app.kubernetes.io",)


def owned_label_key(key: str) -> str | None:
    """The owner's domain when `key`'s prefix is Kubernetes', Kueue's or kubegan's, else None."""
    prefix, slash, _ = key.rpartition("/")
    if not slash or prefix in USER_LABEL_DOMAINS:
        return None
    return next((d for d in OWNED_LABEL_DOMAINS if prefix == d or prefix.endswith("." + d)), None)


# Priority classes that outrank the node's own pods: a training pod never needs one.
SYSTEM_PRIORITY_PREFIX = "system-"


def allowed_priority_classes() -> frozenset[str]:
    """The `system-` priority classes this operator lets workers use (the chart's
    workers.allowedPriorityClasses); read at each validation, as host_path_allowed is."""
    listed = os.environ.get(ENV_ALLOWED_PRIORITY_CLASSES, "")
    return frozenset(name.strip() for name in listed.split(",") if name.strip())


def priority_class_problem(name: str) -> str | None:
    """Why workers may not run with priority class `name`, or None."""
    if not name.startswith(SYSTEM_PRIORITY_PREFIX) or name in allowed_priority_classes():
        return None
    return (
        f"{SYSTEM_PRIORITY_PREFIX}* priority classes outrank the node's own pods; this operator "
        "allows them only when listed in the chart's workers.allowedPriorityClasses "
        "(--allow-priority-class)"
    )


VOLUME_SOURCES = (
    "configMap",
    "secret",
    "emptyDir",
    "persistentVolumeClaim",
    "csi",
    "projected",
    "ephemeral",
    "hostPath",
)


def host_path_allowed() -> bool:
    """The operator's switch (the chart's workers.allowHostPath); read at each validation, so
    `KUBEGAN_ALLOW_HOST_PATH=true kubegan validate` judges a job as such an operator does."""
    return os.environ.get(ENV_ALLOW_HOST_PATH, "") == "true"
