"""The worker environment (DESIGN §4) as the trainer parses it; the operator and `kubegan run`
build it (kubegan_api.worker_env), from the contract's names (kubegan_api.contract).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from kubegan_api.contract import (
    CHECKPOINT_ROOT,
    CHECKPOINT_SUBDIR,
    CONFIG_PATH,
    DEFAULT_JOB_NAME,
    DEFAULT_NAMESPACE,
    ENV_CHECKPOINT_DIR,
    ENV_CONFIG,
    ENV_COST_RATE_PER_HOUR,
    ENV_JOB_NAME,
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_METRICS_ADDR,
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
    METRICS_ADDR,
    METRICS_PORT,
)


@dataclass(frozen=True)
class ClusterEnv:
    """The trainer's view of its environment, parsed once at start-up."""

    job_name: str
    namespace: str
    worker_index: int
    num_workers: int
    config_path: str
    checkpoint_dir: str
    output_dir: str
    metrics_port: int
    cost_rate_per_hour: float
    tf_config: dict | None
    master_addr: str | None
    master_port: int | None
    nnodes: int
    node_rank: int
    nproc_per_node: int
    tpu_worker_id: int | None
    tpu_worker_hostnames: tuple[str, ...]
    # All interfaces in a pod (the operator scrapes it); `kubegan run` sets 127.0.0.1.
    metrics_addr: str = METRICS_ADDR

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ClusterEnv:
        """Parse the §4 variables; a missing or malformed one raises ValueError naming it."""
        e = os.environ if environ is None else environ

        def get(name: str, default: str | None = None) -> str:
            value = e.get(name, default)
            if value is None:
                raise ValueError(f"{name}: required environment variable is not set")
            return value

        def get_int(name: str, default: str | None = None) -> int:
            raw = get(name, default)
            try:
                return int(raw)
            except ValueError:
                raise ValueError(f"{name}: expected an integer, got {raw!r}") from None

        def get_float(name: str, default: str) -> float:
            raw = get(name, default)
            try:
                return float(raw)
            except ValueError:
                raise ValueError(f"{name}: expected a number, got {raw!r}") from None

        tf_config = None
        if ENV_TF_CONFIG in e:
            try:
                tf_config = json.loads(e[ENV_TF_CONFIG])
            except json.JSONDecodeError as err:
                raise ValueError(f"{ENV_TF_CONFIG}: not valid JSON ({err.msg})") from None
        hostnames = tuple(h for h in e.get(ENV_TPU_WORKER_HOSTNAMES, "").split(",") if h)
        index = get_int(ENV_WORKER_INDEX, "0")
        checkpoint_dir = get(ENV_CHECKPOINT_DIR, f"{CHECKPOINT_ROOT}/{CHECKPOINT_SUBDIR}")
        return cls(
            job_name=get(ENV_JOB_NAME, DEFAULT_JOB_NAME),
            namespace=get(ENV_NAMESPACE, DEFAULT_NAMESPACE),
            worker_index=index,
            num_workers=get_int(ENV_NUM_WORKERS, "1"),
            config_path=get(ENV_CONFIG, CONFIG_PATH),
            checkpoint_dir=checkpoint_dir,
            output_dir=get(ENV_OUTPUT_DIR, os.path.dirname(checkpoint_dir) or "."),
            metrics_port=get_int(ENV_METRICS_PORT, str(METRICS_PORT)),
            cost_rate_per_hour=get_float(ENV_COST_RATE_PER_HOUR, "0"),
            tf_config=tf_config,
            master_addr=e.get(ENV_MASTER_ADDR),
            master_port=get_int(ENV_MASTER_PORT) if ENV_MASTER_PORT in e else None,
            nnodes=get_int(ENV_NNODES, "1"),
            node_rank=get_int(ENV_NODE_RANK, str(index)),
            nproc_per_node=get_int(ENV_NPROC_PER_NODE, "1"),
            tpu_worker_id=get_int(ENV_TPU_WORKER_ID) if ENV_TPU_WORKER_ID in e else None,
            tpu_worker_hostnames=hostnames,
            metrics_addr=get(ENV_METRICS_ADDR, METRICS_ADDR),
        )


def visible_gpus(environ: Mapping[str, str], count: int | None = None) -> list[str]:
    """The GPU ids this process may use: CUDA_VISIBLE_DEVICES when set, else 0..count-1
    (count defaults to a generous 64: the caller slices only what the plan asks for)."""
    if "CUDA_VISIBLE_DEVICES" in environ:
        ids = [d.strip() for d in environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
        return [] if ids[:1] == ["-1"] else ids
    return [str(i) for i in range(64 if count is None else count)]
