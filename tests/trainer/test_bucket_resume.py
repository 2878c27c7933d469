"""Resume from a bucket: both frameworks checkpoint to a real S3 server (moto) and a run
stopped by SIGTERM resumes from the bucket into a NEW output folder (nothing local carried
over), ending bitwise equal to an uninterrupted run (test_resume's check). TensorFlow's is in
test_artifacts_bucket.py, which checks the artifacts of the same stopped and resumed runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import obstore
import pytest
import yaml
from kubegan_api.contract import ENV_CHECKPOINT_URI, ENV_CPU_THREADS, EXIT_INTERRUPTED
from kubegan_trainer.storage import objstore

from tests.support.s3_server import S3Server, s3_server_fixture
from tests.trainer.test_resume import CASES, _assert_same_state
from tests.trainer.util import REPO, run_workers

s3 = pytest.fixture(scope="module")(s3_server_fixture)


def _bucket_env(s3: S3Server) -> tuple[dict[str, str], str]:
    uri = f"s3://{s3.make_bucket()}/jobs/resume"
    return {**s3.env(), ENV_CHECKPOINT_URI: uri}, uri


def _committed(s3: S3Server, uri: str) -> list[str]:
    parsed = objstore.parse_uri(uri, "test")
    saved = dict(os.environ)
    os.environ.update(s3.env())
    try:
        store = objstore.open_store(parsed)
        keys = [m["path"] for batch in obstore.list(store) for m in batch]
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return sorted(k.split("/")[0] for k in keys if k.endswith("/manifest.json"))


@pytest.mark.timeout(400)
def test_pytorch_stops_then_resumes_from_the_bucket_in_a_new_folder(
    s3: S3Server, tmp_path: Path
) -> None:
    cfg, stop_at = CASES[1]
    env, uri = _bucket_env(s3)
    straight = run_workers(cfg, tmp_path / "straight", 1)
    assert straight.codes == [0], "\n".join(straight.logs)

    part = run_workers(cfg, tmp_path / "pod-1", 1, extra_env=env, sigterm_at=stop_at)
    assert part.codes == [EXIT_INTERRUPTED], "\n".join(part.logs)
    assert "committed to s3://" in part.logs[0] and "after the stop request" in part.logs[0]
    assert _committed(s3, uri)[-1] == "ckpt-000001-00000002"  # global step 7 of 5-step epochs

    resumed = run_workers(cfg, tmp_path / "pod-2", 1, extra_env=env)  # a new, empty folder
    assert resumed.codes == [0], "\n".join(resumed.logs)
    assert f"resuming from {uri}/ckpt-000001-00000002" in resumed.logs[0]
    _assert_same_state(straight.checkpoint_state(), resumed.checkpoint_state())
    assert _committed(s3, uri)[-1] == "ckpt-000003-00000000"


@pytest.mark.timeout(300)
def test_kubegan_run_with_a_bucket_resumes_in_a_new_output_folder(
    s3: S3Server, tmp_path: Path
) -> None:
    """A job whose `spec.checkpoint.uri` names a bucket: a `kubegan run` into a new
    `--output` finds the finished job's checkpoint in the bucket, not in any folder."""
    env, uri = _bucket_env(s3)
    del env[ENV_CHECKPOINT_URI]  # from the job's spec this time
    job = {
        "apiVersion": "kubegan.io/v1alpha1",
        "kind": "GANTrainingJob",
        "metadata": {"name": "bucket-run"},
        "spec": {
            "framework": "pytorch",
            "model": {"name": "dcgan", "options": {"imageSize": 8, "ngf": 4, "ndf": 4}},
            "data": {"source": "digits"},
            "training": {"epochs": 2, "batchSizePerReplica": 8, "stepsPerEpoch": 2},
            "resources": {"workers": 1, "gpusPerWorker": 0},
            "checkpoint": {"uri": uri},
            "monitoring": {"metricsPort": 19651},
        },
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    kubegan = str(Path(sys.executable).with_name("kubegan"))
    run_env = {**os.environ, **env, "PYTHONPATH": str(REPO), ENV_CPU_THREADS: "1"}

    def run(out: str) -> subprocess.CompletedProcess[str]:
        cmd = [kubegan, "run", str(path), "--output", str(tmp_path / out)]
        return subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=240)

    first = run("out-1")
    assert first.returncode == 0, first.stdout + first.stderr
    assert _committed(s3, uri)[-1] == "ckpt-000002-00000000"
    second = run("out-2")
    assert second.returncode == 0, second.stdout + second.stderr
    assert (tmp_path / "out-2" / "checkpoints" / "ckpt-000002-00000000" / "state.pt").is_file()
    assert not list((tmp_path / "out-2" / "checkpoints").glob("ckpt-000001-*"))  # none trained
