"""A worker's volumes and the trainer's mounts of them: its config, scratch space, shared
memory, checkpoints and (when the job names a claim) its data."""

from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal
from typing import Any

from kubegan_api.contract import config_map_name
from kubegan_api.quantity import parse_quantity
from kubegan_api.reserved import (
    CHECKPOINT_VOLUME,
    CONFIG_VOLUME,
    DATA_VOLUME,
    KUBEGAN_MOUNTS,
    SHM_VOLUME,
    TMP_VOLUME,
)
from kubegan_api.spec import GANTrainingJob

MI = 2**20
# /dev/shm holds what NCCL and DataLoader workers pass between processes. Its pages are
# charged to the worker's memory, so it gets half the memory request: the other half stays
# for the trainer itself. At least SHM_MIN (four times a container runtime's default 64 MiB,
# which NCCL outgrows), at most SHM_MAX: more is never used by a GAN's batches, and without
# a bound a runaway writer would fill the node's RAM (a memory-backed volume with no size is
# as large as the node's allocatable when the worker has no memory limit).
SHM_MIN = 256 * MI
SHM_MAX = 16 * 2**30


def shm_size_limit(memory: str) -> str:
    """The sizeLimit of a worker's /dev/shm for its memory request `memory` (a quantity)."""
    half = parse_quantity(memory) / 2
    mib = int((min(max(half, Decimal(SHM_MIN)), Decimal(SHM_MAX)) / MI).to_integral(ROUND_FLOOR))
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def worker_volumes(
    job: GANTrainingJob, memory: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the trainer's mounts of them; `memory`: the worker's request."""
    spec = job.spec
    claim = spec.checkpoint.claim_name
    volumes: list[dict[str, Any]] = [
        {"name": CONFIG_VOLUME, "configMap": {"name": config_map_name(job.metadata.name)}},
        {"name": TMP_VOLUME, "emptyDir": {}},
        # NCCL and DataLoader workers need more shared memory than the runtime's 64 MiB.
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_size_limit(memory)}},
        # Without a claim, checkpoints live as long as the pod (a condition says so).
        {
            "name": CHECKPOINT_VOLUME,
            **({"persistentVolumeClaim": {"claimName": claim}} if claim else {"emptyDir": {}}),
        },
    ]
    mounts: list[dict[str, Any]] = [
        {"name": CONFIG_VOLUME, "mountPath": KUBEGAN_MOUNTS[CONFIG_VOLUME], "readOnly": True},
        {"name": TMP_VOLUME, "mountPath": KUBEGAN_MOUNTS[TMP_VOLUME]},
        {"name": SHM_VOLUME, "mountPath": KUBEGAN_MOUNTS[SHM_VOLUME]},
        {"name": CHECKPOINT_VOLUME, "mountPath": KUBEGAN_MOUNTS[CHECKPOINT_VOLUME]},
    ]
    if spec.data.claim_name:
        volumes.append(
            {
                "name": DATA_VOLUME,
                "persistentVolumeClaim": {"claimName": spec.data.claim_name, "readOnly": True},
            }
        )
        mounts.append(
            {"name": DATA_VOLUME, "mountPath": KUBEGAN_MOUNTS[DATA_VOLUME], "readOnly": True}
        )
    return volumes, mounts
