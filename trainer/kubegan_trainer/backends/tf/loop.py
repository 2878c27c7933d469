"""The TensorFlow custom training loop: one process per worker, `strategy.run` per step.

One iteration, per replica, with k = gradientAccumulationSteps micro-batches of
batchSizePerReplica each (the replica's part of the global batch):

  The task's schedule (kubegan_trainer.worker.phases; 3DGAN: D on real, D on fake, two G
  updates with fresh noise), phase by phase. D's fakes are generated once, outside any
  tape. Each update: per-micro-batch gradients of the per-example loss averaged over the
  global batch (tf.nn.compute_average_loss) / k are summed, then all-reduced (SUM)
  across replicas, clipped to the global norm, and applied.
  Then BatchNorm moving statistics are averaged across replicas, so every replica (and
  worker) holds identical state and checkpoints do not depend on which replica is saved.

With fp16 each network has its own LossScaleOptimizer: losses are scaled in the tape,
gradients are checked for inf/NaN *after* the all-reduce (so all replicas agree), an
overflow skips that network's update and halves its scale. Clipping happens on scaled
gradients against clipNorm x scale, which is the same as clipping unscaled ones.

The replicas agree on the driver's two flags, stop (SIGTERM on any worker) and "interval
checkpoint due" (the chief's clock), inside the same step function (no extra round trip).
Epochs, checkpoint positions and reporting are the framework-free driver's
(`kubegan_trainer.worker.driver`); this class is its TensorFlow backend. Checkpoints are
collective; the chief writes the real files.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import astuple
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from kubegan_api.sections import TrainerConfig

from kubegan_trainer.backends.tf.ckpt import TfCheckpoints
from kubegan_trainer.backends.tf.data import ArraySource, InputSource, next_from
from kubegan_trainer.backends.tf.models import GanTask, build_task, needs_autograph
from kubegan_trainer.backends.tf.noise import KeyedDraws, micro_key
from kubegan_trainer.backends.tf.optim import make_optimizer
from kubegan_trainer.backends.tf.precision import uses_loss_scaling
from kubegan_trainer.backends.tf.stabilizers import Stabilizers
from kubegan_trainer.backends.tf.strategy import StrategyInfo
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.storage.folder import read_manifest
from kubegan_trainer.storage.manifest import ManifestError
from kubegan_trainer.storage.store import CheckpointRef, Position
from kubegan_trainer.worker import driver
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.driver import Driver, Flags, Generated, Hooks, LoopState, StepResult
from kubegan_trainer.worker.elastic import data_position, resume_step, saved_position
from kubegan_trainer.worker.run_end import run_to_end
from kubegan_trainer.worker.schedules import run_updates
from kubegan_trainer.worker.signals import StopFlag

log = logging.getLogger("kubegan_trainer")


class GanTrainer:
    def __init__(
        self,
        config: TrainerConfig,
        env: ClusterEnv,
        info: StrategyInfo,
        source: InputSource,
        stop: StopFlag,
        hooks: Hooks | None = None,
    ) -> None:
        self.config, self.env, self.info, self.source = config, env, info, source
        self.stop, self.hooks = stop, hooks
        t = config.training
        self.strategy = info.strategy
        self.chief = info.chief
        self.rank = info.worker_index
        self.data_kind = source.kind
        self.batch, self.k, self.replicas = (
            t.batch_size_per_replica,
            t.gradient_accumulation_steps,
            info.replicas,
        )
        self.global_batch = self.samples_per_step = self.batch * self.k * self.replicas
        self.world_size = self.replicas
        self.clip = t.gradient_clip_norm
        self.scaling = uses_loss_scaling(t.mixed_precision)
        self.steps_per_epoch = driver.steps_per_epoch(config, source.num_samples, self.replicas)
        self.output = Path(env.output_dir)
        # Seeds Keras' initialisers (and Python, NumPy, TF's global seed): the same job
        # builds the same initial weights in every process, so a resumed run and an
        # uninterrupted one can agree bitwise.
        keras.utils.set_random_seed(t.seed)
        with self.strategy.scope():
            self.task: GanTask = build_task(config, source)
            # In the strategy's scope each replica draws its own stream from this generator;
            # its state is checkpointed, so a resumed run continues the same random numbers.
            self.rng = tf.random.Generator.from_seed(t.seed)
            self.task.rng.gen = self.rng
            self.G, self.D = self.task.generator, self.task.discriminator
            self.opt_g, self.opt_d = (
                make_optimizer(
                    getattr(t, net),
                    t.mixed_precision,
                    f"{net}_opt",
                    run_updates(t.epochs, self.steps_per_epoch, self.task.schedule.count(net)),
                )
                for net in ("generator", "discriminator")
            )
            self.opt_g.build(self.G.trainable_variables)
            self.opt_d.build(self.D.trainable_variables)
            # EMA, R1, DiffAugment (stabilizers.py); after G and D are taken from the task.
            self.stab = Stabilizers(
                config, self.task, source, self.samples_per_step, tuple(source.sample_arrays)
            )
            self.state = {
                "epoch": tf.Variable(0, dtype=tf.int64, trainable=False),
                "step": tf.Variable(0, dtype=tf.int64, trainable=False),
                "global_step": tf.Variable(0, dtype=tf.int64, trainable=False),
                "g_sum": tf.Variable(0.0, dtype=tf.float64, trainable=False),
                "d_sum": tf.Variable(0.0, dtype=tf.float64, trainable=False),
                "acc_steps": tf.Variable(0, dtype=tf.int64, trainable=False),
                "elapsed": tf.Variable(0.0, dtype=tf.float64, trainable=False),
                "replicas": tf.Variable(self.replicas, dtype=tf.int64, trainable=False),
            }
        # Non-trainable float state (BatchNorm moving statistics) averaged after each step.
        self._sync_vars = [
            v
            for m in (self.G, self.D)
            for v in m.non_trainable_variables
            if "float" in str(v.dtype)
        ]
        self.checkpoint = tf.train.Checkpoint(
            generator=self.G,
            discriminator=self.D,
            opt_g=self.opt_g,
            opt_d=self.opt_d,
            rng=self.rng,
            **self.state,
            **self.stab.objects,
        )
        self.ckpts = TfCheckpoints(
            Path(env.checkpoint_dir),
            config.checkpoint.keep,
            self.checkpoint,
            info.worker_index,
            config.checkpoint,
        )
        self._reclaim_pending = False
        self.global_step = 0  # optimizer steps done: the noise's key (noise.py)
        self.phase_log: list[str] | None = None  # tests: the optimizer updates, in order
        # compile: XLA for each replica's compute (_phase); channelsLast has nothing to change
        # here, Keras is channels-last already.
        self._train_step = tf.function(self._distributed_step, autograph=needs_autograph(config))

    # ---- one step --------------------------------------------------------------------------
    def _phase(
        self,
        opt: Any,
        variables: list,
        loss_fn: Callable[[int], tf.Tensor],
        reg_fn: Callable[[int], tf.Tensor] | None = None,
    ) -> tf.Tensor:
        """One optimizer update from k micro-batches; returns this replica's share of the
        globally averaged loss (summing the shares over replicas gives the mean). `reg_fn`:
        a per-example regularizer (R1) the update minimizes too, not part of the loss."""
        ctx = tf.distribute.get_replica_context()
        acc = [tf.zeros_like(v) for v in variables]
        total = tf.constant(0.0, tf.float32)
        per_replica_batch = self.batch * self.replicas

        def micro(i: int) -> tuple[list, tf.Tensor]:
            """Micro-batch i's gradients and share of the loss: this replica's compute, which
            `compile` hands to XLA (the all-reduce and the update stay outside: an XLA
            cluster cannot span the replicas' devices)."""
            with tf.GradientTape() as tape:
                per_example = tf.cast(loss_fn(i), tf.float32)
                loss = (
                    tf.nn.compute_average_loss(per_example, global_batch_size=per_replica_batch)
                    / self.k
                )
                objective = loss
                if reg_fn is not None:
                    objective += (
                        tf.nn.compute_average_loss(
                            tf.cast(reg_fn(i), tf.float32), global_batch_size=per_replica_batch
                        )
                        / self.k
                    )
                scaled = opt.scale_loss(objective) if self.scaling else objective
            return tape.gradient(scaled, variables), loss

        if self.config.training.compile:
            micro = tf.function(micro, jit_compile=True)
        for i in range(self.k):
            grads, loss = micro(i)
            acc = [
                a if g is None else a + tf.cast(g, a.dtype) for a, g in zip(acc, grads, strict=True)
            ]
            total += loss
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, acc)
        if self.clip is not None:
            limit = self.clip * (tf.cast(opt.dynamic_scale, tf.float32) if self.scaling else 1.0)
            grads, _ = tf.clip_by_global_norm(grads, limit)
        opt.apply(grads, variables)
        return total

    def _replica_step(
        self,
        batch: dict[str, tf.Tensor],
        flags: tf.Tensor,
        r1_due: tuple[bool, ...] = (),
        step: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, ...]:
        """`r1_due`: for each discriminator update on real data, whether it carries R1.
        `step`: the global step, which keys each micro-batch's noise (noise.py)."""
        task, rng = self.task, self.rng
        due = iter(r1_due)
        ctx = tf.distribute.get_replica_context()
        sched = task.schedule
        micro, draw_inputs = self._micro_batches(batch, step)
        inputs = draw_inputs()
        fakes = [
            tf.stop_gradient(task.generate(x, training=sched.d_fakes_training)) for x in inputs
        ]
        totals = {"discriminator": tf.constant(0.0), "generator": tf.constant(0.0)}
        for phase in sched.phases:
            score = getattr(task, phase.loss)
            for _ in range(phase.repeats):
                if phase.fresh_inputs:
                    inputs = draw_inputs()
                if phase.network == "discriminator":
                    opt, variables = self.opt_d, self.D.trainable_variables

                    def loss(i: int, score=score, inp=inputs) -> tf.Tensor:
                        return score(micro[i], fakes[i], inp[i], rng)
                else:
                    opt, variables = self.opt_g, self.G.trainable_variables

                    def loss(i: int, score=score, inp=inputs) -> tf.Tensor:
                        return score(micro[i], task.generate(inp[i], training=True), inp[i])

                reg = None
                if phase.network == "discriminator" and phase.sees_real and next(due):
                    reg = self._r1_fn(micro, opt)
                totals[phase.network] += self._phase(opt, variables, loss, reg)
                # Recorded while tracing (the graph's update order), for the first replica.
                first = tf.get_static_value(ctx.replica_id_in_sync_group) == 0
                if self.phase_log is not None and first:
                    self.phase_log.append(f"{phase.network}:{phase.loss}")
        if self._sync_vars:
            synced = ctx.all_reduce(
                tf.distribute.ReduceOp.MEAN, [tf.identity(v.value) for v in self._sync_vars]
            )
            for v, s in zip(self._sync_vars, synced, strict=True):
                v.assign(s)
        # tf.identity places the host-side flags on this replica's device for the collective.
        agreed = ctx.all_reduce(
            tf.distribute.ReduceOp.SUM, tf.identity(flags)
        )  # > 0: someone set it
        g = totals["generator"] / sched.count("generator")
        d = totals["discriminator"] / sched.count("discriminator")
        return (g, d, agreed, batch["index"])

    def _micro_batches(
        self, batch: dict[str, tf.Tensor], step: tf.Tensor | None
    ) -> tuple[list[dict[str, tf.Tensor]], Callable[[], list[dict[str, tf.Tensor]]]]:
        """This replica's k micro-batches, and a function that draws their generator inputs
        afresh: keyed by their examples (noise.py) when the global `step` is known."""
        b, task, rng = self.batch, self.task, self.rng
        micro = [{k: v[i * b : (i + 1) * b] for k, v in batch.items()} for i in range(self.k)]
        seed = self.config.training.seed
        draws = [
            rng if step is None else KeyedDraws(seed, step, micro_key(m["index"]), rng)
            for m in micro
        ]

        def draw_inputs() -> list[dict[str, tf.Tensor]]:
            return [task.generator_inputs(m, g) for m, g in zip(micro, draws, strict=True)]

        return micro, draw_inputs

    def _r1_fn(self, micro: list[dict[str, tf.Tensor]], opt: Any) -> Callable[[int], tf.Tensor]:
        scale = tf.cast(opt.dynamic_scale, tf.float32) if self.scaling else None
        return lambda i: self.stab.r1_term(micro[i], scale)

    def _distributed_step(
        self,
        batch: Any,
        flags: tf.Tensor,
        r1_due: tuple[bool, ...],
        ema_beta: tf.Tensor,
        step: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, ...]:
        """One step on every replica, then (cross-replica) the generator's average."""
        g, d, agreed, index = self.strategy.run(
            lambda b, f: self._replica_step(b, f, r1_due, step), args=(batch, flags)
        )
        self.stab.after_step(ema_beta)
        g = self.strategy.reduce(tf.distribute.ReduceOp.SUM, g, axis=None)
        d = self.strategy.reduce(tf.distribute.ReduceOp.SUM, d, axis=None)
        agreed = self.strategy.experimental_local_results(agreed)[0]
        index = tf.concat(self.strategy.experimental_local_results(index), 0)
        return g, d, agreed, index

    def _reclaim_sigterm(self) -> None:
        """TensorFlow's coordination service (multi-worker) installs a C++ SIGTERM handler
        of its own (its preemption notifier), which silently swallows the signal; put
        ours back once the collectives exist, so SIGTERM still means "checkpoint and exit"."""
        if threading.current_thread() is threading.main_thread():
            self.stop.install()

    # ---- checkpoints -----------------------------------------------------------------------
    def save(self, pos: Position, state: LoopState, extra: dict[str, Any] | None = None) -> None:
        """Collective: every worker calls it; the chief writes the files (`extra` into the
        manifest)."""
        s = self.state
        s["epoch"].assign(pos.epoch)
        s["step"].assign(pos.step)
        s["global_step"].assign(state.global_step)
        s["g_sum"].assign(state.g_sum)
        s["d_sum"].assign(state.d_sum)
        s["acc_steps"].assign(state.steps)
        s["elapsed"].assign(state.elapsed)
        self.stab.before_save()
        self.ckpts.save(
            pos,
            {
                "framework": "tensorflow",
                "global_step": state.global_step,
                "replicas": self.replicas,
                "workers": self.info.num_workers,
                **data_position(pos.step, self.global_batch),
                **(extra or {}),
            },
        )

    def _same_everywhere(self, value: int) -> bool:
        """Whether every replica holds the same integer (workers must pick one checkpoint).
        ReduceOp has only SUM and MEAN: equal values have zero variance."""

        def fn() -> tf.Tensor:
            v = tf.constant(float(value), tf.float64)
            return tf.stack([v, v * v])

        mean = self.strategy.reduce(tf.distribute.ReduceOp.MEAN, self.strategy.run(fn), axis=None)
        m, m2 = (float(x) for x in mean.numpy())
        return abs(m2 - m * m) < 1e-6

    def resume(self) -> tuple[Position, LoopState]:
        error, saved = "", None
        try:
            saved = self.ckpts.latest_valid()
        except TrainerError as err:
            error = str(err)
        # What each worker found: (epoch, step), (-1, 0) none, (-2, 0) none intact.
        mark = (-2, 0) if error else (-1, 0) if saved is None else astuple(saved.position)
        if self.info.num_workers > 1 and not all(self._same_everywhere(v) for v in mark):
            name = saved.name if saved else "none"
            raise TrainerError(
                f"spec.checkpoint.claimName: workers see different checkpoints in "
                f"{self.env.checkpoint_dir} (this one: {name}); TensorFlow workers "
                "need one shared checkpoint volume"
            )
        if error:
            raise TrainerError(error)
        if saved is None:
            return Position(0, 0), LoopState()
        self.ckpts.restore(saved)
        s = self.state
        saved_replicas = int(s["replicas"].numpy())
        step = self._resume_step(saved, int(s["step"].numpy()), saved_replicas)
        pos = Position(int(s["epoch"].numpy()), step)
        state = LoopState(
            int(s["global_step"].numpy()),
            float(s["g_sum"].numpy()),
            float(s["d_sum"].numpy()),
            int(s["acc_steps"].numpy()),
            float(s["elapsed"].numpy()),
        )
        self.global_step = state.global_step
        if saved_replicas != self.replicas:
            if self.chief:
                log.warning(
                    "replicas changed from %d to %d (global batch %d kept, gradient "
                    "accumulation %d): other random streams re-seeded, so the run matches an "
                    "unbroken one within float tolerance, not bitwise",
                    saved_replicas,
                    self.replicas,
                    self.global_batch,
                    self.k,
                )
            self.rng.reset_from_seed(self.config.training.seed + 104729 * state.global_step)
            s["replicas"].assign(self.replicas)
        self.stab.after_restore(saved_replicas == self.replicas, state.global_step)
        return pos, state

    def _resume_step(self, ref: CheckpointRef, step: int, saved_replicas: int) -> int:
        """The step of the current global batch the epoch resumes at (worker/elastic.py)."""
        try:
            record = read_manifest(ref.path).extra
        except (OSError, ManifestError) as err:  # validated moments ago: a race, in words
            raise TrainerError(f"checkpoint {ref.path}: manifest unreadable ({err})") from None
        resized = saved_replicas != self.replicas
        step = resume_step(str(ref.path), step, saved_position(record), self.global_batch, resized)
        if step and resized and not isinstance(self.source, ArraySource):
            raise TrainerError(
                f"checkpoint {ref.path}: a streamed data set cannot change size mid-epoch "
                "(each worker reads its own shards); resume at the size that wrote it"
            )
        return step

    # ---- samples ---------------------------------------------------------------------------
    def real_examples(self, n: int) -> dict[str, np.ndarray]:
        arrays = self.source.sample_arrays
        n = min(n, len(next(iter(arrays.values()))))
        return {k: _channels_first(v[:n]) for k, v in arrays.items()}

    def generate(self, real: dict[str, np.ndarray], seed: int) -> Generated:
        """Chief only: generate for `real` from a private generator, in training mode
        (batch statistics, as in training) with the moving statistics restored
        afterwards, so the training state and random stream are unchanged."""
        batch = {k: tf.constant(_channels_last(v)) for k, v in real.items()}
        gen = tf.random.Generator.from_seed(seed)
        sampler = self.stab.sampling_task()  # the generator's average, when there is one
        saved = [v.numpy() for v in sampler.generator.non_trainable_variables]
        with self.strategy.scope():
            inputs = self.task.generator_inputs(batch, gen)
            fake = sampler.generate(inputs, training=True)
        for v, old in zip(sampler.generator.non_trainable_variables, saved, strict=True):
            v.assign(old)
        fake = _channels_first(np.asarray(tf.cast(fake, tf.float32).numpy()))
        return Generated(fake, {k: np.asarray(v.numpy()) for k, v in inputs.items()})

    def weights(self) -> dict[str, np.ndarray]:
        def flat(model: keras.Model) -> np.ndarray:
            return np.concatenate(
                [np.asarray(v.numpy(), np.float64).ravel() for v in model.weights]
            )

        return {"generator": flat(self.G), "discriminator": flat(self.D)}

    # ---- the driver's protocol ----------------------------------------------------------------
    def epoch_losses(self, state: LoopState) -> tuple[float, float]:
        # Each step's losses are already means over every replica: nothing to reduce.
        steps = max(state.steps, 1)
        return float(state.g_sum) / steps, float(state.d_sum) / steps

    def batches(self, epoch0: int, first_step: int) -> Iterator[Any]:
        steps, src = self.steps_per_epoch, self.source
        first = first_step if src.skip_in_source else 0
        it = iter(src.distribute(self.strategy, epoch0, first, self.global_batch, steps))
        if not src.skip_in_source:
            for _ in range(first_step):  # FILE-sharded streams: advance, do not train
                next_from(src, it)
        self._reclaim_pending = True
        for _ in range(first_step, steps):
            yield next_from(src, it)

    def step(self, batch: Any, local_flags: Flags) -> StepResult:
        flags = tf.constant([float(f) for f in local_flags()])
        r1_due = self.stab.r1_due(self.task.schedule.real_d_updates())
        key = tf.constant(self.global_step, tf.int64)
        g, d, agreed, index = self._train_step(batch, flags, r1_due, self.stab.ema_beta(), key)
        self.global_step += 1
        if self._reclaim_pending:
            self._reclaim_sigterm()
            self._reclaim_pending = False
        return StepResult(
            float(g), float(d), bool(agreed[0] > 0), bool(agreed[1] > 0), index.numpy()
        )

    def fit(self) -> int:
        driver = Driver(self, self.config, self.env, self.stop, self.hooks)
        store = self.ckpts.store if self.chief else None
        return run_to_end(
            driver, store, self.steps_per_epoch, lambda: self.stop.requested_at, self.export
        )

    def export(self, ref: CheckpointRef, out: Path) -> dict[str, Path]:
        """The chief: the generator of checkpoint `ref` as a SavedModel + JSON (export.py)."""
        from kubegan_trainer.backends.tf.export import export_generator

        return export_generator(self, ref, out)


def _channels_first(a: np.ndarray) -> np.ndarray:
    return np.moveaxis(a, -1, 1) if a.ndim >= 4 else a


def _channels_last(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if a.ndim >= 4 else a
