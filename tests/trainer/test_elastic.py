"""Elastic resume, both frameworks, real worker processes on the CPU: 2 workers -> SIGTERM
-> resume with 1 (gradient accumulation doubled, the launcher's ENV_ACCUMULATION_STEPS)
-> SIGTERM -> resume with 2. Every example is trained exactly once per epoch, the global
batch in metrics.jsonl never changes, and the final weights match an uninterrupted
2-worker run within float tolerance (docs/trainer.md, "Elastic resume": the reduction
order differs, so not bitwise). Also: the size refusals, in one line each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kubegan_api.contract import (
    ENV_ACCUMULATION_STEPS,
    ENV_CPU_THREADS,
    ENV_TF_LOGICAL_CPUS,
    EXIT_INTERRUPTED,
)
from kubegan_api.sections import TrainerConfig

from tests.trainer import hooked
from tests.trainer.util import REPO
from tests.trainer.workers import launch_workers

SAMPLES, PER_REPLICA, EPOCHS = 48, 4, 2
GLOBAL_BATCH = PER_REPLICA * 2  # 2 workers x 1 replica x accumulation 1
STEPS = SAMPLES // GLOBAL_BATCH  # 6 steps per epoch: every example, every epoch
# The largest difference of the final trainable weights allowed. Measured (CPU, 12 steps):
# 0 for PyTorch, 7.5e-9 for TensorFlow: far below the ~2e-3 (the learning rate) by which
# each Adam step moves a weight, so other noise or other micro-batches would show.
TOLERANCE = 1e-6


def elastic_config(framework: str) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "jobName": "elastic",
            "framework": framework,
            "model": {
                "name": "acgan",
                "options": {
                    "imageSize": 8,
                    "ngf": 4,
                    "ndf": 4,
                    "latentDim": 8,
                    "numSamples": SAMPLES,
                },
            },
            "data": {"source": "synthetic"},
            "training": {
                "epochs": EPOCHS,
                "batchSizePerReplica": PER_REPLICA,
                "seed": 11,
                "generator": {"optimizer": "adam", "learningRate": 2e-3},
                "discriminator": {"optimizer": "adam", "learningRate": 2e-3},
            },
            "monitoring": {"metricsPort": 19575},
        }
    )


def run(
    framework: str, out: Path, workers: int, accumulation: int, sigterm_at: str | None = None
) -> list[int]:
    """Workers of the hooked entry point (trace of every step's examples, final weights)."""
    env = {ENV_CPU_THREADS: "1", ENV_ACCUMULATION_STEPS: str(accumulation)}
    if framework == "tensorflow":
        env.update({ENV_TF_LOGICAL_CPUS: "", "TF_CPP_MIN_LOG_LEVEL": "2"})
    codes, logs = launch_workers(
        elastic_config(framework),
        out,
        workers=workers,
        env=env,
        python_path=REPO,
        timeout=300,
        command=hooked.command(
            sigterm_at=sigterm_at,
            trace=out / "trace",
            weights=out / "w",
            no_torch=framework == "tensorflow",  # as in the TensorFlow image
        ),
    )
    assert all(c in (0, EXIT_INTERRUPTED) for c in codes), "\n".join(logs)
    return codes


def trained_per_epoch(out: Path) -> dict[int, list[int]]:
    seen: dict[int, list[int]] = {}
    for path in sorted((out / "trace").glob("worker-*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            seen.setdefault(rec["epoch"], []).extend(rec["index"])
    return seen


def final_weights(out: Path) -> dict[str, np.ndarray]:
    with np.load(out / "w" / "worker-0.npz") as z:
        return {k: z[k] for k in z.files}


def metrics(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_two_one_two_workers_train_every_example_once_to_the_same_weights(
    framework: str, tmp_path: Path
) -> None:
    straight, elastic = tmp_path / "straight", tmp_path / "elastic"
    assert run(framework, straight, 2, 1) == [0, 0]

    assert run(framework, elastic, 2, 1, sigterm_at="0:3") == [EXIT_INTERRUPTED] * 2
    assert run(framework, elastic, 1, 2, sigterm_at="0:8") == [EXIT_INTERRUPTED]
    assert run(framework, elastic, 2, 1) == [0, 0]

    for out in (straight, elastic):
        seen = trained_per_epoch(out)
        assert sorted(seen) == list(range(EPOCHS))
        for epoch, index in seen.items():
            assert sorted(index) == list(range(SAMPLES)), f"{out.name} epoch {epoch}"
    rows = metrics(elastic)
    assert [r["epoch"] for r in rows] == [1, 2]
    for r in rows:
        assert r["global_batch"] == GLOBAL_BATCH
        assert r["samples"] == r["steps"] * GLOBAL_BATCH == SAMPLES
    # epoch 1 ended at 1 worker (accumulation 2), epoch 2 at 2 workers again
    assert [(r["world_size"], r["accumulation_steps"]) for r in rows] == [(1, 2), (2, 1)]

    a, b = final_weights(straight), final_weights(elastic)
    # TensorFlow's weights() include BatchNorm moving statistics: compare the trainable ones.
    suffix = "_trainable" if framework == "tensorflow" else ""
    for net in (f"generator{suffix}", f"discriminator{suffix}"):
        diff = float(np.max(np.abs(a[net] - b[net])))
        assert diff < TOLERANCE, f"{framework} {net}: max |difference| {diff:.3g}"


def test_a_checkpoint_of_another_global_batch_is_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert run("pytorch", out, 1, 2, sigterm_at="0:2") == [EXIT_INTERRUPTED]
    codes, logs = launch_workers(
        elastic_config("pytorch"),
        out,
        workers=1,
        env={ENV_CPU_THREADS: "1", ENV_ACCUMULATION_STEPS: "1"},
        python_path=REPO,
        timeout=300,
    )
    assert codes == [2]
    errors = [ln for ln in logs[0].splitlines() if ln.startswith("kubegan-trainer: error:")]
    assert errors == [
        f"kubegan-trainer: error: checkpoint {out / 'checkpoints' / 'ckpt-000000-00000002'} "
        "was trained with a global batch of 8, this run's is 4: resume with the gradient "
        "accumulation that keeps it"
    ]


@pytest.mark.timeout(300)
def test_kubegan_run_workers_runs_an_elastic_job_smaller_with_the_same_global_batch(
    tmp_path: Path,
) -> None:
    job, out = tmp_path / "job.yaml", tmp_path / "out"
    spec = {
        "framework": "pytorch",
        "model": {"name": "acgan", "options": {"imageSize": 8, "ngf": 4, "ndf": 4}},
        "data": {"source": "digits"},
        "training": {"epochs": 1, "batchSizePerReplica": 4, "stepsPerEpoch": 2},
        "resources": {"workers": 2, "gpusPerWorker": 0, "elastic": {"minWorkers": 1}},
        "monitoring": {"metricsPort": 19576},
    }
    doc = {"apiVersion": "kubegan.io/v1alpha1", "kind": "GANTrainingJob"}
    job.write_text(json.dumps({**doc, "metadata": {"name": "el"}, "spec": spec}))
    cli = [sys.executable, "-m", "kubegan_operator.entry.cli", "run", str(job)]
    env = {**os.environ, "PYTHONPATH": str(REPO), ENV_CPU_THREADS: "1"}
    done = subprocess.run(
        [*cli, "--output", str(out), "--workers", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 worker(s) x 1 process(es) (CPU, gradient accumulation 2)" in done.stdout
    [row] = metrics(out)
    assert (row["world_size"], row["accumulation_steps"], row["global_batch"]) == (1, 2, 8)
