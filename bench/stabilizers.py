"""Do generator EMA and DiffAugment help with little data? AC-GAN on 10 % of scikit-learn's
digits (a class-stratified 179 of 1797 images), the same steps, seeds and networks with and
without `training.ema` and `training.augment`, scored by the trainer's own image quality
(worker/quality.py: class_accuracy and feature_distance) against ALL the digits, so the
score measures how well the generator learned the digits, not the 179 it saw.

    .venv/bin/python bench/stabilizers.py     # 4 variants x 3 seeds, 1500 steps: ~8 min on 2 cores
    .venv/bin/python bench/stabilizers.py --seeds 1 --steps 600

Each run is a fresh trainer on a one-rank gloo group in this process, trained step by step
(no checkpoints, samples or per-epoch scores; one score at the end). Prints a markdown table;
results go to a dated file in bench/results/ by hand.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from kubegan_api.contract import ENV_CHECKPOINT_DIR, ENV_METRICS_PORT, ENV_OUTPUT_DIR
from kubegan_api.sections import TrainerConfig
from kubegan_trainer.backends.torch import rng
from kubegan_trainer.backends.torch.loop import DistInfo, GanTrainer
from kubegan_trainer.backends.torch.models import build_task
from kubegan_trainer.data import Dataset, build_dataset
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.quality import QUALITY_SEED_OFFSET, ClassifierScorer
from kubegan_trainer.worker.signals import StopFlag

# examples/digits-local.yaml's networks and optimizers (a job that learns the digits).
MODEL = {"imageSize": 16, "ngf": 16, "ndf": 16, "latentDim": 64}
BATCH = 32
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "ema": {"ema": {"halfLifeKimg": 0.5, "rampup": 0.05}},
    "diffaugment": {"augment": {"policy": "color,translation,cutout"}},
    "ema + diffaugment": {
        "ema": {"halfLifeKimg": 0.5, "rampup": 0.05},
        "augment": {"policy": "color,translation,cutout"},
    },
}


def make_config(seed: int, options: dict[str, Any]) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "jobName": "bench",
            "framework": "pytorch",
            "model": {"name": "acgan", "options": MODEL},
            "data": {"source": "digits"},
            "training": {
                "batchSizePerReplica": BATCH,
                "seed": seed,
                "generator": {"optimizer": "adam", "learningRate": 0.001, "beta1": 0.5},
                "discriminator": {"optimizer": "adam", "learningRate": 0.00025, "beta1": 0.5},
                **options,
            },
        }
    )


def subset(full: Dataset, fraction: float) -> Dataset:
    """A class-stratified `fraction` of `full`, the same for every run."""
    pick = np.random.default_rng(0)
    labels = full.arrays["label"]
    keep = np.sort(
        np.concatenate(
            [
                pick.choice(idx, size=max(1, round(len(idx) * fraction)), replace=False)
                for idx in (np.flatnonzero(labels == c) for c in range(full.num_classes))
            ]
        )
    )
    return Dataset(full.kind, {k: v[keep] for k, v in full.arrays.items()}, full.num_classes)


def train_and_score(
    cfg: TrainerConfig, data: Dataset, steps: int, scorer: ClassifierScorer
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = ClusterEnv.from_environ(
            {
                ENV_CHECKPOINT_DIR: str(Path(tmp) / "checkpoints"),
                ENV_OUTPUT_DIR: tmp,
                ENV_METRICS_PORT: "0",
            }
        )
        rng.seed_all(cfg.training.seed)
        task = build_task(cfg, data)
        rng.seed_all(cfg.training.seed + 1)
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            tr = GanTrainer(
                cfg, env, DistInfo(0, 1, 0, torch.device("cpu")), task, data, StopFlag()
            )
            done, epoch = 0, 0
            while done < steps:
                for micro, _ in tr.batches(epoch, 0):
                    tr.train_step(micro)
                    done += 1
                    if done == steps:
                        break
                epoch += 1
            return scorer.score(tr, cfg.training.seed + QUALITY_SEED_OFFSET)
        finally:
            dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--steps", type=int, default=1500, help="optimizer steps per run")
    parser.add_argument("--fraction", type=float, default=0.1)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    full = build_dataset(make_config(1, {}))
    data = subset(full, args.fraction)
    scorer = ClassifierScorer(full.arrays["image"], full.arrays["label"])
    seeds = [int(s) for s in args.seeds.split(",")]
    print(
        f"stabilizers: acgan {MODEL}, batch {BATCH}, {args.steps} steps, {len(data)} of "
        f"{len(full)} digits, seeds {seeds}; torch {torch.__version__}, "
        f"{platform.machine()}, {torch.get_num_threads()} threads"
    )
    print()
    print("| variant | class_accuracy by seed | mean | feature_distance by seed | mean | s/run |")
    print("|---|---|---:|---|---:|---:|")
    for name, options in VARIANTS.items():
        acc, fd, secs = [], [], []
        for seed in seeds:
            t0 = time.perf_counter()
            scores = train_and_score(make_config(seed, options), data, args.steps, scorer)
            secs.append(time.perf_counter() - t0)
            acc.append(scores["class_accuracy"])
            fd.append(scores["feature_distance"])
        print(
            f"| {name} | {', '.join(f'{a:.3f}' for a in acc)} | {np.mean(acc):.3f} | "
            f"{', '.join(f'{d:.2f}' for d in fd)} | {np.mean(fd):.2f} | {np.mean(secs):.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
