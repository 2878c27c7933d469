"""Rank 0's reporting, shared by both backends: the metrics endpoint, `metrics.jsonl`,
`progress.json` and the log lines a person reads. On other ranks every method does nothing,
so the training loops call it unconditionally."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from kubegan_trainer.storage.folder import checkpoint_created
from kubegan_trainer.storage.store import Position
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.progress_file import ProgressWriter
from kubegan_trainer.worker.worker_metrics import EpochRecord, MetricsLog, TrainerMetrics

log = logging.getLogger(__name__)


class Reporter:
    def __init__(self, env: ClusterEnv, output: Path, epochs: int, chief: bool) -> None:
        self.env = env
        self.epochs = epochs
        self.chief = chief
        self.metrics_log = MetricsLog(output / "metrics.jsonl")
        self.metrics = TrainerMetrics(env.job_name, env.namespace) if chief else None
        self.progress = ProgressWriter(output) if chief else None
        self.stepped = False  # a step since start(): the first is written at once

    def start(self, start: Position, steps_per_epoch: int, world_size: int) -> bool:
        """Serve metrics and announce where training (re)starts; True if already finished."""
        finished = start.epoch >= self.epochs
        if self.metrics is None or self.progress is None:
            return finished
        self.metrics.serve(self.env.metrics_port, self.env.metrics_addr)
        # Epochs after the checkpoint will be trained (and logged) again.
        self.metrics_log.truncate_after(start.epoch)
        resumed = start != Position(0, 0)
        if resumed:
            self.metrics.restored_checkpoint(
                start.epoch, start.step, checkpoint_created(Path(self.env.checkpoint_dir), start)
            )
            where = f"epoch {start.epoch}" + (
                f", step {start.step} of epoch {start.epoch + 1}" if start.step else ""
            )
            log.info("resumed from %s", where)
        self.progress.update(
            force=True,
            state="running",
            epoch=start.epoch + 1,
            epochs=self.epochs,
            step=start.step,
            steps=steps_per_epoch,
            world_size=world_size,
            resumed_from=start.epoch if resumed else None,
        )
        if finished:
            log.info("already finished: %d of %d epochs done", start.epoch, self.epochs)
            self.progress.update(force=True, state="finished", epoch=start.epoch)
        return finished

    def step_done(self, seconds: float, epoch0: int, step: int, steps: int) -> None:
        if self.metrics is None or self.progress is None:
            return
        self.metrics.step_duration.observe(seconds)
        # The first step after a (re)start says the gang trains again: not held back by the
        # writer's interval behind start()'s record (bench/e2e_preemption.py reads it).
        self.progress.update(force=not self.stepped, epoch=epoch0 + 1, step=step, steps=steps)
        self.stepped = True

    def checkpoint_written(self, seconds: float, pos: Position) -> None:
        if self.metrics is not None:
            self.metrics.record_checkpoint(seconds, pos.epoch, pos.step)

    def epoch_done(
        self,
        epoch: int,
        elapsed: float,
        *,
        steps: int,
        samples: int,
        g_loss: float,
        d_loss: float,
        world_size: int,
        quality: dict[str, float] | None = None,
        quality_seconds: float = 0.0,
        global_batch: int = 0,
        accumulation_steps: int = 0,
    ) -> EpochRecord | None:
        """The epoch's record, logged and written to metrics.jsonl (None on other ranks)."""
        if self.metrics is None:
            return None
        rec = EpochRecord(
            epoch=epoch,
            epoch_seconds=round(elapsed, 6),
            samples_per_second=round(samples / elapsed if elapsed > 0 else 0.0, 3),
            g_loss=g_loss,
            d_loss=d_loss,
            cost_dollars=EpochRecord.cost(elapsed, self.env.cost_rate_per_hour),
            steps=steps,
            samples=samples,
            world_size=world_size,
            quality=quality or {},
            quality_seconds=round(quality_seconds, 6),
            global_batch=global_batch,
            accumulation_steps=accumulation_steps,
        )
        self.metrics_log.append(rec)
        self.metrics.record_epoch(rec)
        log.info(epoch_line(rec.__dict__, self.epochs))
        return rec

    def stopped(self, saved: Position | None, signal_name: str | None, epoch0: int) -> None:
        if self.progress is None:
            return
        saved = saved or Position(0, 0)
        log.info(
            "stopped (%s); checkpoint at epoch %d step %d; run again to resume",
            signal_name or "peer",
            saved.epoch,
            saved.step,
        )
        # Same fields as while training: the epoch it was in (1-based) and the steps done in it.
        self.progress.update(force=True, state="stopped", epoch=epoch0 + 1)

    def finished(self) -> None:
        if self.progress is not None:
            self.progress.update(force=True, state="finished", epoch=self.epochs)


def epoch_line(rec: dict[str, Any], epochs: int) -> str:
    """The line rank 0 logs after each epoch."""
    quality = "".join(f"  {k} {v:.4g}" for k, v in (rec.get("quality") or {}).items())
    return (
        f"epoch {rec['epoch']}/{epochs}  {rec['epoch_seconds']:.1f}s  "
        f"{rec['samples_per_second']:.1f} samples/s  g_loss {rec['g_loss']:.4f}  "
        f"d_loss {rec['d_loss']:.4f}  cost ${rec['cost_dollars']:.4f}{quality}"
    )
