"""The training sections of a GANTrainingJob (framework, model, data, training, checkpoint,
monitoring), and TrainerConfig: the part of a job the trainer reads."""

from __future__ import annotations

import json
import math
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from kubegan_api.base import (
    ENTRYPOINT_PATTERN,
    FIELD_PROBLEMS,
    INT64_MAX,
    INT64_MIN,
    ApiModel,
    ObjectName,
)
from kubegan_api.cel import Rule, cel_rules, check
from kubegan_api.contract import CHECKPOINT_ROOT, DATA_ROOT, METRICS_PORT
from kubegan_api.image_frame import CROP_RULES, ImageShape, check_frame
from kubegan_api.model_options import option_problems, problem_lines
from kubegan_api.text import LINE_PATTERN
from kubegan_api.tracking import QualitySpec, TrackingSpec
from kubegan_api.training_options import (
    MAX_WARMUP_STEPS,
    AugmentSpec,
    EmaSpec,
    LrSchedule,
    R1Spec,
)
from kubegan_api.urls import BucketUriText, S3Endpoint, credentials_rules

# model.options is free-form JSON; bounded so that walking it never recurses too deeply.
MAX_OPTIONS_DEPTH = 64


class Framework(StrEnum):
    tensorflow = "tensorflow"
    pytorch = "pytorch"


class Strategy(StrEnum):
    auto = "auto"
    mirrored = "mirrored"
    multi_worker = "multi-worker"
    tpu = "tpu"


class ModelName(StrEnum):
    gan3d = "gan3d"
    dcgan = "dcgan"
    acgan = "acgan"
    pix2pix = "pix2pix"
    custom = "custom"


class DataSource(StrEnum):
    synthetic = "synthetic"
    digits = "digits"
    files = "files"


class OptimizerName(StrEnum):
    adam = "adam"
    rmsprop = "rmsprop"
    adamw = "adamw"


class MixedPrecision(StrEnum):
    none = "none"
    fp16 = "fp16"
    bf16 = "bf16"


# Models each framework's trainer implements; the operator rejects other pairs up front
# instead of letting a pod crash on them.
MODELS_BY_FRAMEWORK: dict[Framework, frozenset[ModelName]] = {
    Framework.pytorch: frozenset(ModelName),
    Framework.tensorflow: frozenset(
        {ModelName.gan3d, ModelName.dcgan, ModelName.acgan, ModelName.custom}
    ),
}

# Which data sources make sense for which model (custom models take any).
SOURCES_BY_MODEL: dict[ModelName, frozenset[DataSource]] = {
    ModelName.gan3d: frozenset({DataSource.synthetic, DataSource.files}),
    ModelName.pix2pix: frozenset({DataSource.synthetic, DataSource.files}),
    ModelName.dcgan: frozenset(DataSource),
    ModelName.acgan: frozenset(DataSource),
    ModelName.custom: frozenset(DataSource),
}


class ModelSpec(ApiModel):
    name: ModelName = Field(description="Which GAN to train.")
    entrypoint: str = Field(
        default="",
        pattern=ENTRYPOINT_PATTERN,
        description='custom only: "package.module:factory" returning the model pair.',
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Model-specific options (docs/api.md): each built-in model's are typed and "
        "bounded; a custom model's are its own.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True, "default": {}},
    )

    @field_validator("options")
    @classmethod
    def _json_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        problem = json_data_problem(options, MAX_OPTIONS_DEPTH)
        if problem:
            raise ValueError(problem)
        return options

    @model_validator(mode="after")
    def _model_options(self) -> ModelSpec:
        # Checked here, where `validate`, the operator and the trainer's config all pass, so
        # no worker is ever started with options its model cannot build.
        problems = option_problems(self.name.value, self.options)
        if problems:
            raise PydanticCustomError(
                FIELD_PROBLEMS,
                "{message}",
                {
                    "rules": [(f".options.{name}", reason) for name, reason in problems],
                    "message": "; ".join(problem_lines(problems)),
                },
            )
        return self


def json_data_problem(value: Any, max_depth: int) -> str | None:
    """Why `value` is not data the apiserver could hold (string keys; null, booleans, int64
    integers, finite numbers, strings, lists, mappings; at most `max_depth` deep), or None.
    Iterative, so that a deep value cannot exhaust the stack."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        # The path inside options, its end kept when long (deep nesting makes it long).
        at = f" at {where if len(where) <= 80 else '...' + where[-77:]}" if where else ""
        if depth > max_depth:
            return f"nested deeper than {max_depth} levels{at}"
        if isinstance(item, dict | list):
            problem = _push_members(stack, item, where, depth, at)
        else:
            problem = _scalar_problem(item, at)
        if problem is not None:
            return problem
    return None


def _push_members(
    stack: list[tuple[Any, str, int]], item: dict | list, where: str, depth: int, at: str
) -> str | None:
    """Put a mapping's values or a list's items on `stack`, with their paths; a problem
    when a key is not a string."""
    if isinstance(item, list):
        stack.extend((sub, f"{where}[{i}]", depth + 1) for i, sub in enumerate(item))
        return None
    for key, sub in item.items():
        if not isinstance(key, str):
            return f"key {key!r}{at} is not a string"
        stack.append((sub, f"{where}.{key}" if where else key, depth + 1))
    return None


def _scalar_problem(item: Any, at: str) -> str | None:
    """Why a value that is neither a mapping nor a list is not apiserver data, or None."""
    if isinstance(item, bool) or item is None or isinstance(item, str):
        return None
    if isinstance(item, int):
        return None if INT64_MIN <= item <= INT64_MAX else f"integer{at} is beyond int64"
    if isinstance(item, float):
        return None if math.isfinite(item) else f"{item}{at} is not a finite number"
    return f"a {type(item).__name__}{at} is not JSON data"


# `kubegan data pack`'s default shard size: large enough that a bucket read is worth its
# request, small enough that a rank's read-ahead of a few shards stays in memory. Here, not in
# the packer, so the CLI's parser (the operator image has no numpy) names it without importing it.
WEBDATASET_SHARD_BYTES = 128 * 1024 * 1024


class DataSpec(ApiModel):
    model_config = ApiModel.model_config | cel_rules(
        *credentials_rules("uri", "endpoint"), *CROP_RULES
    )

    source: DataSource = Field(
        default=DataSource.synthetic, description="synthetic | digits | files."
    )
    path: str = Field(
        default="",
        max_length=4096,
        pattern=LINE_PATTERN,
        description="files: HDF5 file, image folder or paired-image folder. A folder of "
        ".h5 or .tfrecord shards (gan3d) or WebDataset .tar shards (image models) is streamed "
        "per rank. files needs exactly one of path or uri.",
    )
    claim_name: ObjectName = Field(
        default="",
        description=f"Optional PersistentVolumeClaim mounted read-only at {DATA_ROOT}.",
    )
    uri: BucketUriText = Field(
        default="",
        description=(
            "files from a bucket instead of a path: a prefix of .h5 or .tfrecord shard "
            "objects, or of WebDataset .tar shards or image objects for the image models "
            "(s3://bucket/prefix, "
            "gs://bucket/prefix or az://container/prefix), each rank streaming its own "
            "shards. Credentials come from the pod's identity or "
            "environment, never from the spec."
        ),
    )
    endpoint: S3Endpoint = ""
    credentials_secret: ObjectName = Field(
        default="",
        description="A Secret with the bucket's credentials under the fixed keys of "
        "checkpoint.credentialsSecret; only with uri, and the same Secret if both are set.",
    )
    resize: ImageShape | None = Field(
        default=None,
        description="files, image models: resize every image to height x width (aspect not "
        "kept); replaces the model's square imageSize (docs/trainer.md).",
    )
    crop: ImageShape | None = Field(
        default=None,
        description="files, image models: then cut a centred height x width (within resize "
        "when both are set); replaces the model's square imageSize.",
    )

    @model_validator(mode="after")
    def _crop_rules(self) -> DataSpec:
        check(self, CROP_RULES)
        return self


# Each network's optimizer: the options that only make sense together. The apiserver also
# checks these on the schema's default ({}), where no field is set yet: hence has().
OPTIMIZER_RULES = (
    Rule(
        ".weightDecay",
        f"weightDecay is only for optimizer {OptimizerName.adamw} (decoupled weight decay)",
        "!has(self.weightDecay) || self.weightDecay == 0.0 || "
        f"(has(self.optimizer) && self.optimizer == '{OptimizerName.adamw}')",
        lambda o: o.weight_decay == 0 or o.optimizer == OptimizerName.adamw,
    ),
    Rule(
        ".warmupSteps",
        f"warmupSteps is only for schedule {LrSchedule.linear_warmup} or {LrSchedule.cosine}",
        "!has(self.warmupSteps) || self.warmupSteps == 0 || "
        f"(has(self.schedule) && self.schedule != '{LrSchedule.constant}')",
        lambda o: o.warmup_steps == 0 or o.schedule != LrSchedule.constant,
    ),
    Rule(
        ".warmupSteps",
        f"schedule {LrSchedule.linear_warmup} needs warmupSteps of at least 1",
        f"!has(self.schedule) || self.schedule != '{LrSchedule.linear_warmup}' || "
        "(has(self.warmupSteps) && self.warmupSteps >= 1)",
        lambda o: o.warmup_steps >= 1 or o.schedule != LrSchedule.linear_warmup,
    ),
)


class OptimizerSpec(ApiModel):
    model_config = ApiModel.model_config | cel_rules(*OPTIMIZER_RULES)

    optimizer: OptimizerName = Field(default=OptimizerName.rmsprop)
    learning_rate: float = Field(default=0.001, gt=0, le=10)
    beta1: float = Field(default=0.5, ge=0, lt=1, description="adam and adamw only.")
    beta2: float = Field(default=0.999, ge=0, lt=1, description="adam and adamw only.")
    weight_decay: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="adamw only: decoupled weight decay, learningRate x weightDecay of each "
        "weight per update (Loshchilov & Hutter).",
    )
    schedule: LrSchedule = Field(
        default=LrSchedule.constant,
        description="The learning rate over this network's updates: constant; linear-warmup "
        "(up to learningRate over warmupSteps updates, then constant); cosine (the warm-up, "
        "then down to 0 along a half cosine by the run's last update).",
    )
    warmup_steps: int = Field(
        default=0,
        ge=0,
        le=MAX_WARMUP_STEPS,
        description="Updates of this network to warm the learning rate up over.",
    )

    @model_validator(mode="after")
    def _rules(self) -> OptimizerSpec:
        check(self, OPTIMIZER_RULES)
        return self


class TrainingSpec(ApiModel):
    epochs: int = Field(default=60, ge=1, le=1_000_000)
    batch_size_per_replica: int = Field(default=64, ge=1, le=65_536)
    steps_per_epoch: Annotated[int, Field(ge=1, le=INT64_MAX)] | None = Field(
        default=None, description="Optional cap on steps per epoch."
    )
    generator: OptimizerSpec = Field(
        default_factory=OptimizerSpec, json_schema_extra={"default": {}}
    )
    discriminator: OptimizerSpec = Field(
        default_factory=OptimizerSpec, json_schema_extra={"default": {}}
    )
    mixed_precision: MixedPrecision = Field(default=MixedPrecision.none)
    gradient_accumulation_steps: int = Field(default=1, ge=1, le=1024)
    gradient_clip_norm: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="Clip the global gradient norm of each network to this value."
    )
    zero: bool = Field(default=False, description="pytorch only: shard optimizer state.")
    seed: int = Field(default=42, ge=0, le=2**31 - 1)
    ema: EmaSpec | None = Field(
        default=None,
        description="Keep an exponential moving average of the generator's weights "
        "(StyleGAN2); samples, quality scores and the export use it.",
    )
    r1: R1Spec | None = Field(
        default=None, description="Lazy R1 penalty on the discriminator's gradient at real data."
    )
    augment: AugmentSpec | None = Field(
        default=None,
        description="DiffAugment: differentiable augmentation of every image the discriminator "
        "sees, real and generated (image models).",
    )
    compile: bool = Field(
        default=False,
        description="pytorch: torch.compile the generator and the discriminator; tensorflow: "
        "XLA (jit_compile) for the training step.",
    )
    channels_last: bool | None = Field(
        default=None,
        description="pytorch: channels-last memory format for the networks and inputs (3-D "
        "for gan3d); unset, the model's channelsLast option decides (auto: on CUDA); with "
        "compile, torch.compile chooses the layout. tensorflow: no effect, Keras is "
        "channels-last already.",
    )


class CheckpointSpec(ApiModel):
    model_config = ApiModel.model_config | cel_rules(*credentials_rules("uri", "endpoint"))

    claim_name: ObjectName = Field(
        default="",
        description=f"PVC mounted at {CHECKPOINT_ROOT}; empty means no resume across pods.",
    )
    uri: BucketUriText = Field(
        default="",
        description=(
            "Checkpoints in a bucket instead of a claim: s3://bucket/prefix, "
            "gs://bucket/prefix or az://container/prefix. Credentials come from the pod's "
            "identity or environment, never from the spec."
        ),
    )
    endpoint: S3Endpoint = ""
    credentials_secret: ObjectName = Field(
        default="",
        description="A Secret in the job's namespace with the bucket's credentials under "
        "fixed keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AZURE_STORAGE_ACCOUNT_KEY, ...; "
        "docs/api.md), for stores without workload identity. Only with uri.",
    )
    interval_epochs: int = Field(default=1, ge=1, le=INT64_MAX)
    interval_minutes: Annotated[float, Field(gt=0, le=1_000_000)] | None = Field(
        default=None, description="Also checkpoint mid-epoch at step boundaries this often."
    )
    keep: int = Field(default=3, ge=1, le=1000)
    keep_best: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="Also keep the N checkpoints with the best primary quality score of the "
        "model (docs/trainer.md), besides the `keep` most recent; 0 keeps by recency only.",
    )


class MonitoringSpec(ApiModel):
    metrics_port: int = Field(default=METRICS_PORT, ge=1024, le=65535)


class TrainerConfig(ApiModel):
    """What the trainer reads from KUBEGAN_CONFIG: the job's training-related sections."""

    job_name: str
    framework: Framework
    strategy: Strategy = Strategy.auto
    model: ModelSpec
    data: DataSpec = Field(default_factory=DataSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    monitoring: MonitoringSpec = Field(default_factory=MonitoringSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    quality: QualitySpec | None = None

    @model_validator(mode="after")
    def _image_frame(self) -> TrainerConfig:
        check_frame(self.model, self.data)  # as the spec checks it (GANTrainingJobSpec)
        return self

    @classmethod
    def from_file(cls, path: str | Path) -> TrainerConfig:
        return cls.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
