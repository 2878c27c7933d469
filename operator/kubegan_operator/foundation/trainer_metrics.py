"""Training progress as worker 0's metrics endpoint states it (DESIGN §6 trainer metrics):
the exposition text parsed into epochs and checkpoints, the last epoch's duration, and when
the next read is due. Pure; runtime/progress_reader.py reads the endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubegan_api.contract import (
    CHECKPOINT_EPOCH,
    CHECKPOINT_STEP,
    CHECKPOINT_TIMESTAMP,
    EPOCH,
    EPOCH_DURATION,
    SAMPLES_EPOCH,
)
from prometheus_client.parser import text_string_to_metric_families

EPOCH_SECONDS_SUM = f"{EPOCH_DURATION}_sum"
EPOCH_SECONDS_COUNT = f"{EPOCH_DURATION}_count"


@dataclass(frozen=True)
class TrainerProgress:
    epoch: int
    epoch_seconds_sum: float
    epoch_count: int
    # the latest checkpoint: epochs done, steps into the next, unix time (None: none yet)
    checkpoint: tuple[int, int, float] | None = None
    samples_epoch: int | None = None  # the newest sample grid stored with the artifacts


@dataclass(frozen=True)
class ProgressUpdate:
    """What reconcile copies into status.progress and status.lastCheckpoint."""

    epoch: int
    last_epoch_seconds: float | None
    checkpoint: tuple[int, int, float] | None
    samples_epoch: int | None = None


def parse_trainer_metrics(text: str) -> TrainerProgress | None:
    wanted = {
        EPOCH, EPOCH_SECONDS_SUM, EPOCH_SECONDS_COUNT,
        CHECKPOINT_EPOCH, CHECKPOINT_STEP, CHECKPOINT_TIMESTAMP,
        SAMPLES_EPOCH,
    }  # fmt: skip
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                values[sample.name] = sample.value
    if EPOCH not in values:
        return None
    checkpoint = None
    if values.get(CHECKPOINT_TIMESTAMP):
        checkpoint = (
            int(values.get(CHECKPOINT_EPOCH, 0)),
            int(values.get(CHECKPOINT_STEP, 0)),
            values[CHECKPOINT_TIMESTAMP],
        )
    return TrainerProgress(
        int(values[EPOCH]),
        values.get(EPOCH_SECONDS_SUM, 0.0),
        int(values.get(EPOCH_SECONDS_COUNT, 0)),
        checkpoint,
        samples_epoch=_samples_epoch(values.get(SAMPLES_EPOCH)),
    )


def _samples_epoch(value: float | None) -> int | None:
    """The gauge's epoch when it names one (it reads 0 until a grid is stored)."""
    if value is None or not 1 <= value < 2**31:  # NaN fails too
        return None
    return int(value)


def last_epoch_seconds(now: TrainerProgress, before: TrainerProgress | None) -> float | None:
    """The duration of the newest epoch when two readings bracket it, else the mean."""
    if before is not None and now.epoch_count > before.epoch_count:
        return (now.epoch_seconds_sum - before.epoch_seconds_sum) / (
            now.epoch_count - before.epoch_count
        )
    if now.epoch_count:
        return now.epoch_seconds_sum / now.epoch_count
    return None


def progress_update(now: TrainerProgress, before: TrainerProgress | None) -> ProgressUpdate:
    """What one reading of worker 0 tells reconcile, given the reading before it."""
    return ProgressUpdate(
        now.epoch,
        last_epoch_seconds(now, before),
        now.checkpoint,
        samples_epoch=now.samples_epoch,
    )


def progress_read_due_in(last_read: float | None, now: float, every: float) -> float:
    """Seconds until a running job's progress is due to be read again (0: now). Counted from
    the last successful read, not from the last sync: a sync brought by some other event just
    before the read was due must not push the read a whole interval further (a short job
    could then finish between two reads and never show progress)."""
    if last_read is None:
        return 0.0
    return max(0.0, every - (now - last_read))
