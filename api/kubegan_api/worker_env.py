"""The worker environment (DESIGN §4) as the operator and `kubegan run` build it: one
variable per contract name (kubegan_api.contract); the trainer parses it back
(kubegan_trainer.worker.cluster_env)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from kubegan_api.contract import (
    ENV_ACCUMULATION_STEPS,
    ENV_CHECKPOINT_DIR,
    ENV_CONFIG,
    ENV_COST_RATE_PER_HOUR,
    ENV_JOB_NAME,
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_METRICS_PORT,
    ENV_NAMESPACE,
    ENV_NNODES,
    ENV_NODE_RANK,
    ENV_NPROC_PER_NODE,
    ENV_NUM_WORKERS,
    ENV_OUTPUT_DIR,
    ENV_TF_CONFIG,
    ENV_TPU_WORKER_HOSTNAMES,
    ENV_TPU_WORKER_ID,
    ENV_WORKER_INDEX,
)


@dataclass(frozen=True)
class WorkerTopology:
    """Where one worker sits in its job: enough to build every variable of §4."""

    job_name: str
    namespace: str
    framework: str  # "tensorflow" | "pytorch"
    tpu: bool
    hosts: Sequence[str]  # one "host:port" per worker; the port is the worker's peer port
    index: int
    gpus_per_worker: int
    config_path: str
    checkpoint_dir: str
    output_dir: str
    metrics_port: int
    cost_rate_per_hour: float
    # Elastic jobs: the accumulation steps at this size (None: the spec's, unsaid).
    accumulation_steps: int | None = None


def build_worker_env(t: WorkerTopology) -> dict[str, str]:
    """Environment variables for worker `t.index`, in a stable order."""
    env = {
        ENV_JOB_NAME: t.job_name,
        ENV_NAMESPACE: t.namespace,
        ENV_WORKER_INDEX: str(t.index),
        ENV_NUM_WORKERS: str(len(t.hosts)),
        ENV_CONFIG: t.config_path,
        ENV_CHECKPOINT_DIR: t.checkpoint_dir,
        ENV_OUTPUT_DIR: t.output_dir,
        ENV_METRICS_PORT: str(t.metrics_port),
        ENV_COST_RATE_PER_HOUR: f"{t.cost_rate_per_hour:.6g}",
    }
    if t.accumulation_steps is not None:
        env[ENV_ACCUMULATION_STEPS] = str(t.accumulation_steps)
    if t.tpu:
        env[ENV_TPU_WORKER_ID] = str(t.index)
        env[ENV_TPU_WORKER_HOSTNAMES] = ",".join(h.rsplit(":", 1)[0] for h in t.hosts)
    elif t.framework == "tensorflow":
        env[ENV_TF_CONFIG] = json.dumps(
            {"cluster": {"worker": list(t.hosts)}, "task": {"type": "worker", "index": t.index}},
            separators=(",", ":"),
        )
    else:
        master_host, master_port = t.hosts[0].rsplit(":", 1)
        env.update(
            {
                ENV_MASTER_ADDR: master_host,
                ENV_MASTER_PORT: master_port,
                ENV_NNODES: str(len(t.hosts)),
                ENV_NODE_RANK: str(t.index),
                ENV_NPROC_PER_NODE: str(max(1, t.gpus_per_worker)),
            }
        )
    return env
