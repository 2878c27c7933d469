"""Training progress read from worker 0's metrics endpoint (DESIGN §6 trainer metrics).

The trainer has no Kubernetes credentials (no service-account token is mounted), so the
operator reads `kubegan_epoch` and the epoch-duration histogram over HTTP, best effort.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class TrainerProgress:
    epoch: int
    epoch_seconds_sum: float
    epoch_count: int
    # the latest checkpoint: epochs done, steps into the next, unix time (None: none yet)
    checkpoint: tuple[int, int, float] | None = None


@dataclass(frozen=True)
class ProgressUpdate:
    """What reconcile copies into status.progress and status.lastCheckpoint."""

    epoch: int
    last_epoch_seconds: float | None
    checkpoint: tuple[int, int, float] | None


def parse_trainer_metrics(text: str) -> TrainerProgress | None:
    wanted = {
        "kubegan_epoch", "kubegan_epoch_duration_seconds_sum",
        "kubegan_epoch_duration_seconds_count", "kubegan_checkpoint_epoch",
        "kubegan_checkpoint_step", "kubegan_checkpoint_timestamp_seconds",
    }  # fmt: skip
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                values[sample.name] = sample.value
    if "kubegan_epoch" not in values:
        return None
    checkpoint = None
    if values.get("kubegan_checkpoint_timestamp_seconds"):
        checkpoint = (
            int(values.get("kubegan_checkpoint_epoch", 0)),
            int(values.get("kubegan_checkpoint_step", 0)),
            values["kubegan_checkpoint_timestamp_seconds"],
        )
    return TrainerProgress(
        int(values["kubegan_epoch"]),
        values.get("kubegan_epoch_duration_seconds_sum", 0.0),
        int(values.get("kubegan_epoch_duration_seconds_count", 0)),
        checkpoint,
    )


def fetch_progress(host: str, port: int, timeout: float = 5.0) -> TrainerProgress | None:
    """None when the endpoint is not reachable or not (yet) a trainer's. The read runs off the
    event loop; a busy worker's metrics thread can need seconds to answer (seen on real nodes:
    with 1 s every read of a CPU-bound torch worker timed out and progress stayed at 0)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as r:
            return parse_trainer_metrics(r.read().decode("utf-8", "replace"))
    except (OSError, ValueError):
        return None


def last_epoch_seconds(now: TrainerProgress, before: TrainerProgress | None) -> float | None:
    """The duration of the newest epoch when two readings bracket it, else the mean."""
    if before is not None and now.epoch_count > before.epoch_count:
        return (now.epoch_seconds_sum - before.epoch_seconds_sum) / (
            now.epoch_count - before.epoch_count
        )
    if now.epoch_count:
        return now.epoch_seconds_sum / now.epoch_count
    return None
