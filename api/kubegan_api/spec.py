"""The GANTrainingJob resource (kubegan.io/v1alpha1): its spec, metadata and decoding.

These models are the single source of the API: `kubegan validate` uses them directly and
`kubegan crd` generates the CRD schema (with the same rules as CEL) from them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from kubegan_api.base import (
    DNS_1035_PATTERN,
    IMAGE_PATTERN,
    LABEL_VALUE_PATTERN,
    MAX_ANNOTATIONS_BYTES,
    ApiModel,
    label_key_problem,
)
from kubegan_api.contract import KUEUE_PRIORITY_CLASS_LABEL, KUEUE_QUEUE_LABEL, WORKER_SUFFIX
from kubegan_api.image_frame import check_frame
from kubegan_api.podtemplate import PodTemplateSpec
from kubegan_api.resources import (
    MAX_WORKERS,
    CostSpec,
    PlacementSpec,
    ResourcesSpec,
    RunPolicySpec,
    SchedulingSpec,
)
from kubegan_api.rules import CROSS_FIELD_RULES
from kubegan_api.sections import (
    CheckpointSpec,
    DataSpec,
    Framework,
    ModelSpec,
    MonitoringSpec,
    Strategy,
    TrainerConfig,
    TrainingSpec,
)
from kubegan_api.text import control_problem
from kubegan_api.tracking import QualitySpec, TrackingSpec

GROUP = "kubegan.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "GANTrainingJob"
PLURAL = "gantrainingjobs"
SINGULAR = "gantrainingjob"
SHORT_NAMES = ["ganjob", "ganjobs"]

# Labels whose values Kueue reads as object names (a LocalQueue, a WorkloadPriorityClass): a
# DNS-1123 subdomain, or Kueue's webhook refuses every worker pod.
KUEUE_NAME_LABELS = (KUEUE_QUEUE_LABEL, KUEUE_PRIORITY_CLASS_LABEL)
_DNS_1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

# The longest name for which `<name>-worker-<MAX_WORKERS-1>` is still a 63-character DNS label
# (the pod's hostname).
MAX_NAME_LENGTH = 63 - len(WORKER_SUFFIX) - len(str(MAX_WORKERS - 1))


class GANTrainingJobSpec(ApiModel):
    framework: Framework = Field(description="tensorflow | pytorch.")
    strategy: Strategy = Field(
        default=Strategy.auto, description="auto | mirrored | multi-worker | tpu (tensorflow)."
    )
    image: str = Field(
        default="", max_length=512, pattern=IMAGE_PATTERN, description="Trainer image override."
    )
    model: ModelSpec
    data: DataSpec = Field(default_factory=DataSpec, json_schema_extra={"default": {}})
    training: TrainingSpec = Field(default_factory=TrainingSpec, json_schema_extra={"default": {}})
    resources: ResourcesSpec = Field(
        default_factory=ResourcesSpec, json_schema_extra={"default": {}}
    )
    placement: PlacementSpec = Field(
        default_factory=PlacementSpec, json_schema_extra={"default": {}}
    )
    checkpoint: CheckpointSpec = Field(
        default_factory=CheckpointSpec, json_schema_extra={"default": {}}
    )
    run_policy: RunPolicySpec = Field(
        default_factory=RunPolicySpec, json_schema_extra={"default": {}}
    )
    scheduling: SchedulingSpec = Field(
        default_factory=SchedulingSpec, json_schema_extra={"default": {}}
    )
    cost: CostSpec = Field(default_factory=CostSpec, json_schema_extra={"default": {}})
    monitoring: MonitoringSpec = Field(
        default_factory=MonitoringSpec, json_schema_extra={"default": {}}
    )
    tracking: TrackingSpec = Field(default_factory=TrackingSpec, json_schema_extra={"default": {}})
    quality: QualitySpec | None = Field(
        default=None,
        description="Standard FID and KID (InceptionV3 features) for image models, besides "
        "the model's own scores (docs/trainer.md); pytorch only.",
    )
    pod_template: PodTemplateSpec | None = Field(
        default=None,
        description="Added to every worker: labels, annotations, service account, pull "
        "secrets, priority class, volumes, and the trainer's env, mounts and a tighter "
        "securityContext (docs/api.md).",
    )

    @model_validator(mode="after")
    def _cross_field_rules(self) -> GANTrainingJobSpec:
        broken = [rule for rule in CROSS_FIELD_RULES if not rule.holds(self)]
        if broken:
            # One error per broken rule; `loc` is filled in by the caller from field_path.
            raise PydanticCustomError(
                "cross_field",
                "{rules}",
                {"rules": [(r.field_path, r.message) for r in broken]},
            )
        return self

    @model_validator(mode="after")
    def _image_frame(self) -> GANTrainingJobSpec:
        check_frame(self.model, self.data)  # as TrainerConfig checks it
        return self


class ObjectMeta(ApiModel):
    """The part of metadata kubegan reads; everything else is passed through untouched."""

    model_config = ApiModel.model_config | {"extra": "allow"}

    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=DNS_1035_PATTERN)
    namespace: str = Field(
        default="default", max_length=63, pattern=DNS_1035_PATTERN.replace("^[a-z]", "^[a-z0-9]")
    )
    # Checked as the apiserver checks every object's metadata, so `validate` refuses them too.
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str] | None) -> dict[str, str] | None:
        for key, value in (labels or {}).items():
            why = label_key_problem(key)
            if why:
                raise ValueError(f"key {key[:80]!r} is not a valid label key: {why}")
            if not (len(value) <= 63 and re.fullmatch(LABEL_VALUE_PATTERN, value)):
                raise ValueError(
                    f"{key}: value {value[:80]!r} is not a valid label value (at most 63 "
                    "letters, digits, '-', '_' and '.', starting and ending with a letter or "
                    "digit)"
                )
            # Empty is not a name but a choice: an empty queue label keeps the job out of its
            # namespace's default queue (docs/install.md).
            if key in KUEUE_NAME_LABELS and value and not re.fullmatch(_DNS_1123_SUBDOMAIN, value):
                raise ValueError(
                    f"{key}: value {value!r} is not a Kueue object name (lowercase letters, "
                    "digits, '-' and '.', starting and ending with a letter or digit)"
                )
        return labels

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, annotations: dict[str, str] | None) -> dict[str, str] | None:
        total = 0
        for key, value in (annotations or {}).items():
            why = label_key_problem(key)
            if why:
                raise ValueError(f"key {key[:80]!r} is not a valid annotation key: {why}")
            problem = control_problem(value, multiline=True)
            if problem:
                raise ValueError(f"{key}: the value {problem}")
            total += len(key.encode()) + len(value.encode())
        if total > MAX_ANNOTATIONS_BYTES:
            raise ValueError(f"{total} bytes in all; the apiserver takes at most 256 KiB")
        return annotations


class GANTrainingJob(ApiModel):
    api_version: str
    kind: str
    metadata: ObjectMeta
    spec: GANTrainingJobSpec
    status: dict[str, Any] | None = None

    def trainer_config(self) -> TrainerConfig:
        s = self.spec
        return TrainerConfig(
            job_name=self.metadata.name,
            framework=s.framework,
            strategy=s.strategy,
            model=s.model,
            data=s.data,
            training=s.training,
            checkpoint=s.checkpoint,
            monitoring=s.monitoring,
            tracking=s.tracking,
            quality=s.quality,
        )


def decode_job(obj: Mapping[str, Any], max_bytes: int | None = None) -> GANTrainingJob:
    """A GANTrainingJob decoded as the apiserver decodes one: from JSON, with JSON's types and
    no coercion (`workers: true` and `epochs: "5"` are refused, as the CRD's integer type
    refuses them), camelCase field names only. `max_bytes` bounds the JSON form, which is what
    kubectl sends and etcd stores. ValidationError for bad fields, ValueError if too large."""
    text = json.dumps(obj, allow_nan=True, separators=(",", ":"), default=_not_json)
    if max_bytes is not None and len(text.encode()) > max_bytes:
        raise ValueError(
            f"the job is {len(text.encode())} bytes as JSON; at most {max_bytes} are accepted"
        )
    return GANTrainingJob.model_validate_json(text, strict=True, by_alias=True, by_name=False)


def _not_json(value: object) -> Any:
    # Only reachable from Python callers: files are read as JSON data already.
    raise ValueError(f"a {type(value).__name__} is not JSON data")
