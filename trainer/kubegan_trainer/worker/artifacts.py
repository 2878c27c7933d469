"""Rank 0's run artifacts beside the checkpoints (layout: storage/artifacts.py): the epoch
history, sample grids, TensorBoard event files, its own log and the exported generator.

The driver calls `start` once training knows where it resumes, `epoch_done` after each
epoch, and the backend's end of run (run_end.py) `finish`. Everything here runs between
steps on rank 0; what reaches a bucket goes up in the sink's background thread.

- Resume at epoch E: the history is the store's, cut to epochs <= E (run_history.py); the
  sample grids and event files of later epochs are removed from the store (their epochs are
  trained again and write them again), so each epoch is listed once.
- The newest stored grid is reported (the `SAMPLES_EPOCH` gauge and the termination
  message) once it is in the store, for the operator's `status.artifacts.latestSamples`.
- A stop gives the uploads what is left of the grace period after the checkpoint's.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import asdict
from pathlib import Path

from kubegan_api.contract import ENV_LOG_FILE
from kubegan_api.sections import TrainerConfig

from kubegan_trainer.storage import termination
from kubegan_trainer.storage.artifacts import BucketSink, FolderSink, Sink, open_bucket
from kubegan_trainer.worker import run_history
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.mlflow_run import FINISHED, MlflowTracker
from kubegan_trainer.worker.tensorboard import (
    TB_DIR,
    EpochEvents,
    epoch_of_event_file,
    hparams_for,
    scalars_for,
)
from kubegan_trainer.worker.worker_metrics import METRICS_FILE, EpochRecord, TrainerMetrics

log = logging.getLogger(__name__)

SAMPLES_DIR = "samples"
LOGS_DIR = "logs"
EXPORT_DIR = "export"
_SAMPLES = re.compile(r"^samples/epoch-(\d{4,})\.png$")
LOG_TAIL_BYTES = 16 << 20  # what of a (long) log goes up each time: its end
# After a stop request the pod has about 15 s (GKE spot); the stop checkpoint and its upload
# come first (storage/sync.py), the artifacts get what is left up to this point.
STOP_DEADLINE_SECONDS = 13.0
FINISH_SECONDS = 300.0  # at a normal end: each upload is bounded by its retries anyway


def _stamp() -> str:
    """When this process started its part of the run, for log names (UTC, sortable)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def _budget(stop_at: float | None) -> float:
    """Seconds the uploads may still take: FINISH_SECONDS, or after a stop what is left
    until STOP_DEADLINE_SECONDS after it."""
    if stop_at is None:
        return FINISH_SECONDS
    return max(0.5, STOP_DEADLINE_SECONDS - (time.monotonic() - stop_at))


def samples_key(epoch: int) -> str:
    return f"{SAMPLES_DIR}/epoch-{epoch:04d}.png"


def epoch_of_key(key: str) -> int | None:
    """The epoch a sample grid's or an event file's key names, or None."""
    m = _SAMPLES.match(key)
    if m:
        return int(m.group(1))
    directory, _, name = key.rpartition("/")
    return epoch_of_event_file(name) if directory == TB_DIR else None


class RunArtifacts:
    def __init__(
        self,
        output: Path,
        config: TrainerConfig,
        metrics: TrainerMetrics | None,
        log_file: Path | None,
    ) -> None:
        self.output = output
        self.metrics = metrics
        self.events = EpochEvents(output / TB_DIR, hparams_for(config))
        self.history: list[dict] = []
        self._handler: logging.Handler | None = None
        self._captured = log_file  # the launcher's capture of this process's output
        self.log_file = log_file or self.output / LOGS_DIR / f"{_stamp()}-rank0.log"
        opened = open_bucket(config.checkpoint)
        self.sink: Sink = (
            FolderSink(output, self._stored)
            if opened is None
            else BucketSink(opened[1], opened[0], self._stored)
        )
        self.bucket = opened is not None
        name = self.log_file.name
        self.log_key = f"{LOGS_DIR}/{name if log_file is None else f'{_stamp()}-{name}'}"
        self._tb_broken = False
        mlflow = config.tracking.mlflow
        self.tracker = (
            MlflowTracker(mlflow, config.job_name, self.events.hparams, self.sink)
            if mlflow
            else None
        )

    @classmethod
    def open(
        cls, env: ClusterEnv, config: TrainerConfig, metrics: TrainerMetrics | None
    ) -> RunArtifacts:
        """Rank 0's artifacts; the launcher's capture of its output (`kubegan run`) is its
        log, else (a pod) rank 0 writes its log records to logs/ itself."""
        captured = os.environ.get(ENV_LOG_FILE)
        return cls(Path(env.output_dir), config, metrics, Path(captured) if captured else None)

    # ---- the run --------------------------------------------------------------------------
    def start(self, epoch: int) -> None:
        """Training resumes with `epoch` epochs done (0: from the start). Nothing is
        written before this: a run that fails to start leaves its folder as it was."""
        if self._captured is None:
            self._log_to_file()
        local = run_history.parse_rows(self._local_history())[0]
        if self.bucket:
            raw = self.sink.read(METRICS_FILE, run_history.HISTORY_MAX_BYTES)
            stored = run_history.parse_rows(raw)[0] if raw else []
            self.history = run_history.merge(stored, local, epoch)
            merged = run_history.render(self.history)
            if merged != self._local_history():  # the local file says what the store says
                FolderSink(self.output).put_bytes(METRICS_FILE, merged)
        newest = self._forget_after(epoch)
        if self.metrics is not None:
            self.metrics.samples_epoch.set(newest or 0)
        termination.note_samples(newest)
        if self.tracker is not None:
            self.tracker.start(epoch)

    def _forget_after(self, epoch: int) -> int | None:
        """Remove sample grids and event files of epochs after `epoch` from the store (and
        from the local folder, its copy); returns the newest grid's epoch that is kept."""
        newest = None
        stores = [self.sink] if not self.bucket else [self.sink, FolderSink(self.output)]
        for sink in stores:
            for key in sink.keys(SAMPLES_DIR) + sink.keys(TB_DIR):
                e = epoch_of_key(key)
                if e is None:
                    continue
                if e > epoch:
                    sink.delete(key)
                elif sink is self.sink and key.startswith(SAMPLES_DIR):
                    newest = max(newest or 0, e)
        return newest

    def epoch_done(self, rec: EpochRecord, sample: Path | None) -> None:
        """Store the finished epoch's grid, event file and history (rank 0, between steps)."""
        if sample is not None:
            self.sink.put_file(samples_key(rec.epoch), sample)
        event = self._write_events(rec, sample)
        if event is not None:
            self.sink.put_file(f"{TB_DIR}/{event.name}", event)
        if self.tracker is not None:
            self.tracker.epoch(rec.epoch, scalars_for(rec), sample)
        if self.bucket:  # in a folder, MetricsLog has appended the line already
            self.history.append(asdict(rec))
            self.sink.put_bytes(METRICS_FILE, run_history.render(self.history))
            self._put_log()

    def _write_events(self, rec: EpochRecord, sample: Path | None) -> Path | None:
        """The epoch's event file; a failure is reported once and never stops training
        (the event files are a view of what metrics.jsonl and samples/ hold)."""
        if self._tb_broken:
            return None
        try:
            return self.events.write(rec.epoch, scalars_for(rec), sample)
        except Exception as err:  # tensorboardX, PIL or the disk: none may end the run
            self._tb_broken = True
            log.warning("TensorBoard event files not written from now on: %s", err)
            return None

    def put_export(self, files: dict[str, Path]) -> None:
        """The exported generator's files, by their path under export/."""
        for rel, path in sorted(files.items()):
            self.sink.put_file(f"{EXPORT_DIR}/{rel}", path)
        if self.tracker is not None:
            self.tracker.files(files, "generator")

    def has_export(self) -> bool:
        return bool(self.sink.keys(EXPORT_DIR))

    def finish(self, stop_at: float | None, status: str = FINISHED) -> bool:
        """Wait for the uploads (after a stop: until STOP_DEADLINE_SECONDS after it), then
        for the MLflow run, which ends with `status`; whether everything reached the store."""
        self._put_log()
        done = self.sink.flush(_budget(stop_at))
        if not done:
            log.warning(
                "artifacts: uploads to %s not finished within %.0f s",
                self.sink.location,
                _budget(stop_at),
            )
        if self.tracker is not None:
            self.tracker.finish(status, _budget(stop_at))
        if self._handler is not None:
            logging.getLogger().removeHandler(self._handler)
            self._handler.close()
            self._handler = None
        return done

    # ---- helpers --------------------------------------------------------------------------
    def _stored(self, key: str) -> None:
        """A key reached the store (the uploader's thread, or at once in a folder)."""
        m = _SAMPLES.match(key)
        if m is None:
            return
        if self.metrics is not None:
            self.metrics.samples_epoch.set(int(m.group(1)))
        termination.note_samples(int(m.group(1)))

    def _local_history(self) -> bytes:
        return FolderSink(self.output).read(METRICS_FILE, run_history.HISTORY_MAX_BYTES) or b""

    def _log_to_file(self) -> None:
        """A pod's rank 0 logs to <output>/logs/<start>-rank0.log as well as to stderr."""
        path = self.log_file
        path.parent.mkdir(parents=True, exist_ok=True)
        root = logging.getLogger()
        handler = logging.FileHandler(path, encoding="utf-8")
        # The console's formatter: the same lines, with the same redaction of credentials.
        handler.setFormatter(next((h.formatter for h in root.handlers if h.formatter), None))
        root.addHandler(handler)
        self._handler = handler

    def _put_log(self) -> None:
        """The log's newest LOG_TAIL_BYTES to the bucket (a folder holds the file itself)."""
        if not self.bucket or not self.log_file.is_file():
            return
        if self._handler is not None:
            self._handler.flush()
        try:
            with self.log_file.open("rb") as f:
                f.seek(max(0, self.log_file.stat().st_size - LOG_TAIL_BYTES))
                self.sink.put_bytes(self.log_key, f.read(LOG_TAIL_BYTES))
        except OSError as err:
            log.warning("artifacts: log %s not read: %s", self.log_file, err)
