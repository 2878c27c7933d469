"""Trainer overhead benchmark: samples/s of kubegan's train step next to a plain,
hand-written PyTorch GAN loop of the same networks, losses and batch.

    .venv/bin/python bench/trainer_torch.py            # CPU sizes; GPU sizes when CUDA is up
    .venv/bin/python bench/trainer_torch.py --models dcgan,pix2pix --steps 20

On a GPU it also times fp32 / bf16 / fp16 autocast and channels_last. One process (the
DDP wrapper is not involved at world size 1; its cost is communication, measured by the
multi-GPU runs, not here). Results go to a dated file in bench/results/ by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import tempfile
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from kubegan_api.contract import ENV_CHECKPOINT_DIR, ENV_METRICS_PORT, ENV_OUTPUT_DIR
from kubegan_api.sections import TrainerConfig
from kubegan_trainer.backends.torch import rng
from kubegan_trainer.backends.torch.loop import DistInfo, GanTrainer
from kubegan_trainer.backends.torch.models import build_task
from kubegan_trainer.data import build_dataset
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.signals import StopFlag

CPU_CASES = {
    "dcgan": ({"imageSize": 32, "ngf": 64, "ndf": 64}, "digits", 32),
    "acgan": ({"imageSize": 32, "ngf": 64, "ndf": 64}, "digits", 32),
    "pix2pix": ({"imageSize": 64, "ngf": 32, "ndf": 32, "numSamples": 16}, "synthetic", 4),
    "gan3d": ({"numSamples": 16}, "synthetic", 4),
}
GPU_CASES = {
    "dcgan": ({"imageSize": 64, "ngf": 64, "ndf": 64, "channels": 3}, "synthetic", 128),
    "acgan": ({"imageSize": 32, "ngf": 64, "ndf": 64}, "digits", 128),
    "pix2pix": ({"imageSize": 256, "numSamples": 32}, "synthetic", 8),
    "gan3d": ({"numSamples": 256}, "synthetic", 64),
}


def make_config(
    model: str, options: dict, source: str, batch: int, precision: str
) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "jobName": "bench",
            "framework": "pytorch",
            "model": {"name": model, "options": options},
            "data": {"source": source},
            "training": {
                "batchSizePerReplica": batch,
                "mixedPrecision": precision,
                "generator": {"optimizer": "adam", "learningRate": 2e-4},
                "discriminator": {"optimizer": "adam", "learningRate": 2e-4},
            },
        }
    )


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[int], None], steps: int, warmup: int, device: torch.device) -> float:
    for i in range(warmup):
        fn(i)
    sync(device)
    t0 = time.perf_counter()
    for i in range(steps):
        fn(warmup + i)
    sync(device)
    return time.perf_counter() - t0


def plain_loop(task, device: torch.device, precision: str, channels_last: bool):
    """The textbook loop: D on real + detached fake, then G through D; nothing else."""
    g, d = task.generator, task.discriminator
    opt_g = torch.optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")

    def ac() -> contextlib.AbstractContextManager:
        return torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()

    def step(batch: dict[str, torch.Tensor]) -> None:
        inputs = task.generator_inputs(batch)
        with ac():
            fake = task.generate(g, inputs)
            d_loss = task.d_loss(d, batch, fake.detach(), inputs)
        opt_d.zero_grad(set_to_none=True)
        scaler.scale(d_loss).backward()
        scaler.step(opt_d)
        d.requires_grad_(False)
        with ac():
            g_loss = task.g_loss(d, batch, fake, inputs)
        opt_g.zero_grad(set_to_none=True)
        scaler.scale(g_loss).backward()
        scaler.step(opt_g)
        d.requires_grad_(True)
        scaler.update()

    return step


def bench_case(
    model: str,
    options: dict,
    source: str,
    batch: int,
    precision: str,
    channels_last: bool,
    device: torch.device,
    steps: int,
    warmup: int,
    repeats: int,
) -> tuple[float, float]:
    opts = {**options, "channelsLast": channels_last}
    cfg = make_config(model, opts, source, batch, precision)
    dataset = build_dataset(cfg)
    n = len(dataset)
    runners = {}
    tmp = tempfile.TemporaryDirectory()
    env = ClusterEnv.from_environ(
        {
            ENV_CHECKPOINT_DIR: f"{tmp.name}/c",
            ENV_OUTPUT_DIR: tmp.name,
            ENV_METRICS_PORT: "19999",
        }
    )
    for kind in ("plain", "kubegan"):
        rng.seed_all(0)
        task = build_task(cfg, dataset)
        trainer = GanTrainer(cfg, env, DistInfo(0, 1, 0, device), task, dataset, StopFlag())
        batches = [trainer._batch(torch.arange(i * batch, (i + 1) * batch) % n) for i in range(4)]
        if kind == "plain":  # same networks (moved/formatted by the trainer), own loop
            step = plain_loop(task, device, precision, channels_last)

            def fn(i: int, step=step, batches=batches) -> None:
                step(batches[i % 4])
        else:

            def fn(i: int, trainer=trainer, batches=batches) -> None:
                trainer.train_step([batches[i % 4]])

        runners[kind] = fn
    # Interleaved repeats, best of each: a shared machine's noise and first-use warm-up
    # (allocator, oneDNN/cuDNN plans) otherwise dominate a single measurement.
    best = {"plain": 0.0, "kubegan": 0.0}
    for _ in range(repeats):
        for kind, fn in runners.items():
            seconds = timed(fn, steps, warmup, device)
            best[kind] = max(best[kind], steps * batch / seconds)
    tmp.cleanup()
    return best["plain"], best["kubegan"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="dcgan,acgan,pix2pix,gan3d")
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default: 10 CPU, 50 GPU)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    steps = args.steps or (50 if cuda else 10)
    cases = GPU_CASES if cuda else CPU_CASES
    variants = (
        [("none", False), ("bf16", False), ("fp16", False), ("none", True), ("bf16", True)]
        if cuda
        else [("none", False)]
    )
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    name = (
        torch.cuda.get_device_name(0)
        if cuda
        else f"{platform.processor() or platform.machine()} CPU"
    )
    print(
        f"# device: {name}; torch {torch.__version__}; threads {torch.get_num_threads()}; "
        f"best of {args.repeats} x {steps} timed steps after {args.warmup} warm-up"
    )
    print(
        "| model | size | batch | precision | channels_last "
        "| plain samples/s | kubegan samples/s | overhead |"
    )
    print("|---|---|---|---|---|---:|---:|---:|")
    for model in args.models.split(","):
        options, source, batch = cases[model]
        size = "51x51x25" if model == "gan3d" else f"{options['imageSize']}^2"
        for precision, cl in variants:
            plain, ours = bench_case(
                model,
                options,
                source,
                batch,
                precision,
                cl,
                device,
                max(2, steps // 4) if model == "gan3d" and not cuda else steps,  # ~s per step
                args.warmup,
                args.repeats,
            )
            layout = "yes" if cl else "no"
            print(
                f"| {model} | {size} | {batch} | {precision} | {layout} "
                f"| {plain:.1f} | {ours:.1f} | {plain / ours:.3f}x |",
                flush=True,
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
