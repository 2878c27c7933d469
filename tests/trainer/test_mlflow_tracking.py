"""spec.tracking.mlflow against a real MLflow server (sqlite backend, local artifact root,
artifacts through its proxy) started by the test: a 2-worker PyTorch run with its checkpoints
in a bucket (moto), stopped by SIGTERM and resumed from an empty local folder (a new pod),
leaves one MLflow run with each epoch's metrics once, the training spec as params,
every sample grid and the exported generator as artifacts, and the status the process ended
with; the credentials never reach a log. A tracking server that is down never ends training."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubegan_api.contract import ENV_CHECKPOINT_URI, EXIT_INTERRUPTED
from kubegan_api.sections import TrainerConfig
from kubegan_trainer.launch.ports import reserve_port
from kubegan_trainer.worker.mlflow_run import RUN_FILE

from tests.support.mlflow_server import MlflowServer, mlflow_server_fixture
from tests.support.s3_server import S3Server, s3_server_fixture
from tests.trainer.test_artifacts_bucket import _objects
from tests.trainer.util import config, run_workers

mlflow = pytest.fixture(scope="module")(mlflow_server_fixture)
s3 = pytest.fixture(scope="module")(s3_server_fixture)

DCGAN = {"imageSize": 8, "ngf": 4, "ndf": 4, "latentDim": 16}
TOKEN = "s3cr3t-token-never-logged"


def _tracked(uri: str, experiment: str, **training: Any) -> TrainerConfig:
    cfg = config("dcgan", options=DCGAN, batchSizePerReplica=4, **training)
    tracking = {"mlflow": {"uri": uri, "experiment": experiment}}
    return TrainerConfig.model_validate({**cfg.to_api(), "tracking": tracking})


@pytest.mark.timeout(900)
def test_a_stopped_and_resumed_run_is_one_mlflow_run_with_each_epoch_once(
    mlflow: MlflowServer, s3: S3Server, tmp_path: Path
) -> None:
    cfg = _tracked(mlflow.uri, "kubegan-resume", epochs=3, stepsPerEpoch=2)
    uri = f"s3://{s3.make_bucket()}/jobs/tracked"
    env = {**s3.env(), ENV_CHECKPOINT_URI: uri, "MLFLOW_TRACKING_TOKEN": TOKEN}
    part = run_workers(cfg, tmp_path / "pod-1", 2, extra_env=env, sigterm_at="0:3")
    assert part.codes == [EXIT_INTERRUPTED] * 2, "\n".join(part.logs)
    (stopped,) = mlflow.runs("kubegan-resume")
    assert stopped["info"]["status"] == "KILLED"
    run_id = stopped["info"]["run_id"]
    assert json.loads(_objects(s3, uri)[RUN_FILE])["runId"] == run_id  # beside the checkpoints
    assert [s for s, _ in mlflow.metric_history(run_id, "loss/generator")] == [1]

    out = tmp_path / "pod-2"  # a new pod: nothing of the first one's folder
    resumed = run_workers(cfg, out, 2, extra_env=env)
    assert resumed.codes == [0, 0], "\n".join(resumed.logs)
    (run,) = mlflow.runs("kubegan-resume")  # the same run, continued: no second one
    assert run["info"]["run_id"] == run_id and run["info"]["status"] == "FINISHED"
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    g_loss = mlflow.metric_history(run_id, "loss/generator")
    assert [s for s, _ in g_loss] == [1, 2, 3]  # epoch 2, trained twice, logged once
    assert all(abs(v - r["g_loss"]) < 1e-5 for (_, v), r in zip(g_loss, rows, strict=True))
    for key in ("loss/discriminator", "quality/feature_distance", "time/epoch_seconds"):
        assert [s for s, _ in mlflow.metric_history(run_id, key)] == [1, 2, 3], key
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    assert params["model.name"] == "dcgan" and params["training.epochs"] == "3"
    assert params["model.options.latentDim"] == "16"

    files = mlflow.artifact_files(run["info"]["experiment_id"], run_id)
    assert [f for f in files if f.startswith("samples/")] == [
        f"samples/epoch-{e:04d}.png" for e in (1, 2, 3)
    ]
    assert (out / "samples" / "epoch-0003.png").read_bytes() == (
        mlflow.root
        / "artifacts"
        / run["info"]["experiment_id"]
        / run_id
        / "artifacts"
        / "samples"
        / "epoch-0003.png"
    ).read_bytes()
    assert {"generator/generator.json", "generator/generator.safetensors"} <= set(files)
    logs = "\n".join(part.logs + resumed.logs)
    assert TOKEN not in logs and "MLflow: continuing run" in logs


@pytest.mark.timeout(600)
def test_a_tracking_server_that_is_down_never_ends_training(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{reserve_port()}"  # leased, nothing listens there
    cfg = _tracked(nobody, "nowhere", epochs=2, stepsPerEpoch=1)
    result = run_workers(cfg, tmp_path / "run", 1)
    assert result.codes == [0], "\n".join(result.logs)
    log = result.logs[0]
    # One warning for the outage, however many requests wait behind it; training went on.
    assert log.count("training goes on, retrying") == 1, log
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in rows] == [1, 2]


@pytest.mark.timeout(900)
def test_a_tensorflow_run_logs_the_same_way(mlflow: MlflowServer, tmp_path: Path) -> None:
    from tests.trainer.tf.tfutil import run_workers as tf_run
    from tests.trainer.tf.tfutil import tf_config

    cfg = tf_config("dcgan", epochs=2, stepsPerEpoch=2)
    tracking = {"mlflow": {"uri": mlflow.uri, "experiment": "kubegan-tf"}}
    cfg = TrainerConfig.model_validate({**cfg.to_api(), "tracking": tracking})
    result = tf_run(cfg, tmp_path / "run", 1)
    assert result.codes == [0], result.logs
    (run,) = mlflow.runs("kubegan-tf")
    assert run["info"]["status"] == "FINISHED"
    run_id = run["info"]["run_id"]
    assert [s for s, _ in mlflow.metric_history(run_id, "loss/generator")] == [1, 2]
    files = mlflow.artifact_files(run["info"]["experiment_id"], run_id)
    assert {"samples/epoch-0001.png", "samples/epoch-0002.png"} <= set(files)
    assert "generator/saved_model/saved_model.pb" in files
    assert {p["key"]: p["value"] for p in run["data"]["params"]}["framework"] == "tensorflow"
