"""The Service, ConfigMap and worker Pods of a job (DESIGN §4), as plain manifests.

Pure: given a job, its plan and (when known) its uid, return the objects. The operator
creates them; `kubegan render` prints them.
"""

from __future__ import annotations

import json
import os
from typing import Any

# Label keys, names, paths and ports are the contract's; callers also find JOB_NAME_LABEL here.
from kubegan_api.contract import (
    ATTEMPT_LABEL,
    BUCKET_CREDENTIAL_KEYS,
    CHECKPOINT_ROOT,
    CHECKPOINT_SUBDIR,
    CONFIG_FILE,
    CONFIG_PATH,
    CONTAINER_NAME,
    ENV_TRAINER_IMAGE_TF,
    ENV_TRAINER_IMAGE_TORCH,
    GANG_GATE,
    JOB_NAME_LABEL,
    KUEUE_POD_GROUP_COUNT_ANNOTATION,
    KUEUE_POD_GROUP_LABEL,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_LABEL,
    KUEUE_RETRIABLE_IN_GROUP_ANNOTATION,
    KUEUE_ROLE_HASH_ANNOTATION,
    PLANNED_NODE_ANNOTATION,
    PLANNED_NODES_ANNOTATION,
    STRATEGY_ANNOTATION,
    TF_WORKER_PORT,
    TORCH_MASTER_PORT,
    TPU_WORKER_PORT,
    WORKER_INDEX_LABEL,
    config_map_name,
    kueue_pod_group,
    service_name,
    worker_name,
)
from kubegan_api.podtemplate import PodTemplateSpec
from kubegan_api.reserved import (
    CHECKPOINT_VOLUME,
    CONFIG_VOLUME,
    DATA_VOLUME,
    HOME_ENV,
    KUBEGAN_MOUNTS,
    SHM_VOLUME,
    TMP_VOLUME,
)
from kubegan_api.resources import SpotPolicy
from kubegan_api.sections import Framework
from kubegan_api.spec import API_VERSION, KIND, GANTrainingJob
from kubegan_api.worker_env import WorkerTopology, build_worker_env

from kubegan_operator import __version__
from kubegan_operator.foundation.topology import (
    GPU_RESOURCE,
    HOSTNAME_LABEL,
    SPOT_LABELS,
    TPU_ACCELERATOR_LABEL,
    TPU_RESOURCE,
    TPU_TOPOLOGY_LABEL,
)
from kubegan_operator.placement.planner import Plan, job_tolerations

RUN_AS_USER = 1000
TERMINATION_GRACE_SECONDS = 60
# The Helm chart's trainerImages reach the operator as these variables (charts/kubegan).
DEFAULT_IMAGES = {
    Framework.pytorch: os.environ.get(ENV_TRAINER_IMAGE_TORCH)
    or f"ghcr.io/kubegan/trainer-torch:{__version__}",
    Framework.tensorflow: os.environ.get(ENV_TRAINER_IMAGE_TF)
    or f"ghcr.io/kubegan/trainer-tf:{__version__}",
}


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


def _metadata(job: GANTrainingJob, name: str, uid: str | None, **labels: str) -> dict[str, Any]:
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
        "metadata": _metadata(job, service_name(name), uid),
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
        "metadata": _metadata(job, config_map_name(job.metadata.name), uid),
        "data": {CONFIG_FILE: json.dumps(config, indent=2, sort_keys=True) + "\n"},
    }


def worker_hosts(job: GANTrainingJob, plan: Plan) -> list[str]:
    name, ns, port = job.metadata.name, job.metadata.namespace, peer_port(job, plan)
    return [f"{worker_name(name, i)}.{name}.{ns}.svc:{port}" for i in range(plan.workers)]


def node_affinity(job: GANTrainingJob, plan: Plan, node: str | None = None) -> dict[str, Any]:
    """Required: the planned pool, the spot policy and, given `node`, that node (the one
    planned for this worker); preferred: the planned nodes.

    A worker is pinned to its planned node because every later plan counts it there: left
    free to take any node of the pool, the scheduler (which spreads, where the planner packs)
    put workers on nodes planned for other jobs, whose gangs then could not be bound and
    waited to be planned again. Pinned, the plan and the scheduler agree; a planned node that
    goes away or fills up makes the operator plan the gang again at once (replan.py)."""
    base: list[dict[str, Any]] = []
    if plan.pool:
        base.append({"key": plan.pool_label, "operator": "In", "values": [plan.pool]})
    tpu = job.spec.resources.tpu
    if tpu is not None:
        base.append({"key": TPU_ACCELERATOR_LABEL, "operator": "In", "values": [tpu.accelerator]})
        base.append({"key": TPU_TOPOLOGY_LABEL, "operator": "In", "values": [tpu.topology]})
    policy = job.spec.placement.spot
    if policy == SpotPolicy.never:
        base += [{"key": k, "operator": "NotIn", "values": [v]} for k, v in SPOT_LABELS.items()]
        terms = [base]
    elif policy == SpotPolicy.required:
        # Node selector terms are ORed: one term per way a node can say it is spot.
        terms = [
            [*base, {"key": k, "operator": "In", "values": [v]}] for k, v in SPOT_LABELS.items()
        ]
    else:
        terms = [base]
    affinity: dict[str, Any] = {}
    # The node by name (a field, not the hostname label, which need not equal the name).
    pin = [{"key": "metadata.name", "operator": "In", "values": [node]}] if node else []
    if any(terms) or pin:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [
                {**({"matchExpressions": t} if t else {}), **({"matchFields": pin} if pin else {})}
                for t in terms
            ]
        }
    if plan.nodes:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {
                "weight": 50,
                "preference": {
                    "matchExpressions": [
                        {"key": HOSTNAME_LABEL, "operator": "In", "values": list(plan.nodes)}
                    ]
                },
            }
        ]
    return affinity


def _planned_node(plan: Plan, index: int) -> str | None:
    """The node worker `index` is pinned to; none while the plan waits for an autoscaler:
    Karpenter refuses to provision for a pod whose affinity names nodes by field (and its
    peers may take the existing free nodes of the pool as well as any)."""
    if plan.waits_for_capacity():
        return None
    return plan.nodes[index] if index < len(plan.nodes) else None


def worker_env(
    job: GANTrainingJob, plan: Plan, index: int, cost_rate_per_hour: float | None = None
) -> list[dict[str, str]]:
    """The trainer's environment (DESIGN §4), as the container's `env` list."""
    name, spec = job.metadata.name, job.spec
    output_dir = f"{CHECKPOINT_ROOT}/{name}"
    env = build_worker_env(
        WorkerTopology(
            job_name=name,
            namespace=job.metadata.namespace,
            framework=spec.framework.value,
            tpu=bool(plan.tpu_chips_per_worker),
            hosts=worker_hosts(job, plan),
            index=index,
            gpus_per_worker=plan.gpus_per_worker,
            config_path=CONFIG_PATH,
            checkpoint_dir=f"{output_dir}/{CHECKPOINT_SUBDIR}",
            output_dir=output_dir,
            metrics_port=spec.monitoring.metrics_port,
            cost_rate_per_hour=plan.cost_per_hour
            if cost_rate_per_hour is None
            else cost_rate_per_hour,
        )
    )
    # The root filesystem is read-only: libraries that write under $HOME get the tmp volume.
    return [
        *({"name": k, "value": v} for k, v in env.items()),
        {"name": HOME_ENV[0], "value": HOME_ENV[1]},
        *bucket_credentials(spec.checkpoint.credentials_secret or spec.data.credentials_secret),
    ]


def bucket_credentials(secret: str) -> list[dict[str, Any]]:
    """The bucket's credentials from the job's Secret: each fixed key, when the Secret has it,
    as the variable of that name (never a value in the pod spec, never logged)."""
    if not secret:
        return []
    return [
        {
            "name": key,
            "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": True}},
        }
        for key in BUCKET_CREDENTIAL_KEYS
    ]


def worker_resources(job: GANTrainingJob, plan: Plan) -> dict[str, dict[str, str]]:
    """Requests and limits of one worker: the spec's CPU and memory, the plan's accelerators.
    CPU is only requested; memory and accelerators are limited at what is requested."""
    r = job.spec.resources
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if r.cpu is not None:
        requests["cpu"] = str(r.cpu)
    if r.memory is not None:
        requests["memory"] = limits["memory"] = str(r.memory)
    if plan.gpus_per_worker:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(plan.gpus_per_worker)
    if plan.tpu_chips_per_worker:
        requests[TPU_RESOURCE] = limits[TPU_RESOURCE] = str(plan.tpu_chips_per_worker)
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


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


def trainer_container(
    job: GANTrainingJob,
    plan: Plan,
    index: int,
    mounts: list[dict[str, Any]],
    *,
    image: str | None = None,
    cost_rate_per_hour: float | None = None,
) -> dict[str, Any]:
    spec = job.spec
    return {
        "name": CONTAINER_NAME,
        "image": image or spec.image or DEFAULT_IMAGES[spec.framework],
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "kubegan_trainer"],
        "env": worker_env(job, plan, index, cost_rate_per_hour),
        "ports": [
            {"name": "peer", "containerPort": peer_port(job, plan), "protocol": "TCP"},
            {"name": "metrics", "containerPort": spec.monitoring.metrics_port, "protocol": "TCP"},
        ],
        "resources": worker_resources(job, plan),
        "volumeMounts": mounts,
        # A trainer that fails before writing its termination message (a config error's one
        # line) still tells the job's status why: the log's tail stands in.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


def worker_affinity(job: GANTrainingJob, plan: Plan, index: int) -> dict[str, Any]:
    """One worker of a job per node (required), on the node planned for it (node_affinity)."""
    affinity: dict[str, Any] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {JOB_NAME_LABEL: job.metadata.name}},
                    "topologyKey": HOSTNAME_LABEL,
                }
            ]
        }
    }
    na = node_affinity(job, plan, _planned_node(plan, index))
    if na:
        affinity["nodeAffinity"] = na
    return affinity


def worker_metadata(
    job: GANTrainingJob, plan: Plan, index: int, uid: str | None, attempt: int
) -> dict[str, Any]:
    meta = _metadata(
        job,
        worker_name(job.metadata.name, index),
        uid,
        **{WORKER_INDEX_LABEL: str(index), ATTEMPT_LABEL: str(attempt)},
    )
    meta["annotations"] = {
        # Where the planner put this worker: other jobs' plans count it there until it binds.
        PLANNED_NODE_ANNOTATION: _planned_node(plan, index) or "",
        PLANNED_NODES_ANNOTATION: ",".join(plan.nodes),
        STRATEGY_ANNOTATION: plan.strategy,
    }
    return meta


# Every worker is one pod set of Kueue's Workload (their planned nodes differ, so the hash
# Kueue would compute differs per worker: a gang over 8 nodes would exceed its 8 pod sets).
KUEUE_ROLE = "workers"


def kueue_group(
    job: GANTrainingJob, plan: Plan, uid: str | None, attempt: int
) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) that make a job's workers one Kueue plain-pod group, admitted
    whole against its LocalQueue's ClusterQueue or not at all; empty for a job that names no
    queue. Its WorkloadPriorityClass, when the job names one, goes with it."""
    job_labels = job.metadata.labels or {}
    queue = job_labels.get(KUEUE_QUEUE_LABEL)
    if not queue:
        return {}, {}
    labels = {
        KUEUE_QUEUE_LABEL: queue,
        KUEUE_POD_GROUP_LABEL: kueue_pod_group(job.metadata.name, uid, attempt),
    }
    priority = job_labels.get(KUEUE_PRIORITY_CLASS_LABEL)
    if priority:
        labels[KUEUE_PRIORITY_CLASS_LABEL] = priority
    annotations = {
        KUEUE_POD_GROUP_COUNT_ANNOTATION: str(plan.workers),
        KUEUE_ROLE_HASH_ANNOTATION: KUEUE_ROLE,
        KUEUE_RETRIABLE_IN_GROUP_ANNOTATION: "false",
    }
    return labels, annotations


def render_pod(
    job: GANTrainingJob,
    plan: Plan,
    index: int,
    *,
    uid: str | None = None,
    attempt: int = 0,
    cost_rate_per_hour: float | None = None,
    image: str | None = None,
) -> dict[str, Any]:
    """Worker `index` of the gang `plan` places, in attempt `attempt`."""
    name = job.metadata.name
    volumes, mounts = worker_volumes(job)
    container = trainer_container(
        job, plan, index, mounts, image=image, cost_rate_per_hour=cost_rate_per_hour
    )
    selector = dict(job.spec.placement.node_selector)
    pod_spec: dict[str, Any] = {
        "hostname": worker_name(name, index),
        "subdomain": name,
        "restartPolicy": "Never",  # the operator restarts the whole gang, never one worker
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # A gang of one is whole the moment it is created: its gate would only cost a
        # round trip to lift it (most single-node jobs).
        # Nor is a gang waiting for an autoscaler gated: a gated pod is invisible to it.
        **(
            {"schedulingGates": [{"name": GANG_GATE}]}
            if plan.workers > 1 and not plan.waits_for_capacity()
            else {}
        ),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "affinity": worker_affinity(job, plan, index),
        "tolerations": job_tolerations(job.spec),
        "containers": [container],
        "volumes": volumes,
        **({"nodeSelector": selector} if selector else {}),
    }
    meta = worker_metadata(job, plan, index, uid, attempt)
    queue_labels, queue_annotations = kueue_group(job, plan, uid, attempt)
    meta["labels"].update(queue_labels)
    meta["annotations"].update(queue_annotations)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}
    if job.spec.pod_template is not None:
        apply_pod_template(pod, job.spec.pod_template)
    return pod


def render_all(
    job: GANTrainingJob,
    plan: Plan,
    *,
    uid: str | None = None,
    attempt: int = 0,
    image: str | None = None,
) -> list[dict[str, Any]]:
    if not plan.feasible:
        raise ValueError(f"cannot render an infeasible plan: {plan.reason}")
    return [
        render_service(job, plan, uid),
        render_config_map(job, uid),
        *(
            render_pod(job, plan, i, uid=uid, attempt=attempt, image=image)
            for i in range(plan.workers)
        ),
    ]


# ---- spec.podTemplate (issue 27) --------------------------------------------------------------


def _tighter_security_context(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """The trainer's securityContext with the template's over it. The API admits only fields
    that equal or tighten kubegan's (api/podtemplate.py), so the template's win, except that
    kubegan's capability drop of ALL stays whatever else is dropped."""
    merged = {**ours, **theirs}
    drop = ours["capabilities"]["drop"]
    extra = [c for c in theirs.get("capabilities", {}).get("drop", []) if c not in drop]
    merged["capabilities"] = {"drop": [*drop, *extra]}
    return merged


def apply_pod_template(pod: dict[str, Any], template: PodTemplateSpec) -> None:
    """Add a job's spec.podTemplate to one worker pod: labels and annotations (kubegan's own
    win), the pod fields, and for the trainer its env after kubegan's (the API refuses
    kubegan's names, so nothing is overridden), mounts and a tighter securityContext.

    The service account token stays unmounted (automountServiceAccountToken false): a
    workload-identity token reaches the trainer through a projected volume the template adds."""
    meta, spec = pod["metadata"], pod["spec"]
    meta["labels"] = {**template.metadata.labels, **meta["labels"]}
    meta["annotations"] = {**template.metadata.annotations, **meta.get("annotations", {})}
    t = template.spec
    if t.service_account_name:
        spec["serviceAccountName"] = t.service_account_name
    if t.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s.name} for s in t.image_pull_secrets]
    if t.priority_class_name:
        spec["priorityClassName"] = t.priority_class_name
    spec["volumes"] = [*spec["volumes"], *(v.to_api() for v in t.volumes)]
    container = spec["containers"][0]
    container["env"] = [*container["env"], *(e.to_api() for e in t.env)]
    container["volumeMounts"] = [*container["volumeMounts"], *(m.to_api() for m in t.volume_mounts)]
    if t.security_context is not None:
        container["securityContext"] = _tighter_security_context(
            container["securityContext"], t.security_context.to_api()
        )
