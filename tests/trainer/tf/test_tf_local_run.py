"""`kubegan run` (the local runner) of a 2-worker tensorflow job works like
the PyTorch one: progress, SIGTERM stops both workers with a checkpoint, running again
resumes, metrics/samples/summary are written."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from kubegan_api.contract import ENV_TF_LOGICAL_CPUS
from kubegan_trainer.worker.progress_file import read_progress

from tests.trainer.tf.tfutil import REPO
from tests.trainer.workers import start_kubegan_run

JOB = {
    "apiVersion": "kubegan.io/v1alpha1",
    "kind": "GANTrainingJob",
    "metadata": {"name": "tf-local-test"},
    "spec": {
        "framework": "tensorflow",
        "model": {"name": "dcgan", "options": {"imageSize": 8, "ngf": 4, "ndf": 4, "latentDim": 8}},
        "data": {"source": "digits"},
        "training": {"epochs": 2, "batchSizePerReplica": 8, "stepsPerEpoch": 30},
        "resources": {"workers": 2, "gpusPerWorker": 0},
        "cost": {"acceleratorHourlyPrice": 1.0},
        "monitoring": {"metricsPort": 19660},
    },
}


def _start(job: Path, out: Path) -> subprocess.Popen[str]:
    env = {
        "PYTHONPATH": str(REPO / "trainer"),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        ENV_TF_LOGICAL_CPUS: "",
    }
    return start_kubegan_run(job, out, env)


@pytest.mark.timeout(420)
def test_kubegan_run_two_tensorflow_workers_stop_and_resume(tmp_path: Path) -> None:
    job, out = tmp_path / "job.yaml", tmp_path / "out"
    job.write_text(yaml.safe_dump(JOB))
    first = _start(job, out)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # wait until training is under way
        prog = read_progress(out)
        if prog.get("state") == "running" and prog.get("step", 0) >= 2:
            break
        time.sleep(0.05)
    first.send_signal(signal.SIGTERM)  # forwarded to both workers as SIGTERM
    text, _ = first.communicate(timeout=180)
    assert first.returncode == 130, text
    assert read_progress(out)["state"] == "stopped"
    assert list((out / "checkpoints").glob("ckpt-*/manifest.json"))
    worker0 = (out / "logs" / "worker-0.log").read_text()
    assert "MultiWorkerMirroredStrategy, 2 workers" in worker0

    second = _start(job, out)
    text, _ = second.communicate(timeout=240)
    assert second.returncode == 0, text
    assert "resumed from epoch" in text
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2]
    for r in rows:
        assert r["samples_per_second"] > 0 and r["world_size"] == 2 and r["steps"] == 30
    assert sorted(p.name for p in (out / "samples").glob("*.png")) == [
        "epoch-0001.png",
        "epoch-0002.png",
    ]
    assert any(line.split()[:2] == ["epoch", "seconds"] for line in text.splitlines())
    # Checkpoints were saved; TF's per-save INFO lines stay out of what the user reads.
    assert "Sharding callback" not in text, text
