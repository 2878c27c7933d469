"""Training on real nodes: a 2-worker PyTorch DDP digits job and a 2-worker
TensorFlow MultiWorkerMirrored job, applied with kubectl, each run one worker per real node in
the images built from the Dockerfile, rendezvous over pod DNS, train, write checkpoints and
sample PNGs to the shared volume and succeed, while the operator (a pod itself) follows their
progress from the trainers' metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kubegan_api.contract import ENV_MASTER_ADDR, ENV_TF_CONFIG

from tests.support.real_nodes import (
    CHECKPOINT_CLAIM,
    DIGITS_RATE_PER_HOUR,
    EPOCHS,
    JOBS_NS,
    REAL_NODES,
    RealCluster,
    Watched,
)

pytestmark = pytest.mark.timeout(1800)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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
    rendezvous = env.get(ENV_MASTER_ADDR, "") + env.get(ENV_TF_CONFIG, "")
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
    # CPU-only workers on spot nodes: their vCPUs and memory are priced, so the job costs.
    cost = seen.final["status"]["cost"]
    assert cost["ratePerHour"] == pytest.approx(DIGITS_RATE_PER_HOUR)
    assert cost["dollars"] > 0
    # NAME PHASE SCHEDULING WORKERS PER-WORKER EPOCH EPOCH-TIME PREEMPTIONS COST AGE: the gang
    # scheduled, epoch of total ("3/6") and epoch time filled in.
    running = [ln.split() for ln in seen.get_lines if " Running " in ln]
    assert running, seen.get_lines
    assert any(
        cols[2] == "Scheduled"
        and re.fullmatch(rf"\d+/{EPOCHS[name]}", cols[5])
        and cols[6] not in ("", "<none>")
        for cols in running
    ), running


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


def test_a_pod_template_reaches_every_worker_in_the_restricted_namespace(
    trained: dict[str, Watched],
) -> None:
    """The PyTorch job's podTemplate (tests/e2e/conftest.py TEAM_TEMPLATE): the label, the
    ConfigMap volume, its mount and the env variable on every worker, admitted under Pod
    Security `restricted`, and the job trained to the end with them."""
    seen = trained["digits-torch"]
    assert seen.final["status"]["phase"] == "Succeeded"
    assert len(seen.pods) == 2
    for pod in seen.pods:
        assert pod["metadata"]["labels"]["team"] == "gan-research"
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["team-config"]["configMap"]["name"] == "team-config"
        container = pod["spec"]["containers"][0]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["team-config"]["mountPath"] == "/etc/team"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["NCCL_DEBUG"] == "WARN"
