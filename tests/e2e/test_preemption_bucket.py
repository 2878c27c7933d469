"""Checkpoints in a bucket on real nodes: the spot-reclaim scenario of
test_preemption.py with `spec.checkpoint.uri` on a real S3 server (moto) instead of the shared
ReadWriteMany volume.

moto runs on this machine, bound to the site's bridge address (the host's address on the
real nodes' network, which their pods reach as they reach CoreDNS there); the job names it as
`spec.checkpoint.endpoint` and its keys as a Secret (`spec.checkpoint.credentialsSecret`). The
workers mount no claim at all: their checkpoint folder is an emptyDir, so the new gang after
the reclaim (one worker on a brand-new node) can only resume from the bucket; the run's
artifacts (samples, metrics, TensorBoard, logs, the export) end in the bucket too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import obstore
import pytest
from kubegan_api.reserved import CHECKPOINT_VOLUME
from kubegan_trainer.storage import objstore
from kubegan_trainer.storage.bucket import BucketCheckpoints
from kubegan_trainer.storage.store import Position, checkpoint_name
from obstore.store import S3Store

from tests.e2e.jobs import (
    BucketJob,
    Nodes,
    assert_bitwise_equal,
    condition_true,
    final_weights,
    spot_reclaim_mid_epoch,
)
from tests.support.real_nodes import (
    CHECKPOINT_CLAIM,
    EPOCHS,
    JOBS_NS,
    SITE,
    RealCluster,
    Watched,
    digits_job,
)
from tests.support.s3_server import TEST_KEY_ID, TEST_SECRET, S3Server

pytestmark = pytest.mark.timeout(1200)
SECRET = "e2e-s3-credentials"
REGION = "us-east-1"


@pytest.fixture(scope="module")
def s3(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto on the real nodes' bridge address, and the Secret with its keys in the jobs'
    namespace."""
    server = S3Server.start(tmp_path_factory.mktemp("moto-e2e"), host=SITE["HOST_BRIDGE_IP"])
    keys = {"AWS_ACCESS_KEY_ID": TEST_KEY_ID, "AWS_SECRET_ACCESS_KEY": TEST_SECRET}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": JOBS_NS},
        "stringData": {**keys, "AWS_REGION": REGION},
    }
    try:
        real_cluster.apply(secret)
        yield server
    finally:
        real_cluster.kubectl("delete", "secret", "-n", JOBS_NS, SECRET, "--ignore-not-found")
        server.stop()


def bucket_store(server: S3Server, uri: str) -> tuple[S3Store, objstore.BucketUri]:
    """The bucket prefix `uri` on `server`, opened with the test's keys."""
    where = objstore.parse_uri(uri, "checkpoint.uri")
    store = S3Store(
        where.bucket,
        prefix=where.prefix,
        endpoint=server.endpoint,
        access_key_id=TEST_KEY_ID,
        secret_access_key=TEST_SECRET,
        region=REGION,
        client_options={"allow_http": True},
    )
    return store, where


def bucket_checkpoints(server: S3Server, uri: str) -> BucketCheckpoints:
    """The checkpoints under `uri`, read by this test through the trainer's own code."""
    return BucketCheckpoints(*bucket_store(server, uri))


def test_spot_reclaim_with_checkpoints_in_a_bucket_resumes_exactly(
    real_cluster: RealCluster,
    operator_release: str,
    trained: dict[str, Watched],
    nodes: Nodes,
    s3: S3Server,
    tmp_path: Path,
) -> None:
    """A node under one worker is reclaimed inside epoch 3; the SIGTERM checkpoint is
    committed in the bucket within the grace period; the new gang (fresh emptyDirs, one on a
    new node) resumes from the bucket at that step and ends bit for bit where the
    uninterrupted digits-torch run (on the volume) ended. No worker ever mounts a claim."""
    reference = trained["digits-torch"].final["status"]
    assert reference["phase"] == "Succeeded", reference
    epochs = EPOCHS["digits-torch"]
    uri = f"s3://{s3.make_bucket()}/reclaim-s3"
    spec = digits_job("reclaim-s3", "pytorch", epochs)
    spec["spec"]["checkpoint"] = {
        "uri": uri,
        "endpoint": s3.endpoint,
        "credentialsSecret": SECRET,
        "intervalEpochs": 1,
        "keep": 2,
    }
    job = BucketJob(real_cluster, spec, bucket_checkpoints(s3, uri), tmp_path)
    emergency = spot_reclaim_mid_epoch(job, nodes)

    assert job.run.claims == set(), f"a worker mounted a claim: {job.run.claims}"
    for pod in job.pods():
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == CHECKPOINT_VOLUME]
        assert "emptyDir" in volume, volume
    st = job.status()
    assert condition_true(st, "CheckpointsPersistent"), st["conditions"]
    resumed = f"resuming from {uri}/{checkpoint_name(Position(*emergency))}"
    assert resumed in job.log(0), job.log(0)[:3000]
    # keep 2, pruned in the bucket as in a folder; the last is the end of the last epoch.
    committed = job.checkpoints()
    assert committed[-1] == (epochs, 0) and len(committed) <= 2, committed

    ran = real_cluster.claim_dir(CHECKPOINT_CLAIM, JOBS_NS) / "digits-torch"
    assert_bitwise_equal(job.final_state(epochs), final_weights(ran, epochs))
    assert_artifacts_in_the_bucket(s3, uri, epochs, job.status())


def bucket_objects(server: S3Server, uri: str) -> dict[str, bytes]:
    """Every object under `uri` (keys relative to it) with its bytes."""
    store, _ = bucket_store(server, uri)
    keys = [m["path"] for batch in obstore.list(store) for m in batch]
    return {k: bytes(obstore.get(store, k).bytes()) for k in keys}


def assert_artifacts_in_the_bucket(
    server: S3Server, uri: str, epochs: int, status: dict[str, Any]
) -> None:
    """What the researcher keeps outlived both gangs (the reclaimed one's emptyDirs are gone):
    each epoch's sample grid and metrics row once, TensorBoard events, rank 0's log of each
    process start, the exported generator; the status says where the newest grid is."""
    objects = bucket_objects(server, uri)
    want = list(range(1, epochs + 1))
    grids = sorted(k for k in objects if k.startswith("samples/"))
    assert grids == [f"samples/epoch-{e:04d}.png" for e in want], sorted(objects)
    assert all(objects[g].startswith(b"\x89PNG") for g in grids)
    rows = [json.loads(line) for line in objects["metrics.jsonl"].decode().splitlines()]
    assert [r["epoch"] for r in rows] == want, rows
    assert any(k.startswith("tensorboard/") for k in objects), sorted(objects)
    logs = [k for k in objects if k.startswith("logs/")]
    assert len(logs) >= 2, logs  # the gang before the reclaim and the one after it
    assert any(k.startswith("export/") for k in objects), sorted(objects)
    artifacts = status.get("artifacts", {})
    assert artifacts.get("uri") == uri, artifacts
    assert artifacts.get("latestSamples") == f"{uri}/samples/epoch-{epochs:04d}.png", artifacts
    assert condition_true(status, "ArtifactsPersistent"), status["conditions"]
