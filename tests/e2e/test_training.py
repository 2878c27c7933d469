"""Acceptance 3 of the real-nodes issue: a 2-worker PyTorch DDP digits job and a 2-worker
TensorFlow MultiWorkerMirrored job, applied with kubectl, each run one worker per real node in
the images built from the Dockerfile, rendezvous over pod DNS, train, write checkpoints and
sample PNGs to the shared volume and succeed, while the operator (a pod itself) follows their
progress from the trainers' metrics."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import (
    CHECKPOINT_CLAIM,
    JOBS_NS,
    REAL_NODE_SELECTOR,
    REAL_NODES,
    RealCluster,
)

pytestmark = pytest.mark.timeout(1800)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EPOCHS = {"digits-torch": 10, "digits-tf": 6}


def job(name: str, framework: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubegan.io/v1alpha1",
        "kind": "GANTrainingJob",
        "metadata": {"name": name, "namespace": JOBS_NS},
        "spec": {
            "framework": framework,
            "strategy": "auto",
            "model": {"name": "acgan", "options": {"imageSize": 16}},
            "data": {"source": "digits"},
            "training": {
                "epochs": EPOCHS[name],
                "batchSizePerReplica": 64,
                "stepsPerEpoch": 8,
                "seed": 7,
            },
            # Each real node reports the whole machine (2 CPUs): half a CPU per worker lets
            # both jobs run side by side, one worker of each on each node.
            "resources": {"workers": 2, "gpusPerWorker": 0, "cpu": "500m", "memory": "3Gi"},
            "placement": {"nodeSelector": REAL_NODE_SELECTOR},
            "checkpoint": {"claimName": CHECKPOINT_CLAIM, "intervalEpochs": 1, "keep": 2},
        },
    }


@dataclass
class Watched:
    """What was seen of one job while it ran."""

    epochs_while_running: list[int] = field(default_factory=list)
    get_lines: list[str] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture(scope="module")
def trained(real_cluster: RealCluster, operator_release: str) -> dict[str, Watched]:
    """Apply both jobs, follow them until they finish, and return what was seen."""
    jobs = [job("digits-torch", "pytorch"), job("digits-tf", "tensorflow")]
    real_cluster.apply(*jobs)
    watched = {j["metadata"]["name"]: Watched() for j in jobs}
    deadline = time.monotonic() + 1500
    while time.monotonic() < deadline:
        table = real_cluster.kubectl("get", "ganjob", "-n", JOBS_NS)
        for name, seen in watched.items():
            if seen.final:
                continue
            obj = real_cluster.get("ganjob", name, JOBS_NS)
            status = obj.get("status", {})
            if status.get("phase") == "Running" and "epoch" in status.get("progress", {}):
                seen.epochs_while_running.append(status["progress"]["epoch"])
                seen.get_lines += [ln for ln in table.splitlines() if ln.startswith(name + " ")]
            if not seen.pods:
                pods = real_cluster.items("pods", f"-lkubegan.io/job-name={name}", ns=JOBS_NS)
                if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods):
                    seen.pods = pods
            if status.get("phase") in ("Succeeded", "Failed"):
                seen.final = obj
                seen.get_lines += [ln for ln in table.splitlines() if ln.startswith(name + " ")]
        if all(seen.final for seen in watched.values()):
            return watched
        time.sleep(2)
    raise AssertionError(
        "the jobs did not finish in 25 minutes:\n" + real_cluster.diagnose(JOBS_NS)
    )


@pytest.mark.parametrize("name", sorted(EPOCHS))
def test_job_succeeds_with_one_worker_per_real_node(
    real_cluster: RealCluster, trained: dict[str, Watched], name: str
) -> None:
    seen = trained[name]
    status = seen.final["status"]
    assert status["phase"] == "Succeeded", (
        json.dumps(status, indent=1) + "\n" + real_cluster.diagnose(JOBS_NS)
    )
    assert status["restarts"] == 0 and status.get("preemptions", 0) == 0
    assert sorted(p["spec"]["nodeName"] for p in seen.pods) == sorted(REAL_NODES)
    for pod in seen.pods:  # admitted into a `restricted` namespace, in the local image
        container = pod["spec"]["containers"][0]
        assert container["image"].startswith("kubegan.local/trainer-")
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("name", sorted(EPOCHS))
def test_workers_rendezvous_over_pod_dns(trained: dict[str, Watched], name: str) -> None:
    env = {
        e["name"]: e.get("value", "") for e in trained[name].pods[0]["spec"]["containers"][0]["env"]
    }
    worker0 = f"{name}-worker-0.{name}.{JOBS_NS}.svc"
    rendezvous = env.get("MASTER_ADDR", "") + env.get("TF_CONFIG", "")
    assert worker0 in rendezvous, env


@pytest.mark.parametrize("name", sorted(EPOCHS))
def test_progress_advanced_while_running_and_kubectl_shows_it(
    trained: dict[str, Watched], name: str
) -> None:
    seen = trained[name]
    epochs = seen.epochs_while_running
    assert len(set(epochs)) >= 2, f"status.progress.epoch seen while running: {epochs}"
    assert epochs == sorted(epochs), epochs
    progress = seen.final["status"]["progress"]
    assert progress["epoch"] == EPOCHS[name]
    assert progress["lastEpochSeconds"] > 0
    assert seen.final["status"]["cost"]["dollars"] >= 0
    # NAME PHASE WORKERS GPUS/WORKER EPOCH EPOCH-TIME COST AGE: epoch and epoch time filled in.
    running = [ln.split() for ln in seen.get_lines if " Running " in ln]
    assert running, seen.get_lines
    assert any(cols[4].isdigit() and cols[5] not in ("", "<none>") for cols in running), running


@pytest.mark.parametrize("name", sorted(EPOCHS))
def test_checkpoints_and_samples_are_on_the_shared_volume(
    real_cluster: RealCluster, trained: dict[str, Watched], name: str
) -> None:
    out: Path = real_cluster.claim_dir(CHECKPOINT_CLAIM, JOBS_NS) / name
    checkpoints = sorted(p.name for p in (out / "checkpoints").iterdir() if p.is_dir())
    assert checkpoints, f"no checkpoints in {out}"
    samples = sorted((out / "samples").glob("*.png"))
    assert samples, f"no sample PNGs in {out / 'samples'}"
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in samples)
    metrics = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines() if ln]
    assert max(m.get("epoch", 0) for m in metrics) == EPOCHS[name]
    saved = [int(n.split("-")[1]) for n in checkpoints if n.startswith("ckpt-")]
    assert max(saved) == EPOCHS[name], checkpoints
    # The operator's view lags by at most one read of worker 0's metrics.
    last = trained[name].final["status"]["lastCheckpoint"]
    assert 1 <= last["epoch"] <= EPOCHS[name], last
