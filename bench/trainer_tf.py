"""TensorFlow trainer benchmark: samples/s of kubegan's distributed train step per
strategy and precision, next to a plain hand-written TF loop (tf.function, GradientTape,
no strategy) of the same Keras networks, losses and per-replica batch.

    .venv/bin/python bench/trainer_tf.py                     # CPU cases
    .venv/bin/python bench/trainer_tf.py --models dcgan --steps 20

Each case runs in its own process (device set-up must precede TensorFlow's start):
"mirrored-1" is MirroredStrategy over one device (the CPU, or all GPUs), "mirrored-2cpu"
splits the CPU into 2 logical devices (2 replicas, same cores: shows strategy overhead,
not speed-up). Precisions: none and bf16 on CPU; none, fp16 and bf16 on GPU.
Results go to a dated file in bench/results/ by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kubegan_api.contract import (
    ENV_CHECKPOINT_DIR,
    ENV_METRICS_PORT,
    ENV_OUTPUT_DIR,
    ENV_TF_LOGICAL_CPUS,
)

CASES = {  # model -> (options, data source, per-replica batch)
    "dcgan": ({"imageSize": 32, "ngf": 32, "ndf": 32}, "digits", 32),
    "gan3d": ({"size": "tiny", "numSamples": 64}, "synthetic", 8),
}
GPU_CASES = {
    "dcgan": ({"imageSize": 64, "ngf": 64, "ndf": 64, "channels": 3}, "synthetic", 128),
    "gan3d": ({"numSamples": 256}, "synthetic", 32),
}


def _config(model: str, precision: str, gpu: bool):
    from kubegan_api.sections import TrainerConfig

    opts, source, batch = (GPU_CASES if gpu else CASES)[model]
    return TrainerConfig.model_validate(
        {
            "jobName": "bench",
            "framework": "tensorflow",
            "model": {"name": model, "options": opts},
            "data": {"source": source},
            "training": {"epochs": 1, "batchSizePerReplica": batch, "mixedPrecision": precision},
        }
    )


def _time(step, batches, warmup: int, steps: int) -> float:
    for i in range(warmup):
        out = step(batches[i % len(batches)])
    _ = [float(x) for x in out[:2]]
    t0 = time.perf_counter()
    for i in range(steps):
        out = step(batches[i % len(batches)])
    _ = [float(x) for x in out[:2]]  # wait for the device
    return time.perf_counter() - t0


def run_case(model: str, strategy: str, precision: str, steps: int) -> dict:
    """One case in this process: kubegan's step, then the plain loop."""
    os.environ[ENV_TF_LOGICAL_CPUS] = "2" if strategy == "mirrored-2cpu" else ""
    import tensorflow as tf
    from kubegan_trainer.backends.tf.entry import build_trainer
    from kubegan_trainer.backends.tf.models import build_task
    from kubegan_trainer.worker.cluster_env import ClusterEnv
    from kubegan_trainer.worker.signals import StopFlag

    gpu = bool(tf.config.list_physical_devices("GPU"))
    cfg = _config(model, precision, gpu)
    tmp = Path(tempfile.mkdtemp())
    env = ClusterEnv.from_environ(
        {
            ENV_CHECKPOINT_DIR: str(tmp / "c"),
            ENV_OUTPUT_DIR: str(tmp),
            ENV_METRICS_PORT: "0",
        }
    )
    t = build_trainer(cfg, env, StopFlag())
    ds = t.source.epoch_dataset(0, 0, t.global_batch, max(1, t.steps_per_epoch))
    dist = list(iter(t.strategy.experimental_distribute_dataset(ds.take(4))))
    flags = tf.constant([0.0, 0.0])
    kube = _time(lambda b: t._train_step(b, flags), dist, 3, steps)
    samples = steps * t.global_batch

    # The plain loop: same networks (fresh, no strategy), same per-replica batch, one
    # device, RMSprop, the task's own losses and phases.
    task = build_task(cfg, t.source)
    gen = tf.random.Generator.from_seed(1)
    task.rng.gen = gen
    opt_g, opt_d = tf.keras.optimizers.RMSprop(1e-3), tf.keras.optimizers.RMSprop(1e-3)
    b = cfg.training.batch_size_per_replica

    @tf.function
    def plain(batch):
        inputs = task.generator_inputs(batch, gen)
        fake = tf.stop_gradient(task.generate(inputs, training=task.d_fakes_training))
        d_total = 0.0
        for part in task.d_parts:
            with tf.GradientTape() as tape:
                d = tf.reduce_mean(task.d_loss(batch, fake, inputs, part, gen))
            opt_d.apply_gradients(
                zip(
                    tape.gradient(d, task.discriminator.trainable_variables),
                    task.discriminator.trainable_variables,
                    strict=True,
                )
            )
            d_total += d
        for _ in range(task.g_steps):
            g_in = task.generator_inputs(batch, gen) if task.fresh_g_inputs else inputs
            with tf.GradientTape() as tape:
                g = tf.reduce_mean(task.g_loss(batch, task.generate(g_in, training=True), g_in))
            opt_g.apply_gradients(
                zip(
                    tape.gradient(g, task.generator.trainable_variables),
                    task.generator.trainable_variables,
                    strict=True,
                )
            )
        return g, d_total

    arrays = t.source.sample_arrays
    plain_batches = [
        {k: tf.constant(v[i * b : (i + 1) * b]) for k, v in arrays.items()} for i in range(2)
    ]
    plain_s = _time(plain, plain_batches, 3, steps)
    return {
        "model": model,
        "strategy": strategy,
        "precision": precision,
        "replicas": t.replicas,
        "global_batch": t.global_batch,
        "kubegan_samples_per_s": round(samples / kube, 1),
        "plain_samples_per_s": round(steps * b / plain_s, 1),
        "device": "GPU" if gpu else "CPU",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="dcgan,gan3d")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.one:
        model, strategy, precision = args.one.split(",")
        print(json.dumps(run_case(model, strategy, precision, args.steps)), flush=True)
        return 0
    gpu = subprocess.run(
        [
            sys.executable,
            "-c",
            "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip() not in ("", "0")
    precisions = ["none", "fp16", "bf16"] if gpu else ["none", "bf16"]
    strategies = ["mirrored-1"] if gpu else ["mirrored-1", "mirrored-2cpu"]
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"python {platform.python_version()}, GPU: {gpu}"
    )
    head = (
        f"{'model':6} {'strategy':14} {'precision':9} {'replicas':>8} {'global':>6} "
        f"{'kubegan/s':>10} {'plain/s':>9} {'ratio':>6}"
    )
    print(head)
    for model in args.models.split(","):
        for strategy in strategies:
            for precision in precisions:
                p = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--one",
                        f"{model},{strategy},{precision}",
                        "--steps",
                        str(args.steps),
                    ],
                    capture_output=True,
                    text=True,
                )
                lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
                if p.returncode or not lines:
                    print(
                        f"{model:6} {strategy:14} {precision:9} failed: "
                        f"{(p.stderr.strip().splitlines() or ['?'])[-1]}"
                    )
                    continue
                r = json.loads(lines[-1])
                ratio = r["kubegan_samples_per_s"] / max(r["plain_samples_per_s"], 1e-9)
                print(
                    f"{model:6} {strategy:14} {precision:9} {r['replicas']:>8} "
                    f"{r['global_batch']:>6} {r['kubegan_samples_per_s']:>10} "
                    f"{r['plain_samples_per_s']:>9} {ratio:>6.2f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
