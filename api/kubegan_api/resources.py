"""The sections of a GANTrainingJob the operator reads to place and run its workers:
resources, placement, run policy, scheduling and cost."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, model_validator

from kubegan_api.base import (
    INT64_MAX,
    INT64_MIN,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    TPU_TOPOLOGY_PATTERN,
    ApiModel,
)
from kubegan_api.quantity import Quantity

MAX_WORKERS = 1000
MAX_TPU_CHIPS = 4 * MAX_WORKERS  # multi-host slices have 4 chips per host
# USD per accelerator-hour; bounded so that a plan's cost is always a finite JSON number.
MAX_HOURLY_PRICE = 1_000_000.0
# USD; bounded so that a budget is a finite JSON number (and far above any real job).
MAX_BUDGET_DOLLARS = 1_000_000_000.0


class SpotPolicy(StrEnum):
    allowed = "allowed"
    required = "required"
    never = "never"


class CleanPodPolicy(StrEnum):
    running = "Running"
    all = "All"
    none = "None"


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


class ElasticSpec(ApiModel):
    """The sizes an elastic job may run at (docs/design.md, "Elastic jobs"): the operator
    shrinks a disrupted gang down to the minimum rather than wait, and grows it back; the
    global batch stays that of the target size (workers or gpus)."""

    min_workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | None = Field(
        default=None, description="With workers: the fewest workers the job may run on."
    )
    max_workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | None = Field(
        default=None,
        description="With workers: the most workers the job may be resumed at (`kubegan run "
        "--workers N`); the operator grows a shrunk gang back to workers. Default: workers.",
    )
    min_gpus: Annotated[int, Field(ge=1, le=4096)] | None = Field(
        default=None, description="With gpus: the fewest GPUs the job may run on."
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
    elastic: ElasticSpec | None = Field(
        default=None,
        description="Run on fewer workers while capacity is gone, and grow back when it "
        "returns, keeping the global batch by gradient accumulation (not for tpu).",
    )


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
    shrink_after_seconds: int = Field(
        default=120,
        ge=5,
        le=86400,
        description="Elastic jobs: how long a disrupted gang waits for its lost capacity "
        "before it restarts smaller; also the least time between two resizes.",
    )


class CostSpec(ApiModel):
    accelerator_hourly_price: Annotated[float, Field(ge=0, le=MAX_HOURLY_PRICE)] | None = Field(
        default=None,
        description="USD per accelerator-hour; overrides the price table's accelerator prices "
        "(requested vCPUs and memory are still priced from the table).",
    )
    budget_dollars: Annotated[float, Field(gt=0, le=MAX_BUDGET_DOLLARS)] | None = Field(
        default=None,
        description="USD: once the job's cost reaches it the operator stops the workers (they "
        "checkpoint first) and suspends the job with condition BudgetExceeded; raising or "
        "removing it resumes the job from its checkpoint.",
    )
