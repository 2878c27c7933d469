"""spec.tracking.mlflow without a server: how the operator hands the credentials to the workers
(Secret references only), how the trainer turns them into a header and never into a message,
and the run-level decisions (status, where artifacts go, how long the end waits).
tests/trainer/test_mlflow_tracking.py runs it against a real MLflow server."""

from __future__ import annotations

import io
import json
import urllib.error

import pytest
from kubegan_api.contract import EXIT_INTERRUPTED, MLFLOW_CREDENTIAL_KEYS
from kubegan_api.reserved import RESERVED_ENV
from kubegan_api.spec import GANTrainingJob
from kubegan_operator.manifests.objects import render_config_map
from kubegan_operator.manifests.pods import render_pod
from kubegan_operator.placement.planner import static_plan
from kubegan_trainer.storage.mlflow_rest import _http_error, artifact_path, auth_header
from kubegan_trainer.worker.mlflow_run import finish_budget, run_status
from pydantic import ValidationError


def tracked_job(
    secret: str = "mlflow-auth", uri: str = "https://mlflow.example.com/x"
) -> GANTrainingJob:
    mlflow = {"uri": uri, "experiment": "digits", "credentialsSecret": secret}
    return GANTrainingJob.model_validate(
        {
            "apiVersion": "kubegan.io/v1alpha1",
            "kind": "GANTrainingJob",
            "metadata": {"name": "m", "namespace": "ml"},
            "spec": {
                "framework": "pytorch",
                "model": {"name": "dcgan"},
                "resources": {"workers": 2, "gpusPerWorker": 0},
                "tracking": {"mlflow": mlflow},
                "quality": {"everyEpochs": 2},
            },
        }
    )


def test_workers_get_the_secrets_keys_by_reference_and_the_config_names_the_server() -> None:
    job = tracked_job()
    env = render_pod(job, static_plan(job.spec), 0)["spec"]["containers"][0]["env"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if "valueFrom" in e}
    for key in MLFLOW_CREDENTIAL_KEYS:
        assert refs[key] == {"name": "mlflow-auth", "key": key, "optional": True}
        assert key in RESERVED_ENV  # a podTemplate cannot set them itself
    config = json.loads(next(iter(render_config_map(job, None)["data"].values())))
    assert config["tracking"]["mlflow"]["uri"] == "https://mlflow.example.com/x"
    assert config["quality"] == {"everyEpochs": 2, "samples": 1000, "featureWeights": ""}
    bare = tracked_job(secret="")
    env = render_pod(bare, static_plan(bare.spec), 0)["spec"]["containers"][0]["env"]
    assert not {e["name"] for e in env} & set(MLFLOW_CREDENTIAL_KEYS)


@pytest.mark.parametrize(
    "uri", ["https://user:pw@mlflow", "mlflow.example.com", "http://mlflow :5000", "http://m:0"]
)
def test_a_uri_the_rules_refuse_is_refused(uri: str) -> None:
    with pytest.raises(ValidationError) as err:
        tracked_job(uri=uri)
    assert "pw" not in str(err.value).replace(uri, "")  # the message itself repeats no secret


def test_credentials_become_a_header_token_first() -> None:
    assert auth_header({}) == {}
    assert auth_header({"MLFLOW_TRACKING_TOKEN": "t", "MLFLOW_TRACKING_USERNAME": "u"}) == {
        "Authorization": "Bearer t"
    }
    # base64("u:p")
    assert auth_header({"MLFLOW_TRACKING_USERNAME": "u", "MLFLOW_TRACKING_PASSWORD": "p"}) == {
        "Authorization": "Basic dTpw"
    }


def test_a_refusal_is_one_line_with_the_servers_words_and_no_header() -> None:
    body = json.dumps({"error_code": "PERMISSION_DENIED", "message": "no\nsecond line"}).encode()
    err = urllib.error.HTTPError("http://m/api", 403, "Forbidden", {}, io.BytesIO(body))  # type: ignore[arg-type]
    refused = _http_error("http://m", "/api/2.0/mlflow/runs/create", err)
    assert str(refused) == (
        "http://m refused /api/2.0/mlflow/runs/create: HTTP 403 PERMISSION_DENIED: no"
    )
    assert not refused.retry and refused.code == "PERMISSION_DENIED"
    busy = urllib.error.HTTPError("http://m/api", 503, "busy", {}, io.BytesIO(b"<html>"))  # type: ignore[arg-type]
    assert _http_error("http://m", "/x", busy).retry


def test_run_decisions() -> None:
    assert [run_status(c) for c in (0, EXIT_INTERRUPTED, 2, None)] == [
        "FINISHED",
        "KILLED",
        "FAILED",
        "FAILED",
    ]
    assert artifact_path("mlflow-artifacts:/1/abc/artifacts") == "1/abc/artifacts"
    assert artifact_path("mlflow-artifacts://host:5000/1/abc/artifacts") == "1/abc/artifacts"
    assert artifact_path("s3://bucket/1/abc/artifacts") is None
    assert finish_budget(300.0, reached=True) == 300.0
    assert finish_budget(300.0, reached=False) == 10.0
    assert finish_budget(2.0, reached=False) == 2.0
