"""What the operator and the trainer share, in one place (DESIGN §4, §5, §6, §9).

The operator writes these and the trainer reads them (or the other way round): the worker
environment's variable names, the paths and ports of a worker pod, the metric names, the
exit codes and what each means, the termination message, the names of a job's objects and
the label and annotation keys on them. Neither side, nor any test, writes one of them as a
literal; `tests/unit/test_contract.py` greps for that.

Standard library only: the operator imports this without torch, tensorflow or pydantic
doing anything for it, and the trainer never imports the operator.
"""

from __future__ import annotations

import json
from typing import Any

# ---- the worker environment (DESIGN §4) ---------------------------------------------------

ENV_JOB_NAME = "KUBEGAN_JOB_NAME"
ENV_NAMESPACE = "KUBEGAN_NAMESPACE"
ENV_WORKER_INDEX = "KUBEGAN_WORKER_INDEX"
ENV_NUM_WORKERS = "KUBEGAN_NUM_WORKERS"
ENV_CONFIG = "KUBEGAN_CONFIG"
ENV_CHECKPOINT_DIR = "KUBEGAN_CHECKPOINT_DIR"
# Checkpoints in a bucket: `s3://bucket/prefix`, `gs://...`, `az://container/...`.
# The checkpoint directory then holds local copies only; the bucket is the truth on resume.
# Read by the trainer over spec.checkpoint.uri/endpoint; written by no part of kubegan (the
# workers get the spec's URI in their config): an override for a trainer started by hand.
ENV_CHECKPOINT_URI = "KUBEGAN_CHECKPOINT_URI"
# An S3-compatible store's endpoint; the standard AWS variable is honoured as the AWS tools do.
ENV_CHECKPOINT_ENDPOINT = "KUBEGAN_CHECKPOINT_ENDPOINT"
ENV_AWS_ENDPOINT_URL = "AWS_ENDPOINT_URL"
# The keys a job's spec.checkpoint.credentialsSecret may hold (for S3-compatible stores and
# Azure account keys, where no workload identity exists); each reaches the trainer as the
# variable of the same name, which the clouds' SDK chains read. Values are never logged.
BUCKET_CREDENTIAL_KEYS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
)
# The keys a job's spec.tracking.mlflow.credentialsSecret may hold; each reaches rank 0 as the
# variable of the same name (MLflow's own names), sent as a bearer token or basic auth, never
# logged.
MLFLOW_CREDENTIAL_KEYS = (
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
)
ENV_OUTPUT_DIR = "KUBEGAN_OUTPUT_DIR"
ENV_METRICS_PORT = "KUBEGAN_METRICS_PORT"
ENV_COST_RATE_PER_HOUR = "KUBEGAN_COST_RATE_PER_HOUR"  # the job's USD per hour
# Elastic jobs only: the gradient accumulation steps at this gang's size, which keep the
# global batch of the full size (kubegan_api.elastic); it overrides
# spec.training.gradientAccumulationSteps. Unset for every other job.
ENV_ACCUMULATION_STEPS = "KUBEGAN_ACCUMULATION_STEPS"
# Where rank 0 serves metrics: every interface in a pod (the operator scrapes it);
# `kubegan run` sets loopback.
ENV_METRICS_ADDR = "KUBEGAN_METRICS_ADDR"
# Where this worker's output is already captured (`kubegan run`: <output>/logs/worker-<i>.log);
# unset in a pod, where rank 0 writes its log records to <output>/logs/ itself.
ENV_LOG_FILE = "KUBEGAN_LOG_FILE"
# Where the trainer writes its termination message (tests point it elsewhere).
ENV_TERMINATION_LOG = "KUBEGAN_TERMINATION_LOG"
# TensorFlow only: split the CPU into N logical devices (MirroredStrategy without GPUs).
ENV_TF_LOGICAL_CPUS = "KUBEGAN_TF_LOGICAL_CPUS"
# The Helm chart's trainerImages reach the operator as these.
ENV_TRAINER_IMAGE_TORCH = "KUBEGAN_TRAINER_IMAGE_TORCH"
ENV_TRAINER_IMAGE_TF = "KUBEGAN_TRAINER_IMAGE_TF"
# TensorFlow jobs on TPUs: the trainer-tf-tpu image (tensorflow-tpu and libtpu).
ENV_TRAINER_IMAGE_TF_TPU = "KUBEGAN_TRAINER_IMAGE_TF_TPU"
# "true" on the operator (the chart's workers.allowHostPath) lets spec.podTemplate mount
# hostPath volumes; anything else refuses them.
ENV_ALLOW_HOST_PATH = "KUBEGAN_ALLOW_HOST_PATH"
# The priority classes named `system-...` that spec.podTemplate may name (comma-separated;
# the chart's workers.allowedPriorityClasses, the operator's --allow-priority-class): none
# unless set, as those outrank the node's own pods.
ENV_ALLOWED_PRIORITY_CLASSES = "KUBEGAN_ALLOWED_PRIORITY_CLASSES"
# Seconds a bucket operation is tried before it fails (its retries included); each read of an
# answer waits at most a third of it. Default objstore.RETRY_SECONDS; tests make it short.
ENV_STORE_TIMEOUT_SECONDS = "KUBEGAN_STORE_TIMEOUT_SECONDS"
# Every variable of kubegan's own begins so: spec.podTemplate.spec.env cannot set one.
ENV_PREFIX = "KUBEGAN_"

# The frameworks' own variables, as the operator and `kubegan run` set them.
ENV_TF_CONFIG = "TF_CONFIG"
ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_MASTER_PORT = "MASTER_PORT"
ENV_NNODES = "NNODES"
ENV_NODE_RANK = "NODE_RANK"
ENV_NPROC_PER_NODE = "NPROC_PER_NODE"
ENV_TPU_WORKER_ID = "TPU_WORKER_ID"
ENV_TPU_WORKER_HOSTNAMES = "TPU_WORKER_HOSTNAMES"
# How many compute threads a worker runs: torch (OpenMP) reads it, the TensorFlow trainer sizes
# its thread pools by it. The operator sets it from the worker's CPU request; a pod template's
# own value replaces it.
ENV_CPU_THREADS = "OMP_NUM_THREADS"

# What the trainer assumes when a variable is unset (a container started by hand).
DEFAULT_JOB_NAME = "kubegan"
DEFAULT_NAMESPACE = "default"

# ---- paths in a worker pod ----------------------------------------------------------------

CONFIG_DIR = "/etc/kubegan"  # the job's ConfigMap, mounted read-only
CONFIG_FILE = "config.json"  # the ConfigMap's key, and so the file's name
CONFIG_PATH = f"{CONFIG_DIR}/{CONFIG_FILE}"
CHECKPOINT_ROOT = "/checkpoints"  # spec.checkpoint.claimName (or an emptyDir)
DATA_ROOT = "/data"  # spec.data.claimName, read-only
CHECKPOINT_SUBDIR = "checkpoints"  # <output>/checkpoints, in a pod and in `kubegan run`
TERMINATION_LOG_PATH = "/dev/termination-log"  # Kubernetes' default terminationMessagePath

# ---- ports --------------------------------------------------------------------------------

TF_WORKER_PORT = 2222
TPU_WORKER_PORT = 8471
TORCH_MASTER_PORT = 29500  # the rendezvous port on worker 0
PEER_PORTS = (TF_WORKER_PORT, TPU_WORKER_PORT, TORCH_MASTER_PORT)
METRICS_PORT = 9090  # spec.monitoring.metricsPort's default
METRICS_ADDR = "0.0.0.0"  # a pod's metrics are scraped from outside it
LOCAL_ADDR = "127.0.0.1"  # `kubegan run`: workers and metrics on loopback only

# ---- metric names (DESIGN §6) -------------------------------------------------------------

# Trainer, rank 0, on ENV_METRICS_PORT.
EPOCH_DURATION = "kubegan_epoch_duration_seconds"  # histogram
EPOCH = "kubegan_epoch"  # last finished epoch, 1-based
STEP_DURATION = "kubegan_step_duration_seconds"  # histogram
SAMPLES_PER_SECOND = "kubegan_samples_per_second"
GENERATOR_LOSS = "kubegan_generator_loss"
DISCRIMINATOR_LOSS = "kubegan_discriminator_loss"
EPOCH_COST = "kubegan_epoch_cost_dollars"
CHECKPOINT_DURATION = "kubegan_checkpoint_duration_seconds"  # histogram
# Beyond §6: where the latest checkpoint resumes, for status.lastCheckpoint.
CHECKPOINT_EPOCH = "kubegan_checkpoint_epoch"
CHECKPOINT_STEP = "kubegan_checkpoint_step"
CHECKPOINT_TIMESTAMP = "kubegan_checkpoint_timestamp_seconds"
QUALITY = "kubegan_quality"  # one series per quality metric (label `metric`)
# The epoch of the newest sample grid stored with the artifacts, for status.artifacts.
SAMPLES_EPOCH = "kubegan_samples_epoch"

TRAINER_METRICS = (
    EPOCH_DURATION,
    EPOCH,
    STEP_DURATION,
    SAMPLES_PER_SECOND,
    GENERATOR_LOSS,
    DISCRIMINATOR_LOSS,
    EPOCH_COST,
    CHECKPOINT_DURATION,
    CHECKPOINT_EPOCH,
    CHECKPOINT_STEP,
    CHECKPOINT_TIMESTAMP,
    QUALITY,
    SAMPLES_EPOCH,
)

# Operator.
JOBS = "kubegan_jobs"  # gauge by namespace and phase
# Gauges, so no `_total` (Prometheus' naming: only counters end in it): they mirror the job
# status's own figures, which survive an operator restart that a counter would not.
JOB_COST = "kubegan_job_cost_dollars"
JOB_COST_RATE = "kubegan_job_cost_rate_dollars_per_hour"
JOB_PREEMPTIONS = "kubegan_job_preemptions"
JOB_RESTARTS = "kubegan_job_restarts"
JOB_LOST_DOLLARS = "kubegan_job_lost_dollars"  # work redone after disruptions, USD
# The workers of the job's gang while it runs (0 otherwise): an elastic job's current size.
JOB_WORKERS = "kubegan_job_workers"
# 1 while the price table lacks a price the job's nodes need (condition CostKnown=False):
# its cost gauges then count only what is priced.
JOB_COST_UNPRICED = "kubegan_job_cost_unpriced"
JOB_TIME_TO_RUNNING = "kubegan_job_time_to_running_seconds"  # histogram
RECONCILE_DURATION = "kubegan_reconcile_duration_seconds"  # histogram
RECONCILES = "kubegan_reconciles"  # a counter: exposed as kubegan_reconciles_total
OPERATOR_LEADER = "kubegan_operator_leader"
WORK_QUEUE_DEPTH = "kubegan_work_queue_depth"

OPERATOR_METRICS = (
    JOBS,
    JOB_COST,
    JOB_COST_RATE,
    JOB_PREEMPTIONS,
    JOB_RESTARTS,
    JOB_LOST_DOLLARS,
    JOB_WORKERS,
    JOB_COST_UNPRICED,
    JOB_TIME_TO_RUNNING,
    RECONCILE_DURATION,
    RECONCILES,
    OPERATOR_LEADER,
    WORK_QUEUE_DEPTH,
)

# The series a histogram or counter exposes besides (or instead of) its own name.
HISTOGRAMS = (
    EPOCH_DURATION,
    STEP_DURATION,
    CHECKPOINT_DURATION,
    JOB_TIME_TO_RUNNING,
    RECONCILE_DURATION,
)
COUNTERS = (RECONCILES,)


def exposed_series(name: str) -> tuple[str, ...]:
    """The sample names Prometheus scrapes for metric `name`."""
    if name in HISTOGRAMS:
        return (f"{name}_bucket", f"{name}_sum", f"{name}_count")
    if name in COUNTERS:
        return (f"{name}_total", f"{name}_created")
    return (name,)


# Labels on every per-job series (bounded: never pods or steps; `job` is Prometheus's own).
JOB_LABEL = "ganjob"
NAMESPACE_LABEL = "namespace"

# ---- exit codes (DESIGN §5, §9) -----------------------------------------------------------

EXIT_OK = 0  # the last epoch is done
# The job's input is wrong (config, data, checkpoints). DESIGN §9 makes it a permanent
# failure; the operator counts it as an application failure so far.
EXIT_USER_ERROR = 2
EXIT_STOPPED = 130  # `kubegan run` stopped by Ctrl-C/SIGTERM/SIGHUP, checkpointed, resumable
EXIT_INTERRUPTED = 143  # 128 + SIGTERM: stopped early after a checkpoint, resumable

EXIT_MEANINGS = {
    EXIT_OK: "finished",
    EXIT_USER_ERROR: "the job's config, data or checkpoints are wrong; one line says which",
    EXIT_STOPPED: "kubegan run was stopped; run it again to resume",
    EXIT_INTERRUPTED: "stopped by SIGTERM after checkpointing",
}


# ---- the termination message (DESIGN §5) --------------------------------------------------
#
# The trainer writes it to ENV_TERMINATION_LOG (default TERMINATION_LOG_PATH) as it exits;
# the kubelet copies it into the pod's `state.terminated.message`, where the operator reads
# the checkpoint it names into status.lastCheckpoint. JSON:
#     {"checkpoint": {"epoch": <epochs done>, "step": <steps into the next>, "time": <unix>}}
# plus, when the run stored sample grids with its artifacts, "samples": <newest grid's epoch>.

TERMINATION_MESSAGE_MAX = 4096  # the kubelet keeps at most 4 KiB; anything longer is not ours
_POSITION_LIMIT = 2**31


def termination_message(
    epoch: int,
    step: int,
    time: float,
    lost: dict[str, Any] | None = None,
    samples: int | None = None,
) -> str:
    """`lost` (optional): the work a stop could not commit to the bucket in time, as
    {"steps": <optimizer steps after the named checkpoint>, "reason": <one line>};
    `samples` (optional): the epoch of the newest sample grid stored with the artifacts."""
    body: dict[str, Any] = {"checkpoint": {"epoch": epoch, "step": step, "time": time}}
    if lost is not None:
        body["lost"] = lost
    if samples is not None:
        body["samples"] = samples
    return json.dumps(body)


def parse_termination_message(message: Any) -> tuple[int, int] | None:
    """(epochs done, steps into the next) of the checkpoint a termination message names, or
    None when it is not one the trainer wrote (a crash's last output, say)."""
    if not isinstance(message, str) or len(message) > TERMINATION_MESSAGE_MAX:
        return None
    try:
        checkpoint = json.loads(message).get("checkpoint")
        epoch, step = checkpoint["epoch"], checkpoint["step"]
    except (ValueError, AttributeError, TypeError, KeyError):
        return None
    if not all(type(v) is int and 0 <= v < _POSITION_LIMIT for v in (epoch, step)):
        return None
    return epoch, step


def parse_samples_epoch(message: Any) -> int | None:
    """The epoch of the newest stored sample grid a trainer's termination message names, or
    None (read as untrusted data, like the rest of the message)."""
    if parse_termination_message(message) is None:
        return None
    epoch = json.loads(message).get("samples")
    return epoch if type(epoch) is int and 1 <= epoch < _POSITION_LIMIT else None


LOST_REASON_MAX = 512  # what status and events carry of the trainer's one line


def parse_lost_work(message: Any) -> tuple[int, str] | None:
    """(steps, reason) of the work a stop could not commit to the bucket, as the trainer's
    termination message names it, or None. The reason is cut to one line of at most
    LOST_REASON_MAX characters: the message comes from a container, not from the trainer
    alone, so it is read as untrusted data."""
    if parse_termination_message(message) is None:
        return None
    lost = json.loads(message).get("lost")
    if not isinstance(lost, dict):
        return None
    steps, reason = lost.get("steps"), lost.get("reason")
    if type(steps) is not int or not 0 <= steps < _POSITION_LIMIT or not isinstance(reason, str):
        return None
    line = " ".join(reason.split())
    if len(line) > LOST_REASON_MAX:
        line = line[: LOST_REASON_MAX - 3] + "..."
    return steps, line


# ---- a job's objects and the keys on them (DESIGN §4, §9) ---------------------------------

WORKER_SUFFIX = "-worker-"
CONFIG_MAP_SUFFIX = "-config"
# The NetworkPolicy that admits only the job's own workers (and scrapers) to its workers.
NETWORK_POLICY_SUFFIX = "-workers"
# The trainer container of a worker pod: the operator reads its exit code and message.
CONTAINER_NAME = "trainer"

JOB_NAME_LABEL = "kubegan.io/job-name"
WORKER_INDEX_LABEL = "kubegan.io/worker-index"
# Each gang generation carries its attempt, so pods of an earlier gang are told apart.
ATTEMPT_LABEL = "kubegan.io/attempt"
# The scheduling gate kubegan lifts once the whole gang exists (never another's gate).
GANG_GATE = "kubegan.io/gang"

# Kueue's names (sigs.k8s.io/kueue v0.17.1; DESIGN §9): a job labelled with the queue label
# has its workers created as one Kueue plain-pod group, which Kueue admits as one Workload.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"  # a WorkloadPriorityClass
KUEUE_POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
# The pod set a group member belongs to; every worker one set, however their affinities differ.
KUEUE_ROLE_HASH_ANNOTATION = "kueue.x-k8s.io/role-hash"
# "false": the group is finished once no member runs; kubegan never replaces one worker of a
# gang (it starts a new group), so Kueue must not hold the quota waiting for a replacement.
KUEUE_RETRIABLE_IN_GROUP_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"  # Kueue's own: never lifted by kubegan
KUEUE_FINALIZER = "kueue.x-k8s.io/managed"  # on managed pods until Kueue has counted them
# The pod condition Kueue sets on the pods of a Workload it stops (reason WorkloadEvicted, ...).
KUEUE_TERMINATION_CONDITION = "TerminationTarget"
# Where the planner put a worker: other jobs' plans count it there until it binds.
PLANNED_NODE_ANNOTATION = "kubegan.io/planned-node"
PLANNED_NODES_ANNOTATION = "kubegan.io/planned-nodes"
STRATEGY_ANNOTATION = "kubegan.io/strategy"


def kueue_pod_group(job_name: str, uid: str | None, attempt: int) -> str:
    """The Kueue pod group (a label value: at most 63 characters) of one attempt of a job: one
    Workload per gang, and a job deleted and created again under its name is a new group."""
    parts = [job_name[:43], *([uid[:8]] if uid else []), str(attempt)]
    return "-".join(parts)[:63]


def worker_name(job_name: str, index: int) -> str:
    """Worker `index`'s pod, and its hostname."""
    return f"{job_name}{WORKER_SUFFIX}{index}"


def service_name(job_name: str) -> str:
    """The headless Service that gives workers their DNS names."""
    return job_name


def config_map_name(job_name: str) -> str:
    return f"{job_name}{CONFIG_MAP_SUFFIX}"


def network_policy_name(job_name: str) -> str:
    return f"{job_name}{NETWORK_POLICY_SUFFIX}"
