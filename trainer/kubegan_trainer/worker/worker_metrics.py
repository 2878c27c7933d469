"""Trainer metrics (DESIGN §6): a Prometheus endpoint on rank 0 and `metrics.jsonl`.

Framework-free so every backend reports the same names. Labels are bounded: the job
name and namespace only (never pods or steps).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubegan_api import contract
from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server

from kubegan_trainer.base.bounded_read import read_regular
from kubegan_trainer.worker.run_history import parse_rows

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
# A line per epoch; a gigabyte is millions of epochs, and a bound keeps a runaway file
# from exhausting rank 0 or `kubegan run`.
METRICS_MAX_BYTES = 1 << 30

METRIC_NAMES = contract.TRAINER_METRICS  # DESIGN §6, and a few beyond it (the contract's)

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
    # Samples per optimizer step, and the accumulation steps that made it at world_size:
    # an elastic job resized mid-run keeps the first and changes the second.
    global_batch: int = 0
    accumulation_steps: int = 0

    @staticmethod
    def cost(epoch_seconds: float, rate_per_hour: float) -> float:
        return epoch_seconds / 3600.0 * rate_per_hour


# ---- reading rows back: a hand-edited or older metrics.jsonl never raises -----------------

# Fields every usable row has: durations, throughput and cost are finite and >= 0; the
# losses are numbers, NaN and infinity included (a diverged GAN's losses are data).
_AMOUNTS = ("epoch_seconds", "samples_per_second", "cost_dollars")
_LOSSES = ("g_loss", "d_loss")
_LARGEST = 1e15  # beyond any real epoch; keeps every value printable in a table column
_NAME_LIMIT = 64  # a quality metric's name is a column header


def _number(value: object) -> float | None:
    """`value` as a float when it is a JSON number (not a bool, not too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _quality(value: object) -> tuple[dict[str, float], bool]:
    """The usable {metric: number} entries of a row's `quality`, and whether any were
    dropped (a repair)."""
    if value is None:
        return {}, False
    if not isinstance(value, dict):
        return {}, True
    kept = {}
    for name, score in value.items():
        number = _number(score)
        if number is not None and len(name) <= _NAME_LIMIT and abs(number) <= _LARGEST:
            kept[name] = number
    return kept, len(kept) != len(value)


def usable_row(row: object) -> tuple[dict[str, Any] | None, bool]:
    """A metrics.jsonl row fit for the summary (None when it is not one: not an object, a
    missing or wrong field), and whether it needed repair (unusable quality values
    dropped). Extra keys are kept: newer and older kubegans write more or fewer."""
    if not isinstance(row, dict):
        return None, False
    epoch = row.get("epoch")
    if type(epoch) is not int or not 1 <= epoch <= 10**9:
        return None, False
    fixed: dict[str, Any] = {**row}
    for key in _AMOUNTS:
        number = _number(row.get(key))
        if number is None or not 0 <= number <= _LARGEST:  # NaN fails too
            return None, False
        fixed[key] = number
    for key in _LOSSES:
        number = _number(row.get(key))
        if number is None or (math.isfinite(number) and abs(number) > _LARGEST):
            return None, False
        fixed[key] = number
    fixed["quality"], repaired = _quality(row.get("quality"))
    return fixed, repaired


@dataclass(frozen=True)
class UsableRows:
    rows: list[dict[str, Any]]
    skipped: int  # lines that are no usable epoch (torn, not JSON, not an object, bad fields)
    repaired: int  # rows shown without their unusable quality values

    def note(self, name: str = METRICS_FILE) -> str | None:
        """The one line that says what was left out, or None when nothing was."""
        parts = []
        if self.skipped:
            parts.append(f"skipped {self.skipped} malformed row{'s' * (self.skipped != 1)}")
        if self.repaired:
            many = "s" * (self.repaired != 1)
            parts.append(f"dropped unusable quality values from {self.repaired} row{many}")
        return f"{name}: {', '.join(parts)}" if parts else None


def usable_rows(rows: Sequence[object], unreadable_lines: int = 0) -> UsableRows:
    """The rows fit for the summary, with counts of what was skipped or repaired."""
    kept, repaired = [], 0
    for row in rows:
        fixed, was_repaired = usable_row(row)
        if fixed is not None:
            kept.append(fixed)
            repaired += was_repaired
    return UsableRows(kept, unreadable_lines + len(rows) - len(kept), repaired)


class TrainerMetrics:
    """The §6 trainer metrics in their own registry (so tests can build several)."""

    def __init__(self, job_name: str, namespace: str) -> None:
        self.registry = CollectorRegistry()
        labels = (contract.JOB_LABEL, contract.NAMESPACE_LABEL)
        self._labels = dict(zip(labels, (job_name, namespace), strict=True))

        def hist(name: str, doc: str, buckets: Iterable[float]) -> Histogram:
            return Histogram(name, doc, labels, buckets=tuple(buckets), registry=self.registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=self.registry)

        self.epoch_duration = hist(
            contract.EPOCH_DURATION, "Wall time of one epoch.", _EPOCH_BUCKETS
        ).labels(**self._labels)
        self.epoch = gauge(contract.EPOCH, "Last finished epoch (1-based).").labels(**self._labels)
        self.step_duration = hist(
            contract.STEP_DURATION, "Wall time of one optimizer step.", _STEP_BUCKETS
        ).labels(**self._labels)
        self.samples_per_second = gauge(
            contract.SAMPLES_PER_SECOND, "Global training throughput of the last epoch."
        ).labels(**self._labels)
        self.generator_loss = gauge(
            contract.GENERATOR_LOSS, "Mean generator loss of the last epoch."
        ).labels(**self._labels)
        self.discriminator_loss = gauge(
            contract.DISCRIMINATOR_LOSS, "Mean discriminator loss of the last epoch."
        ).labels(**self._labels)
        self.epoch_cost = gauge(
            contract.EPOCH_COST, "Cost of the last epoch at the job's hourly rate."
        ).labels(**self._labels)
        self.checkpoint_duration = hist(
            contract.CHECKPOINT_DURATION,
            "Time to write one checkpoint.",
            _CHECKPOINT_BUCKETS,
        ).labels(**self._labels)

        # Where the latest checkpoint resumes (epochs done, steps into the next): the operator
        # copies these into the job's status.lastCheckpoint.
        self.checkpoint_epoch = gauge(
            contract.CHECKPOINT_EPOCH, "Epochs completed at the latest checkpoint."
        ).labels(**self._labels)
        self.checkpoint_step = gauge(
            contract.CHECKPOINT_STEP, "Steps into the next epoch at the latest checkpoint."
        ).labels(**self._labels)
        self.checkpoint_time = gauge(
            contract.CHECKPOINT_TIMESTAMP, "Unix time of the latest checkpoint."
        ).labels(**self._labels)
        # `metric` is bounded: the few names a model family reports (quality.py).
        self.quality = Gauge(
            contract.QUALITY,
            "GAN quality of the last epoch against real data, by metric.",
            (*labels, "metric"),
            registry=self.registry,
        )
        # The newest sample grid stored with the artifacts (0: none yet), for
        # status.artifacts.latestSamples.
        self.samples_epoch = gauge(
            contract.SAMPLES_EPOCH, "Epoch of the newest sample grid stored with the artifacts."
        ).labels(**self._labels)

    def record_checkpoint(self, seconds: float, epoch: int, step: int) -> None:
        self.checkpoint_duration.observe(seconds)
        self.checkpoint_epoch.set(epoch)
        self.checkpoint_step.set(step)
        self.checkpoint_time.set_to_current_time()

    def restored_checkpoint(self, epoch: int, step: int, created: float) -> None:
        """A resumed run starts with the checkpoint it resumed from as its latest: the
        previous gang may have written it (on SIGTERM) moments before exiting, too late for
        the operator to read it from that gang. Its epochs are finished too: the job's
        status must not read 0 epochs done until the new gang ends one."""
        self.epoch.set(epoch)
        self.checkpoint_epoch.set(epoch)
        self.checkpoint_step.set(step)
        self.checkpoint_time.set(created)

    def serve(self, port: int, addr: str = contract.METRICS_ADDR) -> bool:
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
        """The lines that are JSON objects (whatever their fields)."""
        return self.read_rows()[0]

    def read_rows(self) -> tuple[list[dict[str, Any]], int]:
        """The lines that are JSON objects, and how many other non-blank lines there were
        (torn by a killed run, not JSON, nested too deeply, not an object). A file that is
        not a regular file raises TrainerError rather than blocking (a FIFO)."""
        try:
            data = read_regular(self.path, METRICS_MAX_BYTES)
        except FileNotFoundError:
            return [], 0
        return parse_rows(data)

    def usable(self) -> UsableRows:
        """The rows fit for the summary, and what was left out (UsableRows.note)."""
        return usable_rows(*self.read_rows())

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
        then renamed. Rows of the wrong shape (hand-edited, older kubegans) stay, and are
        mentioned once, here, as the run starts."""
        if not self.path.exists():
            return
        rows, other = self.read_rows()
        kept = [r for r in rows if _epoch_of(r) <= epoch]
        raw = read_regular(self.path, METRICS_MAX_BYTES)
        unchanged = len(kept) == len(rows) and len(raw.splitlines()) == len(rows)
        if unchanged and raw.endswith(b"\n"):
            _mention_malformed(usable_rows(rows, other))
            return
        _mention_malformed(usable_rows(kept), removed=other)
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text(
            "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept), encoding="utf-8"
        )
        os.replace(tmp, self.path)


def _mention_malformed(found: UsableRows, removed: int = 0) -> None:
    """One warning line for what a resume met: rows it keeps though summaries skip them,
    and lines that were no JSON object (torn, garbage), which the rewrite removed."""
    parts = []
    bad = found.skipped + found.repaired
    if bad:
        parts.append(f"{bad} malformed row{'s' * (bad != 1)} left as written (summaries skip them)")
    if removed:
        parts.append(f"removed {removed} line{'s' * (removed != 1)} that were not JSON objects")
    if parts:
        log.warning("%s: %s", METRICS_FILE, "; ".join(parts))


def _epoch_of(row: dict[str, Any]) -> int:
    """A row's epoch; 0 (kept on every resume) when it has none that is an integer."""
    epoch = row.get("epoch")
    return epoch if type(epoch) is int else 0
