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


def parse_trainer_metrics(text: str) -> TrainerProgress | None:
    epoch: float | None = None
    total, count = 0.0, 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kubegan_epoch":
                epoch = sample.value
            elif sample.name == "kubegan_epoch_duration_seconds_sum":
                total = sample.value
            elif sample.name == "kubegan_epoch_duration_seconds_count":
                count = sample.value
    if epoch is None:
        return None
    return TrainerProgress(int(epoch), total, int(count))


def fetch_progress(host: str, port: int, timeout: float = 1.0) -> TrainerProgress | None:
    """None when the endpoint is not reachable or not (yet) a trainer's."""
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
