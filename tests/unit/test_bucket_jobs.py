"""A job whose checkpoints live in a bucket, as the operator renders and reports it:
no volume claim, the bucket in the trainer's config, credentials only by Secret reference."""

from __future__ import annotations

import json

from kubegan_api.contract import BUCKET_CREDENTIAL_KEYS
from kubegan_api.spec import GANTrainingJob
from kubegan_operator.manifests.objects import render_config_map
from kubegan_operator.manifests.pods import render_pod
from kubegan_operator.placement.planner import static_plan

from tests.support.world import JobWorld, gan_job

BUCKET = "s3://team-gans/digits"


def bucket_job(secret: str = "bucket-keys") -> GANTrainingJob:
    return GANTrainingJob.model_validate(
        {
            "apiVersion": "kubegan.io/v1alpha1",
            "kind": "GANTrainingJob",
            "metadata": {"name": "b", "namespace": "ml"},
            "spec": {
                "framework": "pytorch",
                "model": {"name": "dcgan"},
                "resources": {"workers": 2, "gpusPerWorker": 0},
                "checkpoint": {
                    "uri": BUCKET,
                    "endpoint": "http://minio.storage:9000",
                    "credentialsSecret": secret,
                },
            },
        }
    )


def test_the_worker_gets_the_bucket_and_secret_references_but_no_claim() -> None:
    job = bucket_job()
    pod = render_pod(job, static_plan(job.spec), 0)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert all("persistentVolumeClaim" not in v for v in volumes.values())
    env = pod["spec"]["containers"][0]["env"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if "valueFrom" in e}
    assert set(refs) >= set(BUCKET_CREDENTIAL_KEYS)
    for key in BUCKET_CREDENTIAL_KEYS:
        assert refs[key] == {"name": "bucket-keys", "key": key, "optional": True}
    assert not any(e["name"] in BUCKET_CREDENTIAL_KEYS and "value" in e for e in env)
    config = json.loads(next(iter(render_config_map(job, None)["data"].values())))
    assert config["checkpoint"]["uri"] == BUCKET
    # The Secret's name at most, never a credential: the values stay in the Secret.
    assert config["checkpoint"].get("credentialsSecret", "bucket-keys") == "bucket-keys"


def test_without_a_secret_no_credential_variable_is_set() -> None:
    job = bucket_job(secret="")
    env = render_pod(job, static_plan(job.spec), 0)["spec"]["containers"][0]["env"]
    assert not {e["name"] for e in env} & set(BUCKET_CREDENTIAL_KEYS)


def test_a_bucket_job_says_its_checkpoints_persist() -> None:
    body = gan_job()
    body["spec"]["checkpoint"] = {"uri": BUCKET}
    w = JobWorld(body)
    w.step()
    cond = w.condition("CheckpointsPersistent")
    assert (cond["status"], cond["reason"]) == ("True", "BucketConfigured")
    assert BUCKET in cond["message"]


def test_a_dataset_in_a_bucket_reaches_the_trainer_with_its_secret_and_no_data_volume() -> None:
    """spec.data.uri: the prefix and endpoint travel in the trainer's config (as
    checkpoint.uri does), the data Secret's keys by reference, and no data claim is mounted."""
    body = bucket_job(secret="").model_dump(by_alias=True, exclude_none=True)
    data = "s3://team-gans/showers"
    body["spec"]["model"] = {"name": "gan3d"}
    body["spec"]["data"] = {
        "source": "files",
        "uri": data,
        "endpoint": "http://minio.storage:9000",
        "credentialsSecret": "data-keys",
    }
    job = GANTrainingJob.model_validate(body)
    pod = render_pod(job, static_plan(job.spec), 0)
    env = pod["spec"]["containers"][0]["env"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in env if "valueFrom" in e}
    assert {refs[key] for key in BUCKET_CREDENTIAL_KEYS} == {"data-keys"}
    assert all("persistentVolumeClaim" not in v for v in pod["spec"]["volumes"])
    config = json.loads(next(iter(render_config_map(job, None)["data"].values())))
    assert config["data"]["uri"] == data
    assert config["data"]["endpoint"] == "http://minio.storage:9000"
