"""Helpers for the TensorFlow trainer tests: configs, in-process trainers, real workers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from kubegan_api.contract import (
    ENV_CHECKPOINT_DIR,
    ENV_CONFIG,
    ENV_CPU_THREADS,
    ENV_METRICS_PORT,
    ENV_OUTPUT_DIR,
    ENV_TF_LOGICAL_CPUS,
)
from kubegan_api.sections import TrainerConfig
from kubegan_trainer.worker.cluster_env import ClusterEnv

from tests.trainer import hooked
from tests.trainer.workers import launch_workers

REPO = Path(__file__).resolve().parents[3]

TINY = {
    "dcgan": {"imageSize": 8, "ngf": 4, "ndf": 4, "latentDim": 8},
    "acgan": {"imageSize": 8, "ngf": 4, "ndf": 4, "latentDim": 8},
    "gan3d": {"size": "tiny", "numSamples": 48},
    "custom": {"latentDim": 8, "imageSize": 8},
}


def tf_config(
    model: str = "dcgan",
    *,
    options: dict | None = None,
    data: dict | None = None,
    checkpoint: dict | None = None,
    entrypoint: str = "",
    strategy: str = "auto",
    **training: Any,
) -> TrainerConfig:
    t: dict[str, Any] = {"epochs": 1, "batchSizePerReplica": 4, "seed": 7}
    t.update(training)
    default_data = {"source": "synthetic"} if model == "gan3d" else {"source": "digits"}
    return TrainerConfig.model_validate(
        {
            "jobName": "tft",
            "framework": "tensorflow",
            "strategy": strategy,
            "model": {
                "name": model,
                "options": options if options is not None else TINY[model],
                "entrypoint": entrypoint,
            },
            "data": data or default_data,
            "training": t,
            "checkpoint": checkpoint or {},
            "monitoring": {"metricsPort": 19655},
        }
    )


def env_for(tmp: Path) -> ClusterEnv:
    return ClusterEnv.from_environ(
        {
            ENV_CHECKPOINT_DIR: str(tmp / "checkpoints"),
            ENV_OUTPUT_DIR: str(tmp),
            ENV_CONFIG: str(tmp / "config.json"),
            ENV_METRICS_PORT: "0",
        }
    )


def trainer(cfg: TrainerConfig, tmp: Path, hooks: Any = None) -> Any:
    """A TensorFlow GanTrainer in this process (MirroredStrategy over the 2 logical CPUs)."""
    from kubegan_trainer.backends.tf.entry import build_trainer
    from kubegan_trainer.worker.signals import StopFlag

    return build_trainer(cfg, env_for(tmp), StopFlag(), hooks)


@dataclass
class RunResult:
    codes: list[int]
    logs: list[str]
    output: Path

    def trace(self, worker: int = 0) -> list[dict[str, Any]]:
        path = self.output / "trace" / f"worker-{worker}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def weights(self, worker: int = 0) -> dict[str, np.ndarray]:
        with np.load(self.output / "weights" / f"worker-{worker}.npz") as z:
            return {k: z[k] for k in z.files}


def run_workers(
    cfg: TrainerConfig,
    output: Path,
    workers: int = 1,
    extra_env: dict | None = None,
    timeout: float = 240,
    sigterm_at: str | None = None,
) -> RunResult:
    """Real trainer workers with the §4 environment (TF_CONFIG from build_worker_env, as the
    operator renders it); each has one CPU replica. Started through tests/trainer/hooked.py,
    which traces each worker's batches and keeps its final weights (and, given `sigterm_at`
    "R:S", has worker R stop itself with SIGTERM in global step S). Without torch, as in the
    TensorFlow image, unless the job asks for FID/KID (torch-fidelity)."""
    codes, logs = launch_workers(
        cfg,
        output,
        workers=workers,
        env={
            ENV_TF_LOGICAL_CPUS: "",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            ENV_CPU_THREADS: "1",
            "TF_NUM_INTEROP_THREADS": "1",
            "TF_NUM_INTRAOP_THREADS": "1",
            **(extra_env or {}),
        },
        python_path=REPO,
        timeout=timeout,
        command=hooked.command(
            sigterm_at=sigterm_at,
            trace=output / "trace",
            weights=output / "weights",
            no_torch=cfg.quality is None,
        ),
    )
    return RunResult(codes, logs, output)
