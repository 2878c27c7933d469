"""The objects every job has once, beside its workers: the headless Service the workers
resolve each other through and the ConfigMap holding the trainer's config (DESIGN §4); and
the labels and owner references every object of a job carries.

Pure: given a job and (when known) its uid, return the objects. The operator creates them;
`kubegan render` prints them.
"""

from __future__ import annotations

import json
from typing import Any

from kubegan_api.contract import (
    CONFIG_FILE,
    JOB_NAME_LABEL,
    TF_WORKER_PORT,
    TORCH_MASTER_PORT,
    TPU_WORKER_PORT,
    config_map_name,
    service_name,
)
from kubegan_api.sections import Framework
from kubegan_api.spec import API_VERSION, KIND, GANTrainingJob

from kubegan_operator.placement.plan import Plan


def labels_for(job: GANTrainingJob) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "kubegan-trainer",
        "app.kubernetes.io/instance": job.metadata.name,
        "app.kubernetes.io/component": "worker",
        "app.kubernetes.io/part-of": "kubegan",
        "app.kubernetes.io/managed-by": "kubegan-operator",
        JOB_NAME_LABEL: job.metadata.name,
    }


def owner_references(job: GANTrainingJob, uid: str | None) -> list[dict[str, Any]]:
    if not uid:
        return []
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": job.metadata.name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def object_metadata(
    job: GANTrainingJob, name: str, uid: str | None, **labels: str
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": job.metadata.namespace,
        "labels": {**labels_for(job), **labels},
    }
    refs = owner_references(job, uid)
    if refs:
        meta["ownerReferences"] = refs
    return meta


def peer_port(job: GANTrainingJob, plan: Plan | None = None) -> int:
    # From the spec, not the plan: the Service is created before any plan exists.
    if job.spec.resources.tpu is not None:
        return TPU_WORKER_PORT
    return TF_WORKER_PORT if job.spec.framework == Framework.tensorflow else TORCH_MASTER_PORT


def render_service(job: GANTrainingJob, plan: Plan, uid: str | None = None) -> dict[str, Any]:
    name = job.metadata.name
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(job, service_name(name), uid),
        "spec": {
            "clusterIP": "None",
            # Workers rendezvous before they are Ready; they must resolve each other anyway.
            "publishNotReadyAddresses": True,
            "selector": {JOB_NAME_LABEL: name},
            "ports": [
                {"name": "peer", "port": peer_port(job, plan), "protocol": "TCP"},
                {"name": "metrics", "port": job.spec.monitoring.metrics_port, "protocol": "TCP"},
            ],
        },
    }


def render_config_map(job: GANTrainingJob, uid: str | None = None) -> dict[str, Any]:
    config = job.trainer_config().to_api()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_metadata(job, config_map_name(job.metadata.name), uid),
        "data": {CONFIG_FILE: json.dumps(config, indent=2, sort_keys=True) + "\n"},
    }
