"""Experiment tracking and the standard image scores of a GANTrainingJob: `spec.tracking`
(an MLflow tracking server) and `spec.quality` (FID and KID from InceptionV3 features).

Both are read by rank 0 only (docs/trainer.md). The MLflow server's credentials come from a
Secret, as a bucket's do: its fixed keys (`MLFLOW_CREDENTIAL_KEYS`) reach the trainer as the
variables of those names, never through the spec.
"""

from __future__ import annotations

from pydantic import Field

from kubegan_api.base import ApiModel, ObjectName
from kubegan_api.cel import cel_rules
from kubegan_api.text import LINE_PATTERN
from kubegan_api.urls import BucketOrPathText, HttpUrlText, credentials_rules

# The most images scored per evaluation: 50k is the published protocol's count.
MAX_QUALITY_SAMPLES = 50_000


class MlflowSpec(ApiModel):
    model_config = ApiModel.model_config | cel_rules(*credentials_rules("uri"))

    uri: HttpUrlText = Field(
        min_length=1,
        description="The tracking server, http(s)://host[:port][/path]; no credentials in it "
        "(credentialsSecret). Artifacts go through its mlflow-artifacts proxy "
        "(`mlflow server --serve-artifacts`, the default).",
    )
    experiment: str = Field(
        default="",
        max_length=500,
        pattern=LINE_PATTERN,
        description="The experiment's name, created when missing; empty: the job's name.",
    )
    credentials_secret: ObjectName = Field(
        default="",
        description="A Secret in the job's namespace with MLFLOW_TRACKING_TOKEN (a bearer "
        "token) or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (basic auth).",
    )


class TrackingSpec(ApiModel):
    mlflow: MlflowSpec | None = Field(
        default=None,
        description="Log the training spec as params, each epoch's metrics (step = epoch), "
        "the sample grids and the exported generator to one MLflow run per job; a restarted "
        "gang continues the same run.",
    )


class QualitySpec(ApiModel):
    model_config = ApiModel.model_config | cel_rules(*credentials_rules("featureWeights"))

    every_epochs: int = Field(
        default=1, ge=1, le=1_000_000, description="Score FID and KID every this many epochs."
    )
    samples: int = Field(
        default=1000,
        ge=2,
        le=MAX_QUALITY_SAMPLES,
        description="Generated images scored against as many real ones (their features "
        "are computed once per process).",
    )
    feature_weights: BucketOrPathText = Field(
        default="",
        description="InceptionV3 weights for clusters without internet: a .safetensors "
        "state dict of torch-fidelity's FeatureExtractorInceptionV3 (or its .pth), as a "
        "bucket URI (the checkpoint bucket's endpoint and credentials) or a path in the pod; "
        "empty: torch-fidelity's usual download.",
    )
