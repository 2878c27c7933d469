"""The GANTrainingJob resource (kubegan.io/v1alpha1): spec, status and cross-field rules.

These models are the single source of the API: `kubegan validate` uses them directly and
`kubegan crd` generates the CRD schema (with the same rules as CEL) from them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from kubegan_trainer.config import (
    INT64_MAX,
    INT64_MIN,
    MODELS_BY_FRAMEWORK,
    SOURCES_BY_MODEL,
    ApiModel,
    CheckpointSpec,
    DataSource,
    DataSpec,
    Framework,
    ModelName,
    ModelSpec,
    MonitoringSpec,
    Strategy,
    TrainerConfig,
    TrainingSpec,
)
from kubegan_trainer.contract import PEER_PORTS, WORKER_SUFFIX
from pydantic import Field, PlainValidator, WithJsonSchema, field_validator, model_validator
from pydantic_core import PydanticCustomError

from kubegan_operator.api.podtemplate import PodTemplateSpec
from kubegan_operator.foundation import cel
from kubegan_operator.foundation.topology import parse_quantity

GROUP = "kubegan.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "GANTrainingJob"
PLURAL = "gantrainingjobs"
SINGULAR = "gantrainingjob"
SHORT_NAMES = ["ganjob", "ganjobs"]

MAX_WORKERS = 1000
MAX_TPU_CHIPS = 4 * MAX_WORKERS  # multi-host slices have 4 chips per host
# The longest name for which `<name>-worker-<MAX_WORKERS-1>` is still a 63-character DNS label
# (the pod's hostname).
MAX_NAME_LENGTH = 63 - len(WORKER_SUFFIX) - len(str(MAX_WORKERS - 1))
DNS_1035_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

# Kubernetes resource quantities ("500m", "4", "16Gi", "1e3"): positive, with a bounded
# exponent so that every accepted value is a finite number the planner can compare.
QUANTITY_PATTERN = (
    r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE][+]?[0-9]{1,2}))?$"
)
QUANTITY_HINT = "a positive Kubernetes quantity such as 500m, 4 or 16Gi"


def _quantity(value: object) -> str:
    # Floats are refused as the apiserver's int-or-string schema refuses them.
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"must be {QUANTITY_HINT} (an integer or a string)")
    text = str(value)
    if not re.fullmatch(QUANTITY_PATTERN, text):
        raise ValueError(f"{text[:80]!r} is not {QUANTITY_HINT}")
    # The planner compares it with what nodes have: whatever passes here must parse there.
    parse_quantity(text)
    return text


Quantity = Annotated[
    str,
    PlainValidator(_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]

# Label keys (an optional DNS subdomain prefix and a name) and values, as Kubernetes has them.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
_DNS_1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_LABEL_NAME = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
MAX_ANNOTATIONS_BYTES = 256 * 1024  # the apiserver's limit on all annotations together

# A container image reference (distribution/reference's grammar):
# [host[:port]/]path[:tag][@digest].
_HOST_PART = r"[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?"
_IMAGE_HOST = rf"{_HOST_PART}(\.{_HOST_PART})*(:[0-9]+)?"
_IMAGE_PATH = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_IMAGE_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_IMAGE_DIGEST = r"[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_PATTERN = (
    rf"^$|^({_IMAGE_HOST}/)?{_IMAGE_PATH}(/{_IMAGE_PATH})*(:{_IMAGE_TAG})?(@{_IMAGE_DIGEST})?$"
)
# A TPU slice shape: 2 or 3 dimensions, each 1, 2 or a multiple of 4 (GKE's v4/v5e/v5p/v6e
# shapes), so that a slice is a whole number of hosts of 4 chips or a single host.
_TPU_DIM = r"([124]|8|[2468][048]|[13579][26])"
TPU_TOPOLOGY_PATTERN = rf"^{_TPU_DIM}(x{_TPU_DIM}){{1,2}}$"
# USD per accelerator-hour; bounded so that a plan's cost is always a finite JSON number.
MAX_HOURLY_PRICE = 1_000_000.0


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a Kubernetes label/annotation key ([prefix/]name), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and re.fullmatch(_DNS_1123_SUBDOMAIN, prefix)):
        return "its prefix must be a DNS subdomain of at most 253 characters"
    if not (len(name) <= 63 and re.fullmatch(_LABEL_NAME, name)):
        return (
            "its name must be at most 63 characters of letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit"
        )
    return None


class SpotPolicy(StrEnum):
    allowed = "allowed"
    required = "required"
    never = "never"


class CleanPodPolicy(StrEnum):
    running = "Running"
    all = "All"
    none = "None"


class Phase(StrEnum):
    pending = "Pending"
    running = "Running"
    restarting = "Restarting"
    succeeded = "Succeeded"
    failed = "Failed"
    suspended = "Suspended"


class TpuSpec(ApiModel):
    accelerator: str = Field(
        min_length=1,
        max_length=63,
        pattern=LABEL_VALUE_PATTERN,
        description="GKE TPU type, label cloud.google.com/gke-tpu-accelerator "
        "(e.g. tpu-v5-lite-podslice).",
    )
    topology: str = Field(
        pattern=TPU_TOPOLOGY_PATTERN,
        description="Slice topology, label cloud.google.com/gke-tpu-topology (e.g. 4x4): "
        "2 or 3 dimensions, each 1, 2 or a multiple of 4.",
    )


class ResourcesSpec(ApiModel):
    gpus: Annotated[int, Field(ge=1, le=4096)] | None = Field(
        default=None, description="Total GPUs; the operator picks workers x gpusPerWorker."
    )
    workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | None = Field(
        default=None, description="Explicit number of workers (one per node)."
    )
    gpus_per_worker: Annotated[int, Field(ge=0, le=64)] | None = Field(
        default=None, description="GPUs per worker with explicit workers; 0 = CPU-only."
    )
    accelerator: str = Field(
        default="",
        max_length=63,
        pattern=LABEL_VALUE_PATTERN,
        description="GPU type matched against node labels, e.g. nvidia-tesla-v100.",
    )
    tpu: TpuSpec | None = Field(default=None, description="A GKE TPU slice (tensorflow only).")
    cpu: Quantity | None = Field(default=None, description="CPU request per worker.")
    memory: Quantity | None = Field(default=None, description="Memory request per worker.")


TOLERATION_RULES: tuple[tuple[str, str], ...] = (
    ("self.operator != 'Exists' || self.value == ''", "value must be empty with operator Exists"),
    ("self.key != '' || self.operator == 'Exists'", "an empty key needs operator Exists"),
    (
        "!has(self.tolerationSeconds) || self.effect == 'NoExecute'",
        "tolerationSeconds needs effect NoExecute",
    ),
)


class Toleration(ApiModel):
    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [{"rule": r, "message": m} for r, m in TOLERATION_RULES]
        }
    }

    key: str = Field(default="", max_length=253, pattern=r"^$|" + LABEL_KEY_PATTERN)
    operator: str = Field(default="Equal", pattern=r"^(Equal|Exists)$")
    value: str = Field(default="", max_length=63, pattern=LABEL_VALUE_PATTERN)
    effect: str = Field(default="", pattern=r"^(|NoSchedule|PreferNoSchedule|NoExecute)$")
    toleration_seconds: Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)] | None = Field(
        default=None
    )

    @model_validator(mode="after")
    def _semantics(self) -> Toleration:
        problems = [
            m
            for ok, m in (
                (self.operator != "Exists" or self.value == "", TOLERATION_RULES[0][1]),
                (self.key != "" or self.operator == "Exists", TOLERATION_RULES[1][1]),
                (
                    self.toleration_seconds is None or self.effect == "NoExecute",
                    TOLERATION_RULES[2][1],
                ),
            )
            if not ok
        ]
        if problems:
            raise ValueError("; ".join(problems))
        return self


class PlacementSpec(ApiModel):
    spot: SpotPolicy = Field(default=SpotPolicy.allowed)
    node_selector: dict[
        Annotated[str, Field(max_length=253, pattern=LABEL_KEY_PATTERN)],
        Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)],
    ] = Field(default_factory=dict, max_length=64, json_schema_extra={"default": {}})
    tolerations: list[Toleration] = Field(default_factory=list, json_schema_extra={"default": []})


class RunPolicySpec(ApiModel):
    backoff_limit: int = Field(default=3, ge=0, le=1000)
    max_preemptions: Annotated[int, Field(ge=0, le=INT64_MAX)] | None = Field(
        default=None, description="Infrastructure restarts tolerated; null = unlimited."
    )
    active_deadline_seconds: Annotated[int, Field(ge=1, le=INT64_MAX)] | None = None
    ttl_seconds_after_finished: Annotated[int, Field(ge=0, le=INT64_MAX)] | None = None
    clean_pod_policy: CleanPodPolicy = Field(default=CleanPodPolicy.running)
    suspend: bool = False
    image_pull_timeout_seconds: int = Field(
        default=600,
        ge=10,
        le=86400,
        description="A worker whose image cannot be pulled for this long fails the job.",
    )


class SchedulingSpec(ApiModel):
    capacity_timeout_seconds: int = Field(
        default=600,
        ge=10,
        le=86400,
        description="How long a gang waits for an autoscaler to add its nodes before it is "
        "released (its workers deleted, checkpoints kept) and tried again with backoff.",
    )


class CostSpec(ApiModel):
    accelerator_hourly_price: Annotated[float, Field(ge=0, le=MAX_HOURLY_PRICE)] | None = Field(
        default=None,
        description="USD per accelerator-hour; overrides the price table's accelerator prices "
        "(requested vCPUs and memory are still priced from the table).",
    )


@dataclass(frozen=True)
class CrossFieldRule:
    """One rule between fields, enforced by pydantic here and by CEL in the apiserver."""

    field_path: str  # relative to spec, as CEL's fieldPath (".resources")
    message: str
    cel: str  # evaluated with self = spec
    holds: Callable[[GANTrainingJobSpec], bool]


def _exactly_one_shape(s: GANTrainingJobSpec) -> bool:
    r = s.resources
    return sum(x is not None for x in (r.gpus, r.workers, r.tpu)) == 1


def _listed(values: Iterable[object], last: str) -> str:
    """`a`, `a and b`, `a, b and c` (or "or")."""
    words = [str(v) for v in values]
    return f"{', '.join(words[:-1])} {last} {words[-1]}" if len(words) > 1 else "".join(words)


# The strategies that run on a TPU slice.
TPU_STRATEGIES = (Strategy.tpu, Strategy.auto)
# Why a source does not suit a model, where the table's sets need saying.
_SOURCE_WHY = {DataSource.digits: "digits are 8x8 images; "}


def framework_rules(
    table: Mapping[Framework, frozenset[ModelName]] = MODELS_BY_FRAMEWORK,
) -> tuple[CrossFieldRule, ...]:
    """spec.model.name: one rule per set of frameworks that run some models but not all of
    them, written from the table (`MODELS_BY_FRAMEWORK`)."""
    groups: dict[tuple[Framework, ...], list[ModelName]] = {}
    for model in ModelName:
        frameworks = tuple(f for f in Framework if model in table[f])
        if len(frameworks) < len(Framework):
            groups.setdefault(frameworks, []).append(model)
    return tuple(
        CrossFieldRule(
            ".model.name",
            f"{_listed(models, 'and')} {'is' if len(models) == 1 else 'are'} only available "
            f"with framework {_listed(frameworks, 'or')}",
            f"{cel.none_of('self.model.name', models)} || "
            f"{cel.one_of('self.framework', frameworks)}",
            lambda s, models=models, frameworks=frameworks: (
                s.model.name not in models or s.framework in frameworks
            ),
        )
        for frameworks, models in groups.items()
    )


def source_rules(
    table: Mapping[ModelName, frozenset[DataSource]] = SOURCES_BY_MODEL,
) -> tuple[CrossFieldRule, ...]:
    """spec.data.source: one rule per source and the sources of the models that cannot train
    on it, written from the table (`SOURCES_BY_MODEL`)."""
    groups: dict[tuple[DataSource, tuple[DataSource, ...]], list[ModelName]] = {}
    for source in DataSource:
        for model in ModelName:
            if source not in table[model]:
                sources = tuple(s for s in DataSource if s in table[model])
                groups.setdefault((source, sources), []).append(model)
    return tuple(
        CrossFieldRule(
            ".data.source",
            f"{_SOURCE_WHY.get(source, '')}{_listed(models, 'and')} "
            f"need{'s' if len(models) == 1 else ''} source {_listed(sources, 'or')}",
            f"{cel.none_of('self.data.source', [source])} || "
            f"{cel.none_of('self.model.name', models)}",
            lambda s, source=source, models=models: (
                s.data.source != source or s.model.name not in models
            ),
        )
        for (source, sources), models in groups.items()
    )


# spec.data.uri (issue 26): a dataset read from a bucket instead of a volume, with the
# checkpoint bucket's endpoint and Secret semantics. A pod has one set of the clouds'
# credential variables, so data and checkpoints name the same Secret when both name one.
DATA_BUCKET_RULES: tuple[CrossFieldRule, ...] = (
    CrossFieldRule(
        ".data.uri",
        "path and uri cannot both be set: data is read from a volume or from a bucket",
        "self.data.path == '' || self.data.uri == ''",
        lambda s: s.data.path == "" or s.data.uri == "",
    ),
    CrossFieldRule(
        ".data.uri",
        f"uri is only for data source {DataSource.files}",
        f"self.data.uri == '' || self.data.source == '{DataSource.files}'",
        lambda s: s.data.uri == "" or s.data.source == DataSource.files,
    ),
    CrossFieldRule(
        ".data.claimName",
        "claimName mounts the volume of a path; a uri is read from the bucket",
        "self.data.claimName == '' || self.data.uri == ''",
        lambda s: s.data.claim_name == "" or s.data.uri == "",
    ),
    CrossFieldRule(
        ".data.endpoint",
        "endpoint is only for s3:// URIs",
        "self.data.endpoint == '' || self.data.uri.startsWith('s3://')",
        lambda s: s.data.endpoint == "" or s.data.uri.startswith("s3://"),
    ),
    CrossFieldRule(
        ".data.credentialsSecret",
        "credentialsSecret is only for a bucket (data.uri)",
        "self.data.credentialsSecret == '' || self.data.uri != ''",
        lambda s: s.data.credentials_secret == "" or s.data.uri != "",
    ),
    CrossFieldRule(
        ".data.credentialsSecret",
        "data and checkpoint credentialsSecret must name the same Secret: a pod has one set "
        "of bucket credentials",
        "self.data.credentialsSecret == '' || self.checkpoint.credentialsSecret == '' || "
        "self.data.credentialsSecret == self.checkpoint.credentialsSecret",
        lambda s: (
            s.data.credentials_secret == ""
            or s.checkpoint.credentials_secret == ""
            or s.data.credentials_secret == s.checkpoint.credentials_secret
        ),
    ),
)


# Spec fields a job cannot change once it has started (status.startTime set): a running gang
# was planned, configured and checkpointed from them, so a changed model, dataset or
# checkpoint location would silently resume another job's state or none. The apiserver
# refuses such an edit (CEL transition rules, api/crd.py); suspend, deadlines, placement,
# resources and cost stay changeable.
FROZEN_ONCE_STARTED: tuple[str, ...] = (
    "framework",
    "strategy",
    "model",
    "data",
    "training",
    "checkpoint",
)

CROSS_FIELD_RULES: tuple[CrossFieldRule, ...] = (
    CrossFieldRule(
        ".resources",
        "exactly one of gpus, workers or tpu must be set",
        "[has(self.resources.gpus), has(self.resources.workers), has(self.resources.tpu)]"
        ".filter(x, x).size() == 1",
        _exactly_one_shape,
    ),
    CrossFieldRule(
        ".resources.gpusPerWorker",
        "gpusPerWorker is only valid together with workers",
        "!has(self.resources.gpusPerWorker) || has(self.resources.workers)",
        lambda s: s.resources.gpus_per_worker is None or s.resources.workers is not None,
    ),
    CrossFieldRule(
        ".resources.gpusPerWorker",
        "gpusPerWorker is required with workers (0 for CPU-only workers)",
        "!has(self.resources.workers) || has(self.resources.gpusPerWorker)",
        lambda s: s.resources.workers is None or s.resources.gpus_per_worker is not None,
    ),
    CrossFieldRule(
        ".resources.accelerator",
        "accelerator selects GPUs and cannot be combined with tpu or gpusPerWorker 0",
        "self.resources.accelerator == '' || (!has(self.resources.tpu) && "
        "!(has(self.resources.gpusPerWorker) && self.resources.gpusPerWorker == 0))",
        lambda s: (
            s.resources.accelerator == ""
            or (s.resources.tpu is None and s.resources.gpus_per_worker != 0)
        ),
    ),
    CrossFieldRule(
        ".resources.tpu",
        f"tpu requires framework {Framework.tensorflow}",
        f"!has(self.resources.tpu) || self.framework == '{Framework.tensorflow}'",
        lambda s: s.resources.tpu is None or s.framework == Framework.tensorflow,
    ),
    CrossFieldRule(
        ".strategy",
        f"strategy {Strategy.tpu} requires resources.tpu",
        f"self.strategy != '{Strategy.tpu}' || has(self.resources.tpu)",
        lambda s: s.strategy != Strategy.tpu or s.resources.tpu is not None,
    ),
    CrossFieldRule(
        ".strategy",
        f"resources.tpu requires strategy {_listed(TPU_STRATEGIES, 'or')}",
        f"!has(self.resources.tpu) || {cel.one_of('self.strategy', TPU_STRATEGIES)}",
        lambda s: s.resources.tpu is None or s.strategy in TPU_STRATEGIES,
    ),
    CrossFieldRule(
        ".strategy",
        f"strategy {Strategy.tpu} requires framework {Framework.tensorflow}",
        f"self.strategy != '{Strategy.tpu}' || self.framework == '{Framework.tensorflow}'",
        lambda s: s.strategy != Strategy.tpu or s.framework == Framework.tensorflow,
    ),
    CrossFieldRule(
        ".strategy",
        f"strategy {Strategy.mirrored} runs one worker; use {Strategy.multi_worker} or "
        f"{Strategy.auto} for several",
        f"self.strategy != '{Strategy.mirrored}' || !has(self.resources.workers) || "
        "self.resources.workers == 1",
        lambda s: (
            s.strategy != Strategy.mirrored
            or s.resources.workers is None
            or s.resources.workers == 1
        ),
    ),
    CrossFieldRule(
        ".checkpoint.uri",
        "claimName and uri cannot both be set: checkpoints go to a volume or to a bucket",
        "self.checkpoint.claimName == '' || self.checkpoint.uri == ''",
        lambda s: s.checkpoint.claim_name == "" or s.checkpoint.uri == "",
    ),
    CrossFieldRule(
        ".checkpoint.credentialsSecret",
        "credentialsSecret is only for a bucket (checkpoint.uri)",
        "self.checkpoint.credentialsSecret == '' || self.checkpoint.uri != ''",
        lambda s: s.checkpoint.credentials_secret == "" or s.checkpoint.uri != "",
    ),
    CrossFieldRule(
        ".checkpoint.endpoint",
        "endpoint is only for s3:// URIs",
        "self.checkpoint.endpoint == '' || self.checkpoint.uri.startsWith('s3://')",
        lambda s: s.checkpoint.endpoint == "" or s.checkpoint.uri.startswith("s3://"),
    ),
    CrossFieldRule(
        ".training.zero",
        f"zero requires framework {Framework.pytorch}",
        f"!self.training.zero || self.framework == '{Framework.pytorch}'",
        lambda s: not s.training.zero or s.framework == Framework.pytorch,
    ),
    *framework_rules(),
    CrossFieldRule(
        ".model.entrypoint",
        f"entrypoint is required for model {ModelName.custom}",
        f"self.model.name != '{ModelName.custom}' || self.model.entrypoint != ''",
        lambda s: s.model.name != ModelName.custom or s.model.entrypoint != "",
    ),
    CrossFieldRule(
        ".model.entrypoint",
        f"entrypoint is only used by model {ModelName.custom}",
        f"self.model.name == '{ModelName.custom}' || self.model.entrypoint == ''",
        lambda s: s.model.name == ModelName.custom or s.model.entrypoint == "",
    ),
    CrossFieldRule(
        ".monitoring.metricsPort",
        f"metricsPort must differ from the workers' peer ports {_listed(PEER_PORTS, 'and')}",
        cel.none_of("self.monitoring.metricsPort", PEER_PORTS),
        lambda s: s.monitoring.metrics_port not in PEER_PORTS,
    ),
    CrossFieldRule(
        ".resources.tpu.topology",
        f"a slice of at most {MAX_TPU_CHIPS} chips",
        "!has(self.resources.tpu) || (self.resources.tpu.topology.split('x').size() == 2 ? "
        "int(self.resources.tpu.topology.split('x')[0]) * "
        "int(self.resources.tpu.topology.split('x')[1]) : "
        "int(self.resources.tpu.topology.split('x')[0]) * "
        "int(self.resources.tpu.topology.split('x')[1]) * "
        f"int(self.resources.tpu.topology.split('x')[2])) <= {MAX_TPU_CHIPS}",
        lambda s: (
            s.resources.tpu is None
            or math.prod(int(x) for x in s.resources.tpu.topology.split("x")) <= MAX_TPU_CHIPS
        ),
    ),
    CrossFieldRule(
        ".data.path",
        f"path or uri is required for data source {DataSource.files}",
        f"self.data.source != '{DataSource.files}' || self.data.path != '' || self.data.uri != ''",
        lambda s: s.data.source != DataSource.files or s.data.path != "" or s.data.uri != "",
    ),
    *DATA_BUCKET_RULES,
    *source_rules(),
)


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
        return labels

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, annotations: dict[str, str] | None) -> dict[str, str] | None:
        total = 0
        for key, value in (annotations or {}).items():
            why = label_key_problem(key)
            if why:
                raise ValueError(f"key {key[:80]!r} is not a valid annotation key: {why}")
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


# ---- status -------------------------------------------------------------------------------


class Condition(ApiModel):
    type: str
    status: str = Field(pattern=r"^(True|False|Unknown)$")
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""


class PlacementStatus(ApiModel):
    workers: int = 0
    gpus_per_worker: int = 0
    # What one worker holds, for `kubectl get`: "8xGPU", "4xTPU" (chips) or "CPU", so a TPU
    # job does not read as 0 GPUs.
    per_worker: str = ""
    nodes: list[str] = Field(default_factory=list)
    spot: bool = False


class ProgressStatus(ApiModel):
    epoch: int = 0
    epochs: int = 0
    last_epoch_seconds: float | None = None
    summary: str = Field(default="", description='Epoch of total, e.g. "3/20" (kubectl get).')

    def sync_summary(self) -> None:
        self.summary = f"{self.epoch}/{self.epochs}"


class CheckpointStatus(ApiModel):
    epoch: int = 0
    step: int = 0
    time: str = ""
    # The work after this checkpoint that a stop could not commit to the bucket in time
    # (steps, and the trainer's one line why); absent when nothing was lost.
    lost_steps: int | None = None
    lost_reason: str | None = None


class CostStatus(ApiModel):
    dollars: float = 0.0
    rate_per_hour: float = 0.0


class GANTrainingJobStatus(ApiModel):
    # Status is written by the operator only; tolerate fields a newer operator may add.
    model_config = ApiModel.model_config | {"extra": "ignore"}

    phase: Phase = Phase.pending
    conditions: list[Condition] = Field(default_factory=list)
    placement: PlacementStatus | None = None
    progress: ProgressStatus | None = None
    last_checkpoint: CheckpointStatus | None = None
    restarts: int = 0
    preemptions: int = 0
    cost: CostStatus | None = None
    start_time: str | None = None
    completion_time: str | None = None
    attempt: int = Field(default=0, description="Gang generation: bumped on every restart.")
    observed_generation: int | None = None
    # Operator bookkeeping, kept in status so a restarted operator carries on exactly.
    plan: dict[str, Any] | None = None
    attempt_created_at: str | None = None
    released_attempt: int | None = None  # the attempt whose scheduling gates were lifted
    released_at: str | None = None
    cost_accrued_at: str | None = None
    # Gangs released after waiting spec.scheduling.capacityTimeoutSeconds for an autoscaler
    # in a row, and when the next may be created (the backoff).
    capacity_releases: int | None = None
    capacity_retry_at: str | None = None
    image_pull_since: str | None = None  # when a worker's image pull was first seen failing
