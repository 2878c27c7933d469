"""A GANTrainingJob's status, which the operator alone writes, and the phases: the job's own
and the pods' that it is read from."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from kubegan_api.base import ApiModel


class Phase(StrEnum):
    pending = "Pending"
    running = "Running"
    restarting = "Restarting"
    succeeded = "Succeeded"
    failed = "Failed"
    suspended = "Suspended"


class PodPhase(StrEnum):
    """A pod's status.phase, as Kubernetes writes it."""

    pending = "Pending"
    running = "Running"
    succeeded = "Succeeded"
    failed = "Failed"
    unknown = "Unknown"


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
    # An elastic job's size as `kubectl get` shows it: "4", or "2/4" while it runs on 2 of
    # its target 4 workers.
    size: str = Field(default="", description='Workers now, "2/4" while shrunk (elastic).')
    target_workers: int | None = Field(
        default=None, description="Elastic jobs: the workers of the full size."
    )
    accumulation_steps: int | None = Field(
        default=None,
        description="Elastic jobs: gradient accumulation steps at the current size, which keep "
        "the global batch of the full size.",
    )


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


class ArtifactsStatus(ApiModel):
    uri: str = Field(
        default="",
        description="Where samples/, metrics.jsonl, tensorboard/, logs/ and export/ are: the "
        "checkpoint bucket's prefix, or pvc://<claim>/<job> on the checkpoint claim.",
    )
    latest_samples: str = Field(
        default="", description="The newest sample grid written there (its full URI)."
    )


class CostStatus(ApiModel):
    dollars: float = 0.0
    rate_per_hour: float = 0.0
    lost_dollars: float = Field(
        default=0.0,
        description="The cost of work trained again after preemptions and restarts: for each "
        "ended gang, its training time after the checkpoint the next gang restored from, at "
        "its rate. Settled once the next gang reports that checkpoint (see pendingLoss).",
    )


class PendingLoss(ApiModel):
    """An ended gang's lost work while it is not yet known: the next gang may restore from a
    newer checkpoint than kubegan saw (one written on SIGTERM just before it exited)."""

    ended_at: str = Field(description="When the ended gang stopped training.")
    running_since: str = Field(description="When the ended gang started training.")
    rate_per_hour: float = Field(description="The ended gang's rate.")
    seconds: float = Field(
        description="The estimate: the training since the last checkpoint kubegan saw."
    )
    dollars: float = Field(description="`seconds` at `ratePerHour`; not in lostDollars.")


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
    resizes: int = Field(default=0, description="Elastic jobs: times the gang changed size.")
    cost: CostStatus | None = None
    pending_loss: PendingLoss | None = Field(
        default=None,
        description="The last ended gang's lost work while it is not known: an estimate until "
        "the next gang reports the checkpoint it restored from, when cost.lostDollars counts "
        "what that gang redoes (where it cannot say, the estimate). Not yet in lostDollars.",
    )
    artifacts: ArtifactsStatus | None = None
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
    running_since: str | None = None  # when the current gang's workers all ran (lostDollars)
    # Gangs released after waiting spec.scheduling.capacityTimeoutSeconds for an autoscaler
    # in a row, and when the next may be created (the backoff).
    capacity_releases: int | None = None
    capacity_retry_at: str | None = None
    image_pull_since: str | None = None  # when a worker's image pull was first seen failing
    # Elastic jobs: when the gang last changed size (at most one resize per
    # spec.scheduling.shrinkAfterSeconds), and the size a gang stopping to grow restarts at.
    resized_at: str | None = None
    resize_to: int | None = None
