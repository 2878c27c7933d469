"""`kubegan samples` / `metrics` / `export` for a job on a real control plane: the operator
reports where the job's artifacts are (status.artifacts, condition ArtifactsPersistent), and
the CLI finds them from the job's name with the user's kubeconfig, reading the bucket (a real
S3 server, moto) at the job's own `checkpoint.endpoint` with the user's credentials. A job on a
claim, one with neither and one that does not exist each get one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import obstore
import pytest
from kubegan_api.contract import ENV_AWS_ENDPOINT_URL
from kubegan_trainer.storage import objstore

from tests.support.kube import KUBECONFIG, ROOT, Kubectl, Operator, wait_for
from tests.support.s3_server import S3Server, s3_server_fixture

pytestmark = pytest.mark.timeout(300)

s3 = pytest.fixture(scope="module")(s3_server_fixture)
KUBEGAN = str(Path(sys.executable).with_name("kubegan"))


def _job(name: str, checkpoint: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubegan.io/v1alpha1",
        "kind": "GANTrainingJob",
        "metadata": {"name": name},
        "spec": {
            "framework": "pytorch",
            "model": {"name": "dcgan", "options": {"imageSize": 8}},
            "data": {"source": "digits"},
            "resources": {"workers": 1, "gpusPerWorker": 0},
            "checkpoint": checkpoint,
        },
    }


def _status(k: Kubectl, ns: str, name: str) -> dict[str, Any]:
    return (k.get("ganjob", name, namespace=ns) or {}).get("status") or {}


def _condition(status: dict[str, Any]) -> dict[str, Any]:
    found = [c for c in status.get("conditions", []) if c["type"] == "ArtifactsPersistent"]
    return found[0] if found else {}


def _kubegan(s3: S3Server, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it: their kubeconfig and cloud keys, no endpoint override."""
    env = {**os.environ, **s3.env(), "KUBECONFIG": str(KUBECONFIG), "PYTHONPATH": str(ROOT)}
    env.pop(ENV_AWS_ENDPOINT_URL)
    return subprocess.run(
        [KUBEGAN, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _fill(s3: S3Server, uri: str) -> bytes:
    """What a trainer leaves: two grids, a history of two epochs, an export."""
    saved = dict(os.environ)
    os.environ.update(s3.env())
    try:
        store = objstore.open_store(objstore.parse_uri(uri, "test"))
        grid = b"\x89PNG\r\n\x1a\n-epoch-2"
        obstore.put(store, "samples/epoch-0001.png", b"\x89PNG\r\n\x1a\n-epoch-1")
        obstore.put(store, "samples/epoch-0002.png", grid)
        rows = [
            {"epoch": e, "epoch_seconds": 2.0, "samples_per_second": 50.0, "g_loss": 0.7,
             "d_loss": 1.3, "cost_dollars": 0.01, "quality": {"feature_distance": 9.0 - e}}
            for e in (1, 2)
        ]  # fmt: skip
        obstore.put(store, "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
        obstore.put(store, "export/generator.json", b'{"format": "test"}')
        return grid
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_a_jobs_artifacts_are_found_from_its_name(
    operator: Operator, cluster: Kubectl, namespace: str, s3: S3Server, tmp_path: Path
) -> None:
    uri = f"s3://{s3.make_bucket()}/jobs/digits"
    grid = _fill(s3, uri)
    cluster.apply(_job("digits", {"uri": uri, "endpoint": s3.endpoint}), namespace=namespace)
    wait_for(
        "status.artifacts",
        lambda: _status(cluster, namespace, "digits").get("artifacts", {}).get("uri") == uri,
        timeout=60,
    )
    cond = _condition(_status(cluster, namespace, "digits"))
    assert (cond["status"], cond["reason"]) == ("True", "BucketConfigured")

    got = _kubegan(s3, "samples", "digits", "-n", namespace, "-o", str(tmp_path / "s"))
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "s" / "epoch-0002.png").read_bytes() == grid
    table = _kubegan(s3, "metrics", "digits", "-n", namespace)
    assert table.returncode == 0, table.stderr
    assert [ln.split()[0] for ln in table.stdout.splitlines()[2:]] == ["1", "2", "total"]
    assert "feature_distance" in table.stdout.splitlines()[0]
    export = _kubegan(s3, "export", "digits", "-n", namespace, "-o", str(tmp_path / "e"))
    assert export.returncode == 0, export.stderr
    assert json.loads((tmp_path / "e" / "generator.json").read_text()) == {"format": "test"}


def test_jobs_whose_artifacts_cannot_be_read_say_why_in_one_line(
    operator: Operator, cluster: Kubectl, namespace: str, s3: S3Server
) -> None:
    cluster.apply(_job("on-claim", {"claimName": "ckpt"}), namespace=namespace)
    cluster.apply(_job("nowhere", {}), namespace=namespace)
    wait_for(
        "both conditions",
        lambda: all(_condition(_status(cluster, namespace, n)) for n in ("on-claim", "nowhere")),
        timeout=60,
    )
    ephemeral = _condition(_status(cluster, namespace, "nowhere"))
    assert (ephemeral["status"], ephemeral["reason"]) == ("False", "EphemeralStorage")
    claim = _status(cluster, namespace, "on-claim")
    assert claim["artifacts"]["uri"] == "pvc://ckpt/on-claim"
    for name, words in (
        ("on-claim", "PVC ckpt"),
        ("nowhere", "neither checkpoint.uri nor claimName"),
        ("missing", "no GANTrainingJob"),
    ):
        result = _kubegan(s3, "samples", name, "-n", namespace)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and words in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
