"""Training progress read from worker 0's metrics endpoint (DESIGN §6 trainer metrics).

The trainer has no Kubernetes credentials (no service-account token is mounted), so the
operator reads `kubegan_epoch` and the epoch-duration histogram over HTTP, best effort.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubegan_api.contract import METRICS_PORT, worker_name

from kubegan_operator.foundation.trainer_metrics import (
    ProgressUpdate,
    TrainerProgress,
    parse_trainer_metrics,
    progress_read_due_in,
    progress_update,
)
from kubegan_operator.runtime.indexes import JobKey


def fetch_progress(host: str, port: int, timeout: float = 5.0) -> TrainerProgress | None:
    """None when the endpoint is not reachable or not (yet) a trainer's. The read runs off the
    event loop; a busy worker's metrics thread can need seconds to answer (seen on real nodes:
    with 1 s every read of a CPU-bound torch worker timed out and progress stayed at 0)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as r:
            return parse_trainer_metrics(r.read().decode("utf-8", "replace"))
    except (OSError, ValueError, OverflowError):  # OverflowError: an infinite epoch
        return None


class ProgressReader:
    """Worker 0's progress for each running job, read over HTTP at most every `every`
    seconds (`--progress-interval`); off with `enabled` False (`--no-trainer-progress`)."""

    def __init__(
        self,
        enabled: bool,
        every: float,
        fetch: Callable[[str, int], TrainerProgress | None] = fetch_progress,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled, self.every = enabled, every
        self._fetch, self._clock = fetch, clock
        # Per job: when worker 0 was last asked, and its last answer (for epoch times).
        # Written from the API threads, read on the event loop: each access is one dict
        # operation, which CPython does atomically.
        self._last: dict[JobKey, tuple[float, TrainerProgress | None]] = {}

    def read(
        self, key: JobKey, job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
    ) -> ProgressUpdate | None:
        """Epoch and last epoch time from worker 0 when a read is due; blocking (HTTP)."""
        if not self.enabled:
            return None
        tried_at, before = self._last.get(key, (None, None))
        if progress_read_due_in(tried_at, self._clock(), self.every):
            return None
        worker0 = next((p for p in pods if _name(p) == worker_name(key[1], 0)), None)
        ip = ((worker0 or {}).get("status") or {}).get("podIP")
        if not ip:  # the pod event that brings its IP brings the job back
            return None
        port = ((job.get("spec") or {}).get("monitoring") or {}).get("metricsPort", METRICS_PORT)
        now = self._fetch(ip, int(port))
        # A failed read waits its interval too (a busy worker is not asked again at once),
        # and keeps the last reading for the next epoch-time difference.
        self._last[key] = (self._clock(), now or before)
        if now is None:
            return None
        return progress_update(now, before)

    def next_read_in(self, key: JobKey) -> float | None:
        """Seconds until the job's next read is due; None when reading is off. A whole
        interval when one is due already: this sync found no worker 0 to read (the pod event
        that brings its IP brings the job back sooner)."""
        if not self.enabled:
            return None
        tried_at = self._last.get(key, (None, None))[0]
        return progress_read_due_in(tried_at, self._clock(), self.every) or self.every

    def forget(self, key: JobKey) -> None:
        self._last.pop(key, None)


def _name(pod: Mapping[str, Any]) -> str:
    return (pod.get("metadata") or {}).get("name", "")
