"""Trainer metrics (DESIGN §6): a Prometheus endpoint on rank 0 and `metrics.jsonl`.

Framework-free so every backend reports the same names. Labels are bounded: the job
name and namespace only (never pods or steps).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

METRIC_NAMES = (
    "kubegan_epoch_duration_seconds",
    "kubegan_epoch",
    "kubegan_step_duration_seconds",
    "kubegan_samples_per_second",
    "kubegan_generator_loss",
    "kubegan_discriminator_loss",
    "kubegan_epoch_cost_dollars",
    "kubegan_checkpoint_duration_seconds",
    # beyond DESIGN §6: the latest checkpoint's position, for status.lastCheckpoint
    "kubegan_checkpoint_epoch",
    "kubegan_checkpoint_step",
    "kubegan_checkpoint_timestamp_seconds",
    # issue 14: GAN quality per epoch, one series per metric (quality.py names them)
    "kubegan_quality",
)

# Epochs range from seconds (digits on a laptop) to half an hour (3DGAN on 2 GPUs).
_EPOCH_BUCKETS = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
_STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_CHECKPOINT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)


@dataclass(frozen=True)
class EpochRecord:
    """One line of metrics.jsonl: a finished epoch."""

    epoch: int  # 1-based
    epoch_seconds: float
    samples_per_second: float
    g_loss: float
    d_loss: float
    cost_dollars: float
    steps: int
    samples: int
    world_size: int
    quality: dict[str, float] = field(default_factory=dict)  # metric -> value (quality.py)
    quality_seconds: float = 0.0  # what measuring it cost (not part of epoch_seconds)

    @staticmethod
    def cost(epoch_seconds: float, rate_per_hour: float) -> float:
        return epoch_seconds / 3600.0 * rate_per_hour


class TrainerMetrics:
    """The §6 trainer metrics in their own registry (so tests can build several)."""

    def __init__(self, job_name: str, namespace: str) -> None:
        self.registry = CollectorRegistry()
        labels = ("ganjob", "namespace")
        self._labels = {"ganjob": job_name, "namespace": namespace}

        def hist(name: str, doc: str, buckets: Iterable[float]) -> Histogram:
            return Histogram(name, doc, labels, buckets=tuple(buckets), registry=self.registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=self.registry)

        self.epoch_duration = hist(
            "kubegan_epoch_duration_seconds", "Wall time of one epoch.", _EPOCH_BUCKETS
        ).labels(**self._labels)
        self.epoch = gauge("kubegan_epoch", "Last finished epoch (1-based).").labels(**self._labels)
        self.step_duration = hist(
            "kubegan_step_duration_seconds", "Wall time of one optimizer step.", _STEP_BUCKETS
        ).labels(**self._labels)
        self.samples_per_second = gauge(
            "kubegan_samples_per_second", "Global training throughput of the last epoch."
        ).labels(**self._labels)
        self.generator_loss = gauge(
            "kubegan_generator_loss", "Mean generator loss of the last epoch."
        ).labels(**self._labels)
        self.discriminator_loss = gauge(
            "kubegan_discriminator_loss", "Mean discriminator loss of the last epoch."
        ).labels(**self._labels)
        self.epoch_cost = gauge(
            "kubegan_epoch_cost_dollars", "Cost of the last epoch at the job's hourly rate."
        ).labels(**self._labels)
        self.checkpoint_duration = hist(
            "kubegan_checkpoint_duration_seconds",
            "Time to write one checkpoint.",
            _CHECKPOINT_BUCKETS,
        ).labels(**self._labels)

        # Where the latest checkpoint resumes (epochs done, steps into the next): the operator
        # copies these into the job's status.lastCheckpoint.
        self.checkpoint_epoch = gauge(
            "kubegan_checkpoint_epoch", "Epochs completed at the latest checkpoint."
        ).labels(**self._labels)
        self.checkpoint_step = gauge(
            "kubegan_checkpoint_step", "Steps into the next epoch at the latest checkpoint."
        ).labels(**self._labels)
        self.checkpoint_time = gauge(
            "kubegan_checkpoint_timestamp_seconds", "Unix time of the latest checkpoint."
        ).labels(**self._labels)
        # `metric` is bounded: the few names a model family reports (quality.py).
        self.quality = Gauge(
            "kubegan_quality",
            "GAN quality of the last epoch against real data, by metric.",
            (*labels, "metric"),
            registry=self.registry,
        )

    def record_checkpoint(self, seconds: float, epoch: int, step: int) -> None:
        self.checkpoint_duration.observe(seconds)
        self.checkpoint_epoch.set(epoch)
        self.checkpoint_step.set(step)
        self.checkpoint_time.set_to_current_time()

    def restored_checkpoint(self, epoch: int, step: int, created: float) -> None:
        """A resumed run starts with the checkpoint it resumed from as its latest: the
        previous gang may have written it (on SIGTERM) moments before exiting, too late for
        the operator to read it from that gang."""
        self.checkpoint_epoch.set(epoch)
        self.checkpoint_step.set(step)
        self.checkpoint_time.set(created)

    def serve(self, port: int, addr: str = "0.0.0.0") -> bool:
        """Start the HTTP endpoint; a busy port is a warning, never a training failure."""
        try:
            start_http_server(port, addr=addr, registry=self.registry)
        except OSError as err:
            log.warning("metrics endpoint on port %d not started: %s", port, err)
            return False
        return True

    def record_epoch(self, rec: EpochRecord) -> None:
        self.epoch_duration.observe(rec.epoch_seconds)
        self.epoch.set(rec.epoch)
        self.samples_per_second.set(rec.samples_per_second)
        self.generator_loss.set(rec.g_loss)
        self.discriminator_loss.set(rec.d_loss)
        self.epoch_cost.set(rec.cost_dollars)
        for metric, value in rec.quality.items():
            self.quality.labels(**self._labels, metric=metric).set(value)


class MetricsLog:
    """`<output>/metrics.jsonl`: one JSON object per finished epoch.

    A run killed mid-write leaves a torn last line. Readers skip lines that are not JSON
    objects (a torn line never hides later epochs), and the writer cuts a torn tail back
    to the last newline before appending, so a new record never joins a fragment. Each
    record is one write() of a whole line, then fsync.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[dict[str, Any]]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        rows = []
        for line in data.decode("utf-8", errors="replace").splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line from a killed run
            if isinstance(row, dict):
                rows.append(row)
        return rows

    def repair_tail(self) -> None:
        """Cut a partial last line (no newline: its writer was killed) off the file."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                return
            os.lseek(fd, size - 1, os.SEEK_SET)
            if os.read(fd, 1) == b"\n":
                return
            keep = 0
            pos = size
            while pos > 0 and not keep:
                start = max(0, pos - 65536)
                os.lseek(fd, start, os.SEEK_SET)
                chunk = os.read(fd, pos - start)
                nl = chunk.rfind(b"\n")
                if nl >= 0:
                    keep = start + nl + 1
                pos = start
            os.ftruncate(fd, keep)
            os.fsync(fd)
            log.warning("metrics.jsonl: removed a torn last line (%d bytes)", size - keep)
        finally:
            os.close(fd)

    def append(self, rec: EpochRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repair_tail()
        line = (json.dumps(asdict(rec), separators=(",", ":")) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def truncate_after(self, epoch: int) -> None:
        """On resume from `epoch`, drop lines of epochs that the checkpoint does not cover,
        so a re-run epoch is not listed twice; torn lines go too. Atomic: written aside,
        then renamed."""
        if not self.path.exists():
            return
        rows = self.read()
        kept = [r for r in rows if _epoch_of(r) <= epoch]
        raw = self.path.read_bytes()
        if len(kept) == len(rows) and len(raw.splitlines()) == len(rows) and raw.endswith(b"\n"):
            return
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text(
            "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept), encoding="utf-8"
        )
        os.replace(tmp, self.path)


def _epoch_of(row: dict[str, Any]) -> int:
    try:
        return int(row.get("epoch", 0))
    except (TypeError, ValueError):
        return 0
