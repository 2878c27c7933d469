"""A worker's volumes and the trainer's mounts of them: its config, scratch space, shared
memory, checkpoints and (when the job names a claim) its data."""

from __future__ import annotations

from typing import Any

from kubegan_api.contract import config_map_name
from kubegan_api.reserved import (
    CHECKPOINT_VOLUME,
    CONFIG_VOLUME,
    DATA_VOLUME,
    KUBEGAN_MOUNTS,
    SHM_VOLUME,
    TMP_VOLUME,
)
from kubegan_api.spec import GANTrainingJob


def worker_volumes(job: GANTrainingJob) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the trainer's mounts of them."""
    spec = job.spec
    claim = spec.checkpoint.claim_name
    volumes: list[dict[str, Any]] = [
        {"name": CONFIG_VOLUME, "configMap": {"name": config_map_name(job.metadata.name)}},
        {"name": TMP_VOLUME, "emptyDir": {}},
        # NCCL and DataLoader workers need more shared memory than the runtime's 64 MiB.
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}},
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
