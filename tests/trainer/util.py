"""Helpers for the trainer tests: configs, real worker subprocesses, in-process trainers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from kubegan_api.contract import (
    ENV_CHECKPOINT_DIR,
    ENV_CONFIG,
    ENV_CPU_THREADS,
    ENV_METRICS_PORT,
    ENV_OUTPUT_DIR,
    EXIT_INTERRUPTED,
)
from kubegan_api.sections import TrainerConfig

from tests.trainer import hooked
from tests.trainer.workers import launch_workers

REPO = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parent


def config(
    model: str = "dcgan",
    *,
    options: dict | None = None,
    data: dict | None = None,
    checkpoint: dict | None = None,
    entrypoint: str = "",
    **training: Any,
) -> TrainerConfig:
    t = {
        "epochs": 1,
        "batchSizePerReplica": 8,
        "seed": 7,
        "generator": {"optimizer": "adam", "learningRate": 2e-4},
        "discriminator": {"optimizer": "adam", "learningRate": 2e-4},
    }
    t.update(training)
    return TrainerConfig.model_validate(
        {
            "jobName": "t",
            "framework": "pytorch",
            "model": {"name": model, "options": options or {}, "entrypoint": entrypoint},
            "data": data or {"source": "digits"},
            "training": t,
            "checkpoint": checkpoint or {},
            "monitoring": {"metricsPort": 19555},
        }
    )


def tiny_digits(**training: Any) -> TrainerConfig:
    return config(
        "acgan", options={"imageSize": 8, "ngf": 8, "ndf": 8, "latentDim": 16}, **training
    )


@dataclass
class RunResult:
    codes: list[int]
    logs: list[str]
    output: Path

    def checkpoint_state(self) -> dict[str, Any]:
        ckpts = sorted((self.output / "checkpoints").glob("ckpt-*"))
        return torch.load(ckpts[-1] / "state.pt", map_location="cpu", weights_only=True)


def run_workers(
    cfg: TrainerConfig,
    output: Path,
    workers: int = 1,
    extra_env: dict | None = None,
    command: list[str] | None = None,
    timeout: float = 300,
    sigterm_at: str | None = None,
) -> RunResult:
    """Start real `python -m kubegan_trainer` workers with the §4 environment; wait.
    `sigterm_at` "R:S": rank R stops itself with SIGTERM in global step S (hooked.py)."""
    if sigterm_at is not None:
        assert command is None, "sigterm_at runs the trainer's own entry point"
        command = hooked.command(sigterm_at=sigterm_at)
    codes, logs = launch_workers(
        cfg,
        output,
        workers=workers,
        env={**(extra_env or {}), ENV_CPU_THREADS: "1"},
        python_path=REPO,
        timeout=timeout,
        command=command,
    )
    return RunResult(codes, logs, output)


@contextmanager
def single_rank_trainer(
    cfg: TrainerConfig, tmp: Path, task=None, dataset=None, shards=None
) -> Iterator[Any]:
    """A GanTrainer in this process on a one-rank gloo group (`shards`: streamed data)."""
    import torch.distributed as dist
    from kubegan_trainer.backends.torch import rng
    from kubegan_trainer.backends.torch.loop import DistInfo, GanTrainer
    from kubegan_trainer.backends.torch.models import build_task
    from kubegan_trainer.data import build_dataset
    from kubegan_trainer.worker.cluster_env import ClusterEnv
    from kubegan_trainer.worker.signals import StopFlag

    env = ClusterEnv.from_environ(
        {
            ENV_CHECKPOINT_DIR: str(tmp / "checkpoints"),
            ENV_OUTPUT_DIR: str(tmp),
            ENV_CONFIG: str(tmp / "config.json"),
            ENV_METRICS_PORT: "19556",
        }
    )
    dataset = dataset or build_dataset(cfg)
    rng.seed_all(cfg.training.seed)
    task = task or build_task(cfg, dataset)
    rng.seed_all(cfg.training.seed + 1)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield GanTrainer(
            cfg,
            env,
            DistInfo(0, 1, 0, torch.device("cpu")),
            task,
            dataset,
            StopFlag(),
            shards=shards,
        )
    finally:
        dist.destroy_process_group()


def flat_params(state: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([v.double().flatten() for v in state.values() if v.is_floating_point()])


# Every training option on at once (both frameworks' resume tests).
EVERY_TRAINING_OPTION: dict[str, Any] = {
    "ema": {"halfLifeKimg": 0.05, "rampup": 0.5},
    "r1": {"gamma": 0.5, "interval": 2},
    "augment": {"policy": "color,translation,cutout"},
    "generator": {
        "optimizer": "adamw",
        "learningRate": 2e-4,
        "weightDecay": 0.01,
        "schedule": "cosine",
        "warmupSteps": 2,
    },
    "discriminator": {
        "optimizer": "adam",
        "learningRate": 2e-4,
        "schedule": "linear-warmup",
        "warmupSteps": 3,
    },
}


def straight_and_resumed(cfg: TrainerConfig, tmp: Path) -> tuple[RunResult, RunResult]:
    """Two workers run `cfg` through; two more are stopped by rank 1's SIGTERM in global step
    4 (epoch 1, step 1 with 3 steps an epoch) and resumed in the same folder."""
    straight = run_workers(cfg, tmp / "straight", workers=2)
    assert straight.codes == [0, 0], "\n".join(straight.logs)
    part = run_workers(cfg, tmp / "stopped", workers=2, sigterm_at="1:4")
    assert part.codes == [EXIT_INTERRUPTED] * 2, "\n".join(part.logs)
    resumed = run_workers(cfg, tmp / "stopped", workers=2)
    assert resumed.codes == [0, 0], "\n".join(resumed.logs)
    assert "resumed from epoch 1, step 1" in resumed.logs[0]
    return straight, resumed


def assert_states_equal(a: Any, b: Any, where: str = "") -> None:
    """Two checkpoint states (nested dicts, lists, tensors) are bitwise equal, but for the
    wall time they record (`elapsed`)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_states_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_states_equal(x, y, f"{where}[{i}]")
    elif torch.is_tensor(a):
        assert torch.equal(a, b), where
    elif not where.endswith("elapsed"):
        assert a == b, where
