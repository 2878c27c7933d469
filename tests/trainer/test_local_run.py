"""`kubegan run` machinery: 2 local workers, progress, summary, Ctrl-C/SIGTERM, resume."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubegan_trainer.storage.folder import CheckpointStore
from kubegan_trainer.worker.progress_file import read_progress

from tests.trainer.util import REPO
from tests.trainer.workers import start_kubegan_run

JOB = {
    "apiVersion": "kubegan.io/v1alpha1",
    "kind": "GANTrainingJob",
    "metadata": {"name": "local-test"},
    "spec": {
        "framework": "pytorch",
        "model": {
            "name": "acgan",
            "options": {"imageSize": 8, "ngf": 8, "ndf": 8, "latentDim": 16},
        },
        "data": {"source": "digits"},
        "training": {"epochs": 3, "batchSizePerReplica": 16, "stepsPerEpoch": 20},
        "resources": {"workers": 2, "gpusPerWorker": 0},
        "cost": {"acceleratorHourlyPrice": 1.0},
        "monitoring": {"metricsPort": 19650},
    },
}


def _start(job: Path, out: Path) -> subprocess.Popen[str]:
    return start_kubegan_run(job, out, {"PYTHONPATH": str(REPO)})


@pytest.mark.timeout(300)
def test_two_local_workers_stop_on_sigterm_and_resume(tmp_path: Path) -> None:
    job, out = tmp_path / "job.yaml", tmp_path / "out"
    job.write_text(yaml.safe_dump(JOB))
    first = _start(job, out)
    # Stop as soon as rank 0 says it is training (written unthrottled at its start): on a
    # quiet machine the whole run takes under a second, too short for throttled step updates.
    deadline = time.monotonic() + 120
    while read_progress(out).get("state") != "running":
        assert first.poll() is None, f"kubegan run exited {first.returncode} before training"
        assert time.monotonic() < deadline, "training did not start in 120 s"
        time.sleep(0.02)
    first.send_signal(signal.SIGTERM)  # what Ctrl-C does too: forwarded as SIGTERM
    text, _ = first.communicate(timeout=120)
    assert first.returncode == 130, text
    assert "run again with the same output directory" in text
    stopped_at = read_progress(out)
    assert stopped_at["state"] == "stopped"
    saved = CheckpointStore(out / "checkpoints", keep=1, writer=False).list()
    assert saved
    # The progress file says where the run stopped (the epoch it was in, steps done in it):
    # exactly the checkpoint it wrote.
    last = saved[-1].position
    per_epoch = JOB["spec"]["training"]["stepsPerEpoch"]
    assert (stopped_at["epoch"] - 1) * per_epoch + stopped_at["step"] == (
        last.epoch * per_epoch + last.step
    ), (stopped_at, last)

    second = _start(job, out)
    text, _ = second.communicate(timeout=240)
    assert second.returncode == 0, text
    assert "resumed from epoch" in text
    lines = text.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["epoch", "seconds"])
    assert lines[header].split() == [
        "epoch",
        "seconds",
        "samples/s",
        "g_loss",
        "d_loss",
        "cost",
        "$",
        "class_accuracy",  # GAN quality per epoch, in the summary too
        "feature_distance",
    ]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    for r in rows:  # cost = seconds / 3600 x (1 $/GPU-hour x 0 GPUs) on CPU workers
        assert r["cost_dollars"] == 0.0 and r["samples_per_second"] > 0 and r["world_size"] == 2
        assert set(r["quality"]) == {"class_accuracy", "feature_distance"}
        assert 0.0 <= r["quality"]["class_accuracy"] <= 1.0 and r["quality_seconds"] > 0
    assert sorted(p.name for p in (out / "samples").glob("*.png")) == [
        "epoch-0001.png",
        "epoch-0002.png",
        "epoch-0003.png",
    ]
    assert json.loads((out / "config.json").read_text())["jobName"] == "local-test"
    assert (out / "logs" / "worker-1.log").exists()

    third = _start(job, out)  # a finished run: resumes at the end and says so
    text, _ = third.communicate(timeout=120)
    assert third.returncode == 0 and "already finished: 3 of 3 epochs done" in text


def test_bad_job_file_is_one_line(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({**JOB, "spec": {**JOB["spec"], "training": {"epochs": 0}}}))
    p = subprocess.run(
        [sys.executable, "-m", "kubegan_operator.entry.cli", "run", str(job)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert p.returncode == 2
    assert p.stderr.strip() == "spec.training.epochs: input should be greater than or equal to 1"
