"""The epoch driver, written once for every framework.

It owns what must not differ between PyTorch and TensorFlow: where training resumes, the
epoch and step loop, the per-step agreement on "stop" and "interval checkpoint due",
which positions are checkpointed, the epoch's running sums, samples and reporting. A
backend owns the numerics behind a small protocol (`Backend`): restore and write its
state, produce the epoch's batches, run one optimizer step, reduce the epoch's losses
across ranks, and generate images from given real inputs.

One step, as the driver sees it:

    result = backend.step(batch, local_flags)   # the backend calls local_flags() when it is
                                                # ready to agree on them with its peers
    state.g_sum += result.g_loss                # framework scalars: no host sync per step
    if result.stop or result.due: checkpoint    # the same decision on every rank

PyTorch reads the flags after its step and agrees on them with one small all-reduce;
TensorFlow reads them before and agrees inside its step function (no extra round trip).
The driver does not care which, so each backend keeps its cheapest collective.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from kubegan_api.contract import EXIT_INTERRUPTED
from kubegan_api.sections import TrainerConfig

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data.build import held_out_pairs
from kubegan_trainer.storage import termination
from kubegan_trainer.storage.retention import SCORE_KEY, Score
from kubegan_trainer.storage.store import Position
from kubegan_trainer.worker import startup
from kubegan_trainer.worker.artifacts import RunArtifacts
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.intervals import CheckpointSchedule
from kubegan_trainer.worker.quality import Quality, quality_for
from kubegan_trainer.worker.reporting import Reporter
from kubegan_trainer.worker.samples import sample_count, save_samples
from kubegan_trainer.worker.signals import StopFlag
from kubegan_trainer.worker.standard_scores import StandardScores

log = logging.getLogger("kubegan_trainer")

SAMPLE_SEED_OFFSET = 12345  # the fixed sample noise: its own stream, never training's


def steps_per_epoch(config: TrainerConfig, samples: int, replicas: int) -> int:
    """Optimizer steps per epoch: every replica takes k micro-batches of its own per step,
    the remainder of the data set is dropped, `stepsPerEpoch` caps it."""
    t = config.training
    per_step = t.batch_size_per_replica * t.gradient_accumulation_steps * replicas
    steps = samples // per_step
    if t.steps_per_epoch is not None:
        steps = min(steps, t.steps_per_epoch)
    if steps < 1:
        raise TrainerError(
            f"spec.training.batchSizePerReplica: {t.batch_size_per_replica} x "
            f"gradientAccumulationSteps {t.gradient_accumulation_steps} x {replicas} replicas "
            f"needs at least {per_step} samples, the dataset has {samples}"
        )
    return steps


@dataclass
class LoopState:
    """What a checkpoint holds besides networks and optimizers: the optimizer steps done
    and the running sums of the current epoch, so a resumed epoch reports the numbers an
    uninterrupted one would have."""

    global_step: int = 0
    g_sum: Any = 0.0  # a float or a framework scalar (kept on its device)
    d_sum: Any = 0.0
    steps: int = 0
    elapsed: float = 0.0  # seconds spent in this epoch by earlier runs

    def next_epoch(self) -> LoopState:
        return LoopState(global_step=self.global_step)


@dataclass(frozen=True)
class StepResult:
    g_loss: Any  # this step's mean losses (framework scalars or floats)
    d_loss: Any
    stop: bool  # agreed by every rank
    due: bool
    index: np.ndarray | None = None  # dataset indices this worker trained on (tests)


Flags = Callable[[], tuple[bool, bool]]  # (stop requested here, interval due here)


class Backend(Protocol):
    """What the driver needs from a framework."""

    chief: bool  # writes outputs (rank 0 / worker 0)
    rank: int  # this process's index, for hooks (rank, or worker index)
    world_size: int  # replicas that share a step (for throughput and metrics.jsonl)
    steps_per_epoch: int
    samples_per_step: int  # global batch of one optimizer step
    data_kind: str  # "images" | "paired" | "showers"
    task: Any  # the model: its optional quality score (kubegan_trainer.worker.model_api)

    def resume(self) -> tuple[Position, LoopState]:
        """Collective: load the newest valid checkpoint, or (0, 0) and a fresh state."""

    def save(self, pos: Position, state: LoopState, extra: dict[str, Any] | None = None) -> None:
        """Collective: write a checkpoint at `pos` (the chief writes the files; `extra`
        goes into its manifest: the epoch's quality score)."""

    def batches(self, epoch0: int, first_step: int) -> Iterator[Any]:
        """The epoch's batches from `first_step` on, in the order of an unbroken run."""

    def step(self, batch: Any, local_flags: Flags) -> StepResult:
        """One optimizer step and the agreement on this rank's flags."""

    def epoch_losses(self, state: LoopState) -> tuple[float, float]:
        """Collective: the epoch's mean (g, d) losses over every rank."""

    def real_examples(self, n: int) -> dict[str, np.ndarray]:
        """The first `n` examples of the data set, channels first."""

    def generate(self, real: dict[str, np.ndarray], seed: int) -> Generated:
        """Chief: generate for `real`'s conditioning from a private RNG, leaving the
        training state (BatchNorm buffers, random streams) as it was."""

    def weights(self) -> dict[str, np.ndarray]:
        """Every weight of each network, flattened (tests compare workers and runs)."""


@dataclass(frozen=True)
class Generated:
    images: np.ndarray  # channels first, float32
    inputs: dict[str, np.ndarray] = field(default_factory=dict)  # e.g. the labels asked for


@dataclass
class Hooks:
    """In-process hooks for tests and tooling; the driver runs fine without any. Nothing in
    the trainer sets them: a caller passes them in (`kubegan_trainer.__main__.main(hooks)`,
    or a backend's `run`), as the tests' own entry point does (tests/trainer/hooked.py)."""

    on_step: Callable[[Any, int, int, dict[str, Any]], None] | None = None
    # (backend, epoch0, steps done in the epoch, {"global_step", "g_loss", "d_loss", "index"})
    before_flags: Callable[[Any, int], None] | None = None
    # (backend, global step whose stop/due flags are about to be read: 1 for the first)
    on_finish: Callable[[Any], None] | None = None
    # (backend) when the run ends, stopped, finished or failed


class Driver:
    def __init__(
        self,
        backend: Backend,
        config: TrainerConfig,
        env: ClusterEnv,
        stop: StopFlag,
        hooks: Hooks | None = None,
    ) -> None:
        self.b, self.config, self.stop = backend, config, stop
        self.hooks = hooks or Hooks()
        self.epochs = config.training.epochs
        self.output = Path(env.output_dir)
        self.schedule = CheckpointSchedule(
            config.checkpoint.interval_epochs, config.checkpoint.interval_minutes
        )
        self.report = Reporter(env, self.output, self.epochs, backend.chief)
        # Rank 0's samples, history, event files and log, stored beside the checkpoints.
        self.artifacts = (
            RunArtifacts.open(env, config, self.report.metrics) if backend.chief else None
        )
        self.state = LoopState()
        self.last_saved: Position | None = None
        self.quality: Quality | None = None  # built on the chief at the first epoch's end
        self._quality_built = False
        # FID/KID (spec.quality): built now, so bad feature weights fail the job at once.
        self.standard = StandardScores.open(config, backend.data_kind) if backend.chief else None
        self._score: tuple[int, Score] | None = None  # the newest epoch's primary score
        self.completed = False  # this process trained the last epoch

    # ---- the whole run -------------------------------------------------------------------
    def fit(self) -> int:
        """Train to the last epoch; EXIT_INTERRUPTED after a stop request (checkpointed)."""
        try:
            return self._fit()
        finally:
            if self.hooks.on_finish:
                self.hooks.on_finish(self.b)
            termination.write(self.last_saved)

    def _fit(self) -> int:
        start, self.state = self.b.resume()
        startup.mark("checkpoint")
        self.last_saved = start if start != Position(0, 0) else None
        if self.artifacts is not None:
            self.artifacts.start(start.epoch)
        if self.report.start(start, self.b.steps_per_epoch, self.b.world_size):
            return 0
        for epoch0 in range(start.epoch, self.epochs):
            first = start.step if epoch0 == start.epoch else 0
            if first == 0:
                self.state = self.state.next_epoch()
            if self._run_epoch(epoch0, first):
                self.report.stopped(self.last_saved, self.stop.signal_name, epoch0)
                return EXIT_INTERRUPTED
        self.report.finished()
        self.completed = True
        return 0

    def save(self, pos: Position) -> None:
        if pos == self.last_saved:
            return
        t0 = time.perf_counter()
        self.b.save(pos, self.state, self._manifest_extra(pos))
        self.report.checkpoint_written(time.perf_counter() - t0, pos)
        self.schedule.mark()
        self.last_saved = pos

    def _manifest_extra(self, pos: Position) -> dict[str, Any] | None:
        """An epoch-end checkpoint carries its epoch's primary quality score, by which
        keepBest keeps checkpoints and the export picks one (storage/retention.py)."""
        if self._score is None or pos != Position(self._score[0], 0):
            return None
        return {SCORE_KEY: self._score[1].to_manifest()}

    # ---- one epoch -----------------------------------------------------------------------
    def _local_flags(self) -> tuple[bool, bool]:
        # Just before the flags are read, so a hook that asks to stop during global step S
        # has the checkpoint land at S in every backend.
        if self.hooks.before_flags:
            self.hooks.before_flags(self.b, self.state.global_step + 1)
        return self.stop.requested, self.b.chief and self.schedule.time_due()

    def _run_epoch(self, epoch0: int, first_step: int) -> bool:
        """One epoch from `first_step`; True when stopped early."""
        steps, st = self.b.steps_per_epoch, self.state
        seg_start = time.perf_counter()
        stop = False
        for step, batch in enumerate(self.b.batches(epoch0, first_step), start=first_step):
            t0 = time.perf_counter()
            r = self.b.step(batch, self._local_flags)
            startup.CLOCK.first_step()
            st.g_sum = st.g_sum + r.g_loss
            st.d_sum = st.d_sum + r.d_loss
            st.steps += 1
            st.global_step += 1
            stop = r.stop
            if self.hooks.on_step:
                info = {"global_step": st.global_step, "index": r.index}
                info.update(g_loss=float(r.g_loss), d_loss=float(r.d_loss))
                self.hooks.on_step(self.b, epoch0, step + 1, info)
            self.report.step_done(time.perf_counter() - t0, epoch0, step + 1, steps)
            if step + 1 == steps:
                break  # the epoch end below checkpoints if needed
            if r.stop or r.due:
                now = time.perf_counter()
                st.elapsed += now - seg_start
                seg_start = now
                self.save(Position(epoch0, step + 1))
                if r.stop:
                    return True
        elapsed = st.elapsed + (time.perf_counter() - seg_start)
        self._finish_epoch(epoch0 + 1, elapsed)
        if stop or self.schedule.epoch_due(epoch0 + 1, self.epochs):
            self.save(Position(epoch0 + 1, 0))
        return stop

    def _finish_epoch(self, epoch: int, elapsed: float) -> None:
        g, d = self.b.epoch_losses(self.state)  # collective: every rank takes part
        quality: dict[str, float] = {}
        quality_seconds = 0.0
        sample = None
        if self.b.chief:
            sample = self.render_samples(epoch)
            quality, quality_seconds = self.measure_quality()
            if self.standard is not None and self.standard.due(epoch):
                standard, seconds = self.standard.measure(self.b)
                quality, quality_seconds = {**quality, **standard}, quality_seconds + seconds
            picked = self.quality.primary.pick(quality) if self.quality is not None else None
            self._score = (epoch, Score(*picked)) if picked else None
        rec = self.report.epoch_done(
            epoch,
            elapsed,
            steps=self.state.steps,
            samples=self.state.steps * self.b.samples_per_step,
            g_loss=g,
            d_loss=d,
            world_size=self.b.world_size,
            quality=quality,
            quality_seconds=quality_seconds,
            global_batch=self.b.samples_per_step,
            accumulation_steps=self.config.training.gradient_accumulation_steps,
        )
        if rec is not None and self.artifacts is not None:
            self.artifacts.epoch_done(rec, sample)

    def measure_quality(self) -> tuple[dict[str, float], float]:
        """Chief: this epoch's quality scores (quality.py) and what they cost, the scorer's
        one-off set-up (a classifier fit on the real data) included the first time."""
        setup = 0.0
        if not self._quality_built:
            t0 = time.perf_counter()
            self.quality = quality_for(
                self.b.data_kind,
                self.b,
                self.config.training.seed,
                held_out=held_out_pairs(self.config),
                model=self.b.task,
            )
            self._quality_built = True
            setup = time.perf_counter() - t0
        if self.quality is None:
            return {}, 0.0
        scores, seconds = self.quality.measure(self.b)
        return scores, seconds + setup

    def render_samples(self, epoch: int) -> Path:
        """Chief: samples/epoch-NNNN.png from fixed real inputs and fixed noise."""
        kind = self.b.data_kind
        real = self.b.real_examples(sample_count(kind, "label" in self.b.real_examples(1)))
        fake = self.b.generate(real, self.config.training.seed + SAMPLE_SEED_OFFSET)
        path = self.output / "samples" / f"epoch-{epoch:04d}.png"
        labels = fake.inputs.get("label") if kind == "images" else None
        save_samples(path, kind, real, fake.images, caption=f"epoch {epoch}", labels=labels)
        return path
