"""The trainer's container in a worker pod: its image, environment (DESIGN §4), ports,
resources and a locked-down securityContext."""

from __future__ import annotations

import os
from typing import Any

from kubegan_api.contract import (
    BUCKET_CREDENTIAL_KEYS,
    CHECKPOINT_ROOT,
    CHECKPOINT_SUBDIR,
    CONFIG_PATH,
    CONTAINER_NAME,
    ENV_CPU_THREADS,
    ENV_TRAINER_IMAGE_TF,
    ENV_TRAINER_IMAGE_TF_TPU,
    ENV_TRAINER_IMAGE_TORCH,
    MLFLOW_CREDENTIAL_KEYS,
    worker_name,
)
from kubegan_api.elastic import accumulation_at
from kubegan_api.quantity import parse_quantity
from kubegan_api.reserved import HOME_ENV
from kubegan_api.sections import Framework
from kubegan_api.spec import GANTrainingJob
from kubegan_api.worker_env import WorkerTopology, build_worker_env

from kubegan_operator import __version__
from kubegan_operator.foundation.topology import GPU_RESOURCE, TPU_RESOURCE
from kubegan_operator.manifests.objects import peer_port
from kubegan_operator.placement.plan import Plan
from kubegan_operator.placement.worker_share import MIN_CPU_TEXT, MIN_MEMORY_TEXT

# The Helm chart's trainerImages reach the operator as these variables (charts/kubegan).
DEFAULT_IMAGES = {
    Framework.pytorch: os.environ.get(ENV_TRAINER_IMAGE_TORCH)
    or f"ghcr.io/kubegan/trainer-torch:{__version__}",
    Framework.tensorflow: os.environ.get(ENV_TRAINER_IMAGE_TF)
    or f"ghcr.io/kubegan/trainer-tf:{__version__}",
}
# TensorFlow on TPUs needs tensorflow-tpu and libtpu, which only this image has.
DEFAULT_TPU_IMAGE = (
    os.environ.get(ENV_TRAINER_IMAGE_TF_TPU) or f"ghcr.io/kubegan/trainer-tf-tpu:{__version__}"
)


def default_image(job: GANTrainingJob, plan: Plan) -> str:
    """The trainer image of a job that names none: its framework's, or the TPU one when the
    plan puts it on TPU chips."""
    if plan.tpu_chips_per_worker and job.spec.framework is Framework.tensorflow:
        return DEFAULT_TPU_IMAGE
    return DEFAULT_IMAGES[job.spec.framework]


def worker_hosts(job: GANTrainingJob, plan: Plan) -> list[str]:
    name, ns, port = job.metadata.name, job.metadata.namespace, peer_port(job, plan)
    return [f"{worker_name(name, i)}.{name}.{ns}.svc:{port}" for i in range(plan.workers)]


def worker_env(
    job: GANTrainingJob, plan: Plan, index: int, cost_rate_per_hour: float | None = None
) -> list[dict[str, str]]:
    """The trainer's environment (DESIGN §4), as the container's `env` list."""
    name, spec = job.metadata.name, job.spec
    mlflow = spec.tracking.mlflow
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
            accumulation_steps=accumulation_at(
                spec.resources,
                spec.training.gradient_accumulation_steps,
                plan.workers,
                plan.gpus_per_worker,
            ),
        )
    )
    # The root filesystem is read-only: libraries that write under $HOME get the tmp volume.
    return [
        *({"name": k, "value": v} for k, v in env.items()),
        {"name": HOME_ENV[0], "value": HOME_ENV[1]},
        {"name": ENV_CPU_THREADS, "value": str(cpu_threads(job, plan))},
        *bucket_credentials(spec.checkpoint.credentials_secret or spec.data.credentials_secret),
        *secret_env(mlflow.credentials_secret if mlflow else "", MLFLOW_CREDENTIAL_KEYS),
    ]


def bucket_credentials(secret: str) -> list[dict[str, Any]]:
    """The bucket's credentials from the job's Secret (secret_env)."""
    return secret_env(secret, BUCKET_CREDENTIAL_KEYS)


def secret_env(secret: str, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Credentials from the job's Secret: each fixed key, when the Secret has it, as the
    variable of that name (never a value in the pod spec, never logged)."""
    if not secret:
        return []
    return [
        {
            "name": key,
            "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": True}},
        }
        for key in keys
    ]


def worker_cpu(job: GANTrainingJob, plan: Plan) -> str:
    """The CPU one worker requests: the spec's, else its share of the planned node
    (placement.worker_share), else the documented minimum."""
    cpu = job.spec.resources.cpu
    return str(cpu) if cpu is not None else plan.cpu_per_worker or MIN_CPU_TEXT


def cpu_threads(job: GANTrainingJob, plan: Plan) -> int:
    """The compute threads of each trainer process: the worker's whole CPUs, split between
    its processes (a torch worker runs one per GPU), at least one. Left to the frameworks,
    each process runs a thread per core of the node, however little CPU it requested, so
    workers that share a node fight over it (on 2 cores, two digits workers at 500m each
    used 60 % more CPU for the same training with two threads each than with one)."""
    processes = plan.gpus_per_worker if job.spec.framework is Framework.pytorch else 1
    return max(1, int(parse_quantity(worker_cpu(job, plan))) // max(1, processes))


def worker_memory(job: GANTrainingJob, plan: Plan) -> str:
    """The memory one worker requests, chosen as its CPU is (worker_cpu)."""
    memory = job.spec.resources.memory
    return str(memory) if memory is not None else plan.memory_per_worker or MIN_MEMORY_TEXT


def worker_resources(job: GANTrainingJob, plan: Plan) -> dict[str, dict[str, str]]:
    """Requests and limits of one worker: CPU and memory (never none: a BestEffort worker is
    evicted first), the plan's accelerators. CPU is only requested; memory the spec names and
    accelerators are limited at what is requested. A share the operator chose is only
    requested: a guess must not OOM-kill a trainer that would run within the node."""
    requests: dict[str, str] = {"cpu": worker_cpu(job, plan), "memory": worker_memory(job, plan)}
    limits: dict[str, str] = {}
    if job.spec.resources.memory is not None:
        limits["memory"] = requests["memory"]
    if plan.gpus_per_worker:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(plan.gpus_per_worker)
    if plan.tpu_chips_per_worker:
        requests[TPU_RESOURCE] = limits[TPU_RESOURCE] = str(plan.tpu_chips_per_worker)
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


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
        "image": image or spec.image or default_image(job, plan),
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
